"""The ``teamstore`` command as a service host runs it: logging configured at a level, and optionally a
crash at one chosen point.

    python -m tests.canary.host --log-level DEBUG -- run --team support_triage --user u --session s "hi"
    python -m tests.canary.host --crash-before-rename -- run ...   # SIGKILL between temp file and rename
    python -m tests.canary.host --path-taken-after-the-look -- export ...   # its --output appears meanwhile

The root logger gets a stderr handler at the level (the command line itself only prints warnings), so
every record the CLI, the library, AutoGen and the database drivers let through is in the captured stderr.
"""

from __future__ import annotations

import logging
import os
import signal
import sys


def _crash_before_rename() -> None:
    """Kill the process the moment a transcript's temporary file is complete, before it is renamed into
    place: a writer killed between the two steps, as by the OOM killer or a deploy."""
    replace = os.replace

    def crashing(src: str | os.PathLike[str], dst: str | os.PathLike[str], **kwargs: object) -> None:
        if os.path.basename(os.fspath(src)).startswith(".tmp-") and os.fspath(dst).endswith(".jsonl.gz"):
            os.kill(os.getpid(), signal.SIGKILL)
        replace(src, dst, **kwargs)  # type: ignore[arg-type]

    os.replace = crashing  # type: ignore[assignment]


def _path_taken_after_the_look() -> None:
    """An export's look at its ``--output`` path finds it free, and a file appears there just after (another
    export, a sync client): the archive, once written, finds the path taken."""
    from pathlib import Path

    from teamstore.export import archive

    def free_then_taken(path: Path) -> bool:
        path.write_bytes(b"someone's archive")
        return False

    archive._is_taken = free_then_taken


def main(argv: list[str]) -> None:
    """Parse the host's own options (up to ``--``), then run the command line on the rest."""
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    level = logging.INFO
    if "--log-level" in options:
        level = logging.getLevelName(options[options.index("--log-level") + 1])
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    os.umask(0o022)  # the usual umask: modes are checked as most hosts would make them
    if "--crash-before-rename" in options:
        _crash_before_rename()
    if "--path-taken-after-the-look" in options:
        _path_taken_after_the_look()
    from teamstore.cli import main as teamstore_main

    sys.argv = ["teamstore", *command]
    teamstore_main()


if __name__ == "__main__":
    main(sys.argv[1:])
