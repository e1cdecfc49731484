"""The ``rlplat`` command (and ``python -m rlplat``): the command runs in the warm interpreter
where one serves it, having imported nothing but this and the interpreter's client; else it
runs in this process (:func:`rlplat.cli.main_process`)."""

from __future__ import annotations

import sys

from rlplat.cluster import forkserver


def main() -> None:
    code = forkserver.run_command(sys.argv, entry="rlplat.cli:run_here")
    if code is not None:
        sys.exit(code)
    from rlplat.cli import main_process  # noqa: PLC0415 - Typer, Rich, the stages

    main_process(warm=False)


if __name__ == "__main__":
    main()
