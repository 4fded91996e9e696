"""Shared output for the CLI: ``--json`` for machines, typed errors and stops as exit codes (tables for
people are :mod:`teamstore.terminal`'s).

    from teamstore.cli._output import emit, fail

    emit({"teams": rows}, as_json=json_flag, render=lambda data: console.print(table))
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import typer
from rich.console import Console

from teamstore.errors import TeamstoreError
from teamstore.terminal import UNSAFE, plain

# Click's usage error, whether typer vendors click (0.17+) or uses it: BadParameter's base class.
UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")

err_console = Console(stderr=True, emoji=False)  # ":x:" in a message is text, as in terminal.console


class JsonOutput:
    """What the command running asked of stdout: whether ``--json`` (or ``--format json``) was given, and whether
    its document was written, so that a failure under ``--json`` is itself one JSON document (:func:`fail`) and
    never a second one."""

    asked = False
    written = False
    asked_by: frozenset[str] = frozenset()  # the options that asked: "--json", "--format" (json)

    @classmethod
    def reset(cls) -> None:
        cls.asked = cls.written = False
        cls.asked_by = frozenset()


def _asked_for_json(value: bool) -> bool:
    JsonOutput.asked = JsonOutput.asked or value
    return value


JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.",
                          callback=_asked_for_json)

INTERRUPTED = 130
"""A command's exit status when Ctrl-C stopped it (128 + SIGINT, as a shell reports it)."""
_STOPPING = tuple(s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)  # no SIGHUP on Windows


def _default(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(data: Any) -> str:
    """JSON with stable key order and ISO timestamps; characters a terminal would act on, which JSON may
    hold raw (DEL, C1 controls, bidirectional overrides), are written as ``\\u`` escapes: the same JSON."""
    text = json.dumps(data, default=_default, indent=2, sort_keys=True, ensure_ascii=False)
    return UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def emit(data: Any, *, as_json: bool, render: Callable[[Any], None]) -> None:
    """Print ``data`` as JSON when asked, otherwise through ``render``."""
    if as_json:
        sys.stdout.write(dumps(data) + "\n")
        JsonOutput.written = True
    else:
        render(data)


def json_error(kind: str, message: str, fix: str | None, code: int) -> None:
    """Under ``--json`` (or ``--format json``), when the command wrote no document yet, write the failure as
    stdout's one document: ``{"error": {"type", "message", "fix", "exit_code"}}``."""
    if JsonOutput.asked and not JsonOutput.written:
        sys.stdout.write(dumps({"error": {"type": kind, "message": message, "fix": fix, "exit_code": code}}) + "\n")
        JsonOutput.written = True


def fail(exc: TeamstoreError, code: int = 1) -> NoReturn:
    """Print a typed error with its fix and exit non-zero. Under ``--json``, when the command wrote no document
    yet, the error is also stdout's one document: ``{"error": {"type", "message", "fix", "exit_code"}}``."""
    json_error(type(exc).__name__, exc.message, exc.hint, code)
    # The message quotes ids as the user gave them: printed as text, never read as rich markup.
    err_console.print(f"[bold red]error[/]: {plain(exc.message)}")
    if exc.hint:
        err_console.print(f"[yellow]fix[/]: {plain(exc.hint)}")
    raise typer.Exit(code)


class Stop:
    """Which signal stopped a command run under :func:`stopped_as_on_ctrl_c`: Ctrl-C's unless another came."""

    def __init__(self) -> None:
        self.signum = signal.SIGINT

    @property
    def name(self) -> str:
        return self.signum.name

    @property
    def code(self) -> int:
        """The exit status a shell reports for the signal: 128 + its number (130, 143 on SIGTERM, 129 on SIGHUP)."""
        return 128 + self.signum


@contextmanager
def stopped_as_on_ctrl_c() -> Iterator[Stop]:
    """While the block runs, SIGTERM (a job cancelled or timed out, a container stopping, ``kill``) and SIGHUP
    (the terminal or the ssh session closed) stop the command as Ctrl-C does, rather than end the process
    where it stands: each is handed to SIGINT's handler. Under ``asyncio.run`` that handler cancels the
    command's task, so its cleanup runs (a lease released, a partial archive removed) before
    ``KeyboardInterrupt`` reaches the command, which says where it stopped (:func:`interrupted`, exit
    ``Stop.code``). With SIGINT ignored (a job a script started in the background) there is no such handler,
    and the event loop raises ``KeyboardInterrupt`` instead, to the same end. A second signal, like a second
    Ctrl-C, raises ``KeyboardInterrupt`` at once.

    Yields:
        The :class:`Stop` that names the first signal that came (SIGINT until one does).
    """
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        # Only the main thread sets (and runs) signal handlers: a command run on another thread (a test's, an
        # embedding program's) is left to how that program handles them.
        yield stop
        return

    def as_ctrl_c(signum: int, frame: FrameType | None) -> None:
        if stop.signum is signal.SIGINT:
            stop.signum = signal.Signals(signum)
        ctrl_c = signal.getsignal(signal.SIGINT)
        if callable(ctrl_c):
            ctrl_c(signal.SIGINT, frame)
            return
        _interrupt_from_the_loop()  # SIGINT ignored (a job a script started in the background): no handler

    previous = {signum: signal.signal(signum, as_ctrl_c) for signum in _STOPPING}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt_from_the_loop() -> None:
    """Raise ``KeyboardInterrupt`` from the running event loop, between callbacks, never from the middle of the
    command's own code (where it would skip the cleanup that only a cancellation runs): ``asyncio.run`` then
    cancels the command's task and waits for it, as it does on Ctrl-C. With no loop running, raise it here."""
    import asyncio  # loaded already when a loop runs; imported here so that `teamstore --help` does not load it

    def interrupt() -> None:
        raise KeyboardInterrupt

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise KeyboardInterrupt from None
    loop.call_soon_threadsafe(interrupt)


def deaf_to_ctrl_c() -> None:
    """Ignore Ctrl-C (SIGINT) from here until the process exits: the command's work is over and stored (a
    rotation, a registration committed), and what is left is closing up and saying so. Python's own handler
    would turn a Ctrl-C now into a traceback from the interpreter's exit ("Exception ignored in: <module
    'threading'>") with status 0, the report cut short with 130, or, once the interpreter has put the signal's
    default back, the process killed by SIGINT after the command said it was done. Ignored, it is left
    unchanged as the interpreter shuts down."""
    if threading.current_thread() is threading.main_thread():  # where signal handlers are set (and run)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def interrupted(said: str, fix: str, code: int = INTERRUPTED) -> NoReturn:
    """Say what a command stopped by Ctrl-C (or another stop) had done and what to run to go on; exit ``code``."""
    err_console.print("[bold red]interrupted[/]: " + plain(said))
    err_console.print("[yellow]fix[/]: " + plain(fix))
    raise typer.Exit(code)
