"""A magic line's arguments, without the trailing `# comment` Python would ignore.

IPython hands a line magic everything after its name, comment included (a
`%tfdist start -n 2  # two workers` line reaches the parser with `# two workers`).
"""

from __future__ import annotations

from IPython.utils.process import arg_split

_QUOTES = "'\""


def without_comment(line: str) -> str:
    """`line` up to its first `#` outside quotes, as Python reads a comment.

    Within quotes a backslash escapes the next character, so `"a \\" # b"` is one
    quoted text; a quote left open keeps the rest of the line (the parser then
    says what is wrong with it).
    """
    quote, escaped = "", False
    for index, char in enumerate(line):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in _QUOTES:
            quote = char
        elif char == "#":
            return line[:index].rstrip()
    return line


def arguments(line: str) -> list[str]:
    """The magic's arguments, split as IPython splits them, comment dropped."""
    return arg_split(without_comment(line))
