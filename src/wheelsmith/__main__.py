"""The `wheelsmith` command: `python -m wheelsmith` and the console script (`run`).

Ctrl-C and SIGTERM are blocked before anything else is imported, so that one that comes while
wheelsmith starts is held, not the interpreter's traceback or death by the signal; the command
line's own handling (`cli._common.entry`, `Main.invoke`) says it in one line, exit 130. What
is before this module's first line, the interpreter's own start, no program can catch.
"""

import signal


def run() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    from wheelsmith.cli import entry  # noqa: PLC0415 - held first, then imported

    entry()


if __name__ == "__main__":
    run()
