"""How a magic line is read: trailing comments, which usage an error shows, `%tfdist?`."""

import pytest
from IPython.core.error import UsageError
from tfmw_notebook.magics.line_split import arguments, without_comment
from tfmw_notebook.magics.parsers import CELL_PARSER, LINE_PARSER, help_text

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]



@pytest.mark.parametrize("line, kept", [
    ("start -n 2   # two workers", "start -n 2"),
    ("# only a comment", ""),
    ("start -n 2#no space", "start -n 2"),
    ("--checkpoint-dir 'runs/#3'  # why", "--checkpoint-dir 'runs/#3'"),
    ('--checkpoint-dir "a # b"', '--checkpoint-dir "a # b"'),
    (r'--monitor "it\"s # still quoted" # comment', r'--monitor "it\"s # still quoted"'),
    (r"--monitor 'a\'#b' # c", r"--monitor 'a\'#b'"),
    ("--monitor \"it's\" # c", "--monitor \"it's\""),
    ("--monitor 'open # quote", "--monitor 'open # quote"),
    ("start -n 2", "start -n 2"),
])
def test_a_comment_ends_where_python_would_end_it(line, kept):
    assert without_comment(line) == kept


def test_a_hash_in_a_quoted_value_reaches_the_parser():
    args = CELL_PARSER.parse_args(arguments('--checkpoint-dir "run#2"  # mine'))
    assert args.checkpoint_dir == '"run#2"'   # IPython keeps the quotes (arg_split)
    assert LINE_PARSER.parse_args(arguments("start -n 3 # three")).workers == 3


def test_line_magic_with_a_trailing_comment(ip):
    with pytest.raises(UsageError, match="no cluster is running"):
        ip.run_line_magic("tfdist", "status   # where are the workers?")


def test_cell_magic_line_with_a_trailing_comment(ip):
    with pytest.raises(UsageError, match="no cluster is running"):
        ip.run_cell_magic("tfdist", "   # runs on every worker", "x = 1")


@pytest.mark.parametrize("line, usage", [
    ("start --bogus", "(usage: %tfdist start [-n N]"),
    ("diagnose --bogus", "(usage: %tfdist diagnose [--model NAME]"),
    ("stop --now", "(usage: %tfdist stop)"),
])
def test_unknown_options_show_the_subcommands_usage(ip, line, usage):
    with pytest.raises(UsageError) as error:
        ip.run_line_magic("tfdist", line)
    assert usage in str(error.value)
    assert "COMMAND" not in str(error.value)


def test_cell_usage_in_an_error_is_short_and_says_where_the_rest_is(ip):
    with pytest.raises(UsageError) as error:
        ip.run_cell_magic("tfdist", "--bogus", "x = 1")
    text = str(error.value)
    assert text.startswith("unrecognized arguments: --bogus (usage: %%tfdist [--timeout S]")
    assert text.endswith("every option: %tfdist?)")
    assert len(text) < 200 and "\n" not in text


def test_help_starts_with_examples():
    head = help_text().split("Reference")[0]
    for example in ("%tfdist start -n 2", "%%tfdist", "model.fit(", "%tfdist checkpoints",
                    "%tfdist stop"):
        assert example in head
    assert "--keep-best" in help_text()   # the generated reference follows
