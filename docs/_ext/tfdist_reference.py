"""The magics' reference page, written from the argument parsers at every build.

`%tfdist` and `%%tfdist` declare each option once, in tfmw_notebook/magics/parsers.py; this
extension turns those parsers into reference/magics.md (one section per command, a row per
option with its default) before Sphinx reads the sources, so the page cannot fall out of
date. The file is generated: it is not kept in git.
"""

from __future__ import annotations

import argparse
import os
import re

from tfmw_notebook.magics import parsers

PAGE = os.path.join("reference", "magics.md")
NOT_SET = "not set"


def commands() -> list[tuple[str, str, argparse.ArgumentParser, str]]:
    """(title, anchor, parser, description) for `%tfdist`, each subcommand, `%%tfdist`."""
    found = [("%tfdist", "ref-tfdist", parsers.LINE_PARSER, parsers.LINE_PARSER.description)]
    helps = {choice.dest: choice.help for choice in parsers.subcommands()._choices_actions}
    for name, parser in parsers.subcommands().choices.items():
        found.append((f"%tfdist {name}", f"ref-tfdist-{name}", parser,
                      parser.description or helps.get(name) or ""))
    found.append(("%%tfdist", "ref-cell-tfdist", parsers.CELL_PARSER,
                  parsers.CELL_PARSER.description))
    return found


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every option and positional argument a user can give (not -h, not the subcommand)."""
    return [action for action in parser._actions
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))]


def default_text(action: argparse.Action) -> str:
    """The default as a user reads it: a switch is off, a missing value is not set."""
    default = action.default
    if isinstance(action, argparse._StoreTrueAction):
        return "off"
    if default is None or default == []:
        return NOT_SET
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def option_text(action: argparse.Action) -> str:
    """`--timeout S`, `-n N, --workers N`, or a positional's name."""
    if not action.option_strings:
        return action.metavar or action.dest
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = action.metavar or (
        "|".join(map(str, action.choices)) if action.choices else action.dest.upper())
    value = f"[{metavar}]" if action.nargs == "?" else metavar
    if action.nargs in ("+", "*"):
        value += " ..."
    return ", ".join(f"{name} {value}" for name in action.option_strings)


def _markdown(text: str) -> str:
    """Text as Markdown: <, >, *, [ outside code spans are not markup."""
    # Backticked spans stay as written; elsewhere escape what Markdown would read as markup.
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else re.sub(r"([<>*\[\]])", r"\\\1", part)
                   for part in parts)


def help_text(action: argparse.Action) -> str:
    """The option's help as `%tfdist?` prints it (argparse reads %% as %), as a sentence."""
    text = (action.help or "").replace("%%", "%").strip()
    return text if not text or text.endswith(".") else text + "."


def usage(parser: argparse.ArgumentParser, title: str) -> str:
    text = " ".join(parser.format_usage().replace("::", "", 1).split())
    text = text.removeprefix("usage:").strip()
    prefix = "%%" if title.startswith("%%") else "%"
    return text if text.startswith("%") else prefix + text


def section(title: str, anchor: str, parser: argparse.ArgumentParser,
            description: str) -> str:
    lines = [f"({anchor})=", f"## `{title}`", ""]
    if description:
        lines += [_markdown(description), ""]
    lines += ["```text", usage(parser, title), "```", ""]
    rows = options(parser)
    if title == "%tfdist":
        names = ", ".join(f"[`{name}`](#ref-tfdist-{name})"
                          for name in parsers.subcommands().choices)
        lines += [f"Commands: {names}.", ""]
    if not rows:
        return "\n".join(lines + ["No options.", ""])
    lines += ["```{list-table}", ":header-rows: 1", ":widths: 30 15 55", "",
              "* - option", "  - default", "  - what it does"]
    for action in rows:
        choices = (f" One of: {', '.join(f'`{c}`' for c in action.choices)}."
                   if action.choices and not isinstance(action.choices, dict) else "")
        default = default_text(action)
        lines += [f"* - `{option_text(action)}`",
                  f"  - {default if default in ('off', NOT_SET) else f'`{default}`'}",
                  f"  - {_markdown(help_text(action))}{choices}"]
    return "\n".join(lines + ["```", ""])


def magics_reference() -> str:
    """The whole page."""
    head = ["# Magics reference", "",
            "Every command of `%tfdist` and every option of `%%tfdist`, with its default, "
            "written from the argument parsers (`tfmw_notebook/magics/parsers.py`) when this "
            "site is built. `%tfdist?` in a notebook prints the same help.", ""]
    return "\n".join(head + [section(*command) for command in commands()])


def write_reference(app) -> None:
    path = os.path.join(app.srcdir, PAGE)
    text = magics_reference()
    old = None
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if old != text:  # an unchanged page is not rebuilt
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def setup(app):
    app.connect("builder-inited", write_reference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
