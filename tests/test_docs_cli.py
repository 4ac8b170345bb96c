"""The command-line reference cannot drift from the CLI: docs/cli-options.md is what
scripts/cli_reference.py generates from click's own commands today; every command and every
option appears there (read from click independently of the generator); every exit code an error
class carries has its row in docs/cli.md's table; every WHEELSMITH_ variable the code reads is in
docs/environment.md, and every one the documentation names is read by something (the code, the
workflow, a script, a test)."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from types import ModuleType

import click

from tests.conftest import REPO
from wheelsmith import errors
from wheelsmith.cli import main

PAGE = REPO / "docs" / "cli-options.md"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cli_reference",
                                                  REPO / "scripts" / "cli_reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_what_the_cli_generates_today() -> None:
    assert PAGE.read_text() == generator().reference(), (
        "docs/cli-options.md is stale: run `make docs` (python scripts/cli_reference.py > "
        "docs/cli-options.md) and commit it")


def every_command(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    if command.hidden:
        return
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from every_command(sub, f"{path} {name}")


def test_every_command_and_option_appears_in_the_reference() -> None:
    page = PAGE.read_text()
    headings = set(re.findall(r"^## `(.+)`$", page, re.MULTILINE))
    commands = dict(every_command(main, "wheelsmith"))
    assert {"wheelsmith build", "wheelsmith index check", "wheelsmith recipe new"} <= set(commands)
    assert "wheelsmith build-request" not in commands  # hidden: the container's own entry
    for path, command in commands.items():
        if isinstance(command, click.Group) and path != "wheelsmith":
            continue  # a group is its subcommands
        assert path in headings, path
        body = page.split(f"## `{path}`\n", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            if isinstance(param, click.Option):
                for name in [*param.opts, *param.secondary_opts]:
                    assert re.search(rf"`[^`]*(?<![\w-]){re.escape(name)}(?![\w-])", body), (
                        f"{path}: {name}")
            else:
                assert (param.metavar or param.human_readable_name.upper()) in body, path


def documented_exit_codes() -> dict[int, str]:
    """docs/cli.md's exit-code table: code -> its error column."""
    table = (REPO / "docs" / "cli.md").read_text().split("## Exit codes", 1)[1]
    return {int(code): error for code, error in
            re.findall(r"^\| (\d+) \| ([^|]*) \|", table, re.MULTILINE)}


def error_classes(base: type[errors.WheelsmithError]) -> Iterator[type[errors.WheelsmithError]]:
    for sub in base.__subclasses__():
        yield sub
        yield from error_classes(sub)


def test_every_exit_code_has_its_row_naming_its_errors() -> None:
    documented = documented_exit_codes()
    assert {0, 1, 2, 130} <= set(documented)
    for cls in error_classes(errors.WheelsmithError):
        assert cls.exit_code in documented, f"{cls.__name__}: exit {cls.exit_code}"
        row = documented[cls.exit_code]
        if cls.exit_code != next(c for c in cls.__mro__[1:] if hasattr(c, "exit_code")
                                 ).exit_code:  # a class with a code of its own names it there
            assert f"`{cls.__name__}`" in row, f"exit {cls.exit_code}: {cls.__name__}"


def test_every_variable_the_code_reads_is_in_the_environment_reference() -> None:
    page = (REPO / "docs" / "environment.md").read_text()
    read = set()
    for module in (REPO / "src" / "wheelsmith").rglob("*.py"):
        read |= set(re.findall(r"\bWHEELSMITH_[A-Z0-9_]+", module.read_text()))
    assert {"WHEELSMITH_HOME", "WHEELSMITH_CACHE", "WHEELSMITH_COMPILE_FARM_TOKEN"} <= read
    missing = sorted(name for name in read if f"`{name}`" not in page)
    assert not missing, f"docs/environment.md does not name {missing}"


SHELL_READ = r"\$\{?%s\b"
READS = {  # how a file of each kind reads a variable (%s: its name)
    "package": r"\b%s\b",  # the package reads what it names (or sets it for what it starts)
    "workflow": rf"(?:vars\.|secrets\.)%s\b|{SHELL_READ}",
    "shell": SHELL_READ,  # the scripts and the Makefile
    # a test or bench reads what it looks up in os.environ; naming a variable in an assertion,
    # as a test that it is gone does, is no read
    "python": r"""environ(?:\.get\(|\.pop\(|\[)\s*["']%s["']|["']%s["'] (?:not )?in os\.environ""",
}


def readers() -> list[tuple[str, str]]:
    """Every file that may read a variable: its text and how it reads one."""
    kinds = {"package": sorted((REPO / "src" / "wheelsmith").rglob("*.py")),
             "workflow": sorted((REPO / ".github" / "workflows").glob("*.yml")),
             "shell": [*sorted((REPO / "scripts").rglob("*.sh")), REPO / "Makefile"],
             "python": [*sorted((REPO / "tests").rglob("*.py")),
                        *sorted((REPO / "bench").rglob("*.py"))]}
    return [(path.read_text(), READS[kind]) for kind, paths in kinds.items() for path in paths]


def is_read(name: str, files: list[tuple[str, str]]) -> bool:
    return any(re.search(pattern.replace("%s", re.escape(name)), text) for text, pattern in files)


def test_every_variable_the_docs_name_is_read_by_something() -> None:
    """A documented WHEELSMITH_ variable that nothing reads any more (the nightly's index
    machine, `WHEELSMITH_INDEX_DIR`) fails here. The pages under docs/evidence/ are records of
    past runs and say what was set then."""
    pages = [REPO / "README.md", *(p for p in sorted((REPO / "docs").rglob("*.md"))
                                   if "evidence" not in p.relative_to(REPO / "docs").parts)]
    named = {name: page.relative_to(REPO).as_posix() for page in pages
             for name in re.findall(r"\bWHEELSMITH_[A-Z0-9_]*[A-Z0-9]", page.read_text())}
    assert {"WHEELSMITH_HOME", "WHEELSMITH_SITE_BUCKET", "WHEELSMITH_KILL_SOAK"} <= set(named)
    files = readers()
    unread = sorted(f"{name} ({page})" for name, page in named.items()
                    if not is_read(name, files))
    assert not unread, f"documented, read by nothing: {unread}"
    assert not is_read("WHEELSMITH_INDEX_DIR", files)  # named only in a test that it is gone
