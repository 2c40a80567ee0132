"""A refused `%tfdist` / `%%tfdist` line ends its cell as an error, in one line, and
changes nothing.

IPython shows a UsageError as one line on stderr and publishes no error output (DESIGN
fact 21), but the kernel's execute_reply says "error": nbclient stops there, and the
kernel drops the cells queued behind it (ipykernel's stop_on_error), which is how
JupyterLab's Run All stops. Each refusal runs in the shared real kernel; the cluster and
the notebook's and the workers' variables come out of it as they went in.
"""

import time

import pytest

from kernel_session import per_worker

pytestmark = pytest.mark.timeout(300)

BODY = "\nrefusal_kept = 'changed'"   # a cell body that must not run

REFUSALS = {
    "unknown option": ("%tfdist start --bogus", "unrecognized arguments: --bogus"),
    "unknown cell option": ("%%tfdist --bogus" + BODY, "unrecognized arguments: --bogus"),
    "zero workers": ("%tfdist resize -n 0", "expected a whole number >= 1, got 0"),
    "not a number": ("%tfdist start -n abc", "expected a whole number, got 'abc'"),
    "bad cell value": ("%%tfdist --timeout soon" + BODY, "expected seconds, got 'soon'"),
    "shard of a generator": ("%%tfdist --shard refusal_gen" + BODY,
                             "--shard refusal_gen: a generator cannot be split by rows"),
    "shard of an undefined name": ("%%tfdist --shard not_defined_here" + BODY,
                                   "the notebook has no variable named 'not_defined_here'"),
    "push of an undefined name": ("%%tfdist --push not_defined_here" + BODY,
                                  "the notebook has no variable named 'not_defined_here'"),
    "second start": ("%tfdist start -n 2", "a cluster of 2 workers is already running"),
    "resize past the host": ("%tfdist resize -n 100000", "100000 workers would share this "
                                                           "host's"),
    # The push it also asks for must not reach the workers either.
    "push beside a refused shard": ("%%tfdist --push refusal_kept --shard refusal_gen" + BODY,
                                    "--shard refusal_gen: a generator cannot be split"),
    "push beside a refused option": (
        "%%tfdist --push refusal_kept --resume-from /no/such/run" + BODY,
        "/no/such/run does not exist"),
}


@pytest.fixture
def kernel(tf_kernel):
    """The shared kernel, with a value here and another one on the workers (set again for
    each test: one that fails leaves the next its own start)."""
    tf_kernel.ok("refusal_kept = 'notebook'\nrefusal_gen = (i for i in range(4))")
    tf_kernel.ok("%%tfdist\nrefusal_kept = 'workers'")
    return tf_kernel


@pytest.mark.parametrize("code, message", REFUSALS.values(), ids=REFUSALS.keys())
def test_a_refused_line_ends_its_cell_as_an_error_and_changes_nothing(kernel, code, message):
    out = kernel.execute(code, timeout=120)
    assert out.status == "error", out
    refusals = [line for line in out.stderr.splitlines() if line.startswith("UsageError: ")]
    assert len(refusals) == 1 and message in refusals[0], out.stderr
    assert out.error is None and not out.stdout, out   # the one line, nothing else
    assert per_worker(kernel, "refusal_kept") == ["workers", "workers"]
    assert kernel.ok("print(refusal_kept)").stdout == "notebook\n"


@pytest.mark.parametrize("code", ["%tfdist start -n 0", "%%tfdist --shard refusal_gen" + BODY])
def test_run_all_stops_at_a_refused_line(kernel, code):
    # As Run All sends them: the next cell is queued before the refused one ends.
    statuses = replies(kernel, [code, "ran_after_refusal = True"], timeout=120)
    assert statuses == ["error", "aborted"]
    assert kernel.ok("print('ran_after_refusal' in globals())").stdout == "False\n"


def replies(kernel, codes: list[str], timeout: float) -> list[str]:
    """Send every cell at once; the status of each one's execute_reply, in order."""
    sent = [kernel.client.execute(code) for code in codes]
    statuses: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while len(statuses) < len(sent):
        reply = kernel.client.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") in sent:
            statuses[reply["parent_header"]["msg_id"]] = reply["content"]["status"]
    return [statuses[msg_id] for msg_id in sent]
