"""Console entry point: `kbench` with no command (or `kbench tui`) opens the app, anything else is the CLI.

Lazy imports: `entry` runs engine.secrets.protect first, which re-executes the process, and then only one of the
app (textual) and the CLI is imported, for the command given."""

from __future__ import annotations

import sys

_OPTIONS_WITH_VALUE = {"--workspace"}


def _command_of(argv: list[str]) -> str | None:
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _OPTIONS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(argv)
    if command in (None, "tui") and not {"-h", "--help"} & set(argv):
        from kbench_tui.app import run

        return run(argv)
    from engine.cli import main as cli_main

    return cli_main(argv)


def entry() -> None:
    """The `kbench` console script: protect the API keys (engine.secrets) before anything else runs."""
    from engine.secrets import protect

    protect()
    sys.exit(main())


if __name__ == "__main__":
    entry()
