"""Bad input: a one-line UsageError that says what was wrong and how to fix it,
and nothing lost (the cluster and the notebook's variables survive)."""

import pytest
from IPython.core.error import UsageError

pytestmark = pytest.mark.timeout(120)



@pytest.mark.parametrize("line, message", [
    ("start -n 0", "expected a whole number >= 1, got 0"),
    ("start -n -1", "expected a whole number >= 1, got -1"),
    ("start -n abc", "expected a whole number, got 'abc'"),
    ("start --bogus", "unrecognized arguments: --bogus"),
    ("start --communication smoke", "invalid choice: 'smoke'"),
    ("start --timeout -5", "expected seconds > 0"),
    ("start --gpus-per-worker x", "expected auto or a whole number >= 0, got 'x'"),
    ("start --gpus-per-worker -1", "expected auto or a whole number >= 0, got '-1'"),
    ("", "needs a command: start, attach, status, history, dashboard, checkpointing, restore, "
         "checkpoints, tensorboard, diagnose, runs, tracking, restart, resize or stop"),
    ("runs --delete ../etc", "no run named '../etc' under "),
    ("runs --root /no/such/dir", "--root /no/such/dir: no such directory"),
    ("dashboard maybe", "invalid choice: 'maybe'"),
    ("history", "no training has been recorded yet"),
    ("launch", "invalid choice: 'launch'"),
    ("status", "no cluster is running: start one with `%tfdist start -n 2`"),
    ("stop", "no cluster is running"),
    ("restart", "no cluster is running"),
    ("attach --url-file a.json --profile p", "either --url-file or --profile"),
    ("tracking nosuch", "invalid choice: 'nosuch' (choose from 'mlflow', 'off')"),
    ("tracking off ./mlflow.db", "`%tfdist tracking off` takes no URI (got './mlflow.db')"),
])
def test_line_magic_misuse(ip, line, message):
    with pytest.raises(UsageError) as error:
        ip.run_line_magic("tfdist", line)
    text = str(error.value)
    assert message in text
    assert "\n" not in text


def test_argument_errors_show_usage(ip):
    with pytest.raises(UsageError, match=r"usage: %tfdist start \[-n N\] \[--timeout S\]"):
        ip.run_line_magic("tfdist", "start -n 0")


def test_cell_before_any_cluster_says_how_to_start(ip):
    ip.user_ns["precious"] = 42
    with pytest.raises(UsageError, match="no cluster is running: start one with"):
        ip.run_cell_magic("tfdist", "", "x = 1")
    assert ip.user_ns["precious"] == 42


def test_empty_cell(ip):
    with pytest.raises(UsageError, match="the %%tfdist cell is empty"):
        ip.run_cell_magic("tfdist", "", "  \n\n")


def test_cell_option_misuse(ip):
    with pytest.raises(UsageError, match="expected seconds, got 'soon'"):
        ip.run_cell_magic("tfdist", "--timeout soon", "x = 1")


def test_help_is_generated_from_the_parsers(ip):
    doc = ip.find_line_magic("tfdist").__doc__
    for option in ("start", "attach", "--gpus-per-worker", "--communication", "--out",
                   "--push", "--all-output", "--cluster-id", "--url-file"):
        assert option in doc


def test_load_ext_does_not_import_tensorflow():
    # %load_ext stays fast by importing none of the heavy libraries (the workers import
    # TensorFlow; the notebook imports the others when a command needs them). Checked by
    # what is imported, not by a clock: timings belong to the benchmarks.
    import subprocess
    import sys

    heavy = ("tensorflow", "keras", "tf_keras", "mlflow", "pandas", "matplotlib", "numpy")
    code = ("from IPython.testing.globalipapp import get_ipython\n"
            "import sys\nip = get_ipython()\nbefore = set(sys.modules)\n"
            "ip.run_line_magic('load_ext', 'tfmw_notebook')\n"
            "new = {name.split('.')[0] for name in set(sys.modules) - before}\n"
            f"print(' '.join(name for name in {heavy!r} if name in new) or '-')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.split() == ["-"], f"%load_ext imported {out.stdout.strip()}"


# -- misuse while a real cluster runs (shared kernel) ------------------------------

def usage_error(out):
    """The one line a kernel shows for a UsageError (IPython prints it, no traceback)."""
    assert out.status == "error", out
    lines = [line for line in out.stderr.splitlines() if line.startswith("UsageError: ")]
    assert len(lines) == 1, out.stderr
    assert out.error is None  # no traceback was published
    return lines[0]


def test_start_while_running_keeps_the_cluster(tf_kernel):
    tf_kernel.ok("%%tfdist\nkept = 7")
    out = tf_kernel.execute("%tfdist start -n 2")
    assert "already running: `%tfdist stop` it first, or `%tfdist restart`" in usage_error(out)
    assert tf_kernel.ok("%%tfdist\nkept").results[-1]["text/plain"] == "7"


def test_syntax_error_is_shown_and_nothing_is_sent(tf_kernel):
    tf_kernel.ok("%%tfdist\nmarker = 'before'")
    out = tf_kernel.execute("%%tfdist\nmarker = 'after'\nif True print('x')")
    message = usage_error(out)
    assert "SyntaxError at line 2" in message
    assert "nothing was sent to the workers" in message
    assert tf_kernel.ok("%%tfdist\nmarker").results[-1]["text/plain"] == "'before'"


def test_out_of_a_name_the_chief_lacks(tf_kernel):
    out = tf_kernel.execute("%%tfdist --out no_such_name\ny = 1")
    message = usage_error(out)
    assert "the chief has no variable named 'no_such_name'" in message
    assert "assign it in the cell or drop --out" in message


def test_push_of_a_missing_name(tf_kernel):
    out = tf_kernel.execute("%%tfdist --push not_defined_here\ny = 1")
    assert "the notebook has no variable named 'not_defined_here'" in usage_error(out)


def test_push_of_an_unpicklable_value(tf_kernel):
    tf_kernel.ok("import threading\nlock = threading.Lock()\nsafe = 5")
    out = tf_kernel.execute("%%tfdist --push lock\ny = 1")
    assert "--push lock: it cannot be sent to the workers" in usage_error(out)
    assert tf_kernel.ok("print(safe)").stdout.strip() == "5"


def test_user_error_on_every_worker_names_a_worker_and_recovers(tf_kernel):
    out = tf_kernel.execute("%%tfdist\nundefined_thing + 1")
    assert out.error["ename"] == "WorkerFailed"
    assert "NameError" in out.error["evalue"]
    assert "undefined_thing" in "\n".join(out.error["traceback"])
    assert tf_kernel.ok("%%tfdist\n1 + 1").results[-1]["text/plain"] == "2"
