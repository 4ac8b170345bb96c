"""The command-line reference page, docs/cli-options.md, generated from the CLI itself (click's
own commands, arguments and options), so that it cannot drift from the code:

    python scripts/cli_reference.py > docs/cli-options.md      (make docs)

tests/test_docs_cli.py fails when the committed page differs from what this prints.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click

from wheelsmith.cli import main

HEADER = """# Every command and option

<!-- Generated from the CLI by scripts/cli_reference.py (make docs); do not edit by hand. -->

This page is generated from wheelsmith's command-line interface itself: every command, its
arguments and every option, with the help text `--help` prints. What the commands do, their
output and the exit codes: [Command line](cli.md).
"""


def commands(group: click.Group, parent: click.Context) -> Iterator[click.Context]:
    """A context for every visible command under `group`, depth first, by name."""
    for name in sorted(group.list_commands(parent)):
        command = group.get_command(parent, name)
        if command is None or command.hidden:
            continue
        ctx = click.Context(command, info_name=name, parent=parent)
        if isinstance(command, click.Group):
            yield from commands(command, ctx)
        else:
            yield ctx


def cell(text: str) -> str:
    """One Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def options_table(ctx: click.Context) -> list[str]:
    rows = [record for param in ctx.command.get_params(ctx)
            if isinstance(param, click.Option) and (record := param.get_help_record(ctx))]
    if not rows:
        return []
    return ["| option | meaning |", "|---|---|",
            *(f"| `{cell(names)}` | {cell(meaning)} |" for names, meaning in rows)]


def section(ctx: click.Context) -> list[str]:
    command = ctx.command
    usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
    help_text = (command.help or "").split("\f")[0].strip()
    return [f"## `{ctx.command_path}`", "", "```", usage, "```", "",
            *([" ".join(help_text.split()), ""] if help_text else []),
            *options_table(ctx), ""]


def reference() -> str:
    root = click.Context(main, info_name="wheelsmith")
    lines = [HEADER, *section(root)[:-1], ""]
    for ctx in commands(main, root):
        lines.extend(section(ctx))
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
