"""asyncio's records, kept to what asyncio itself says: the objects, failures and texts they quote left out.

    import logging
    from teamstore.logs.event_loop import asyncio_left_out

    record = logging.makeLogRecord({"name": "asyncio", "msg": "Task exception was never retrieved\\nfuture: <Task>"})
    asyncio_left_out(record)   # "Task exception was never retrieved (what asyncio quoted ... is left out ...)"

asyncio logs wherever the collector runs, and its exception handler logs whatever ``message`` a library hands
``loop.call_exception_handler``: a record is kept as said only when its text is one of asyncio's own (the
messages below), and an argument only when it is a number or, in the few messages whose argument is a class
asyncio names (``Using selector: EpollSelector``), a class's name.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

# Where the first line of an asyncio record starts quoting an object (a callback with its arguments, a task).
_QUOTE_STARTS = re.compile(r"""[(<'"{\[=]""")

ASYNCIO_SAYS = (
    "Task exception was never retrieved", "Future exception was never retrieved", "Task was destroyed but it is "
    "pending!", "Exception in callback", "Unhandled error in exception handler", "Exception in default exception "
    "handler", "Fatal error on transport", "Fatal read error on socket transport", "Fatal write error on socket "
    "transport", "Fatal error on SSL transport", "Fatal error on pipe transport", "Fatal read error on pipe "
    "transport", "Fatal write error on pipe transport", "Error on reading from the event loop self pipe",
    "Accept failed on a socket", "socket.accept() out of system resource", "Error on transport creation for "
    "incoming connection", "protocol.pause_writing() failed", "protocol.resume_writing() failed", "Unhandled "
    "exception in client_connected_cb", "unhandled exception during asyncio.run() shutdown", "an error occurred "
    "during closing of asynchronous generator", "An open stream was garbage collected prior to establishing "
    "network connection", "Unknown exception in SIGCHLD handler", "socket.send() raised exception.",
    "socket.sendto() raised exception.", "SSL connection is closed", "Fail to write a null byte into the "
    "self-pipe socket", "Read error on pipe transport while closing",
)
"""asyncio's own fixed texts (the first line of the records it logs with no arguments, what its exception handler
is given as ``message``), each kept up to the first object it quotes; ``Exception in callback`` with the
callback's name, and ``<class> exception was never retrieved`` for a future of another class."""
_NEVER_RETRIEVED = re.compile(r"[A-Za-z_]\w* exception was never retrieved")
_DOTTED_NAME = re.compile(r"[A-Za-z_][\w.]*")

OWN_FORMATS: Mapping[str, tuple[str, tuple[bool, ...]]] = {
    "Using selector: %s": ("Using selector: %s", (True,)),
    "Using proactor: %s": ("Using proactor: %s", (True,)),
    "Executing %s took %.3f seconds": ("Executing a callback took %.3f seconds", (False, True)),
    "%r: SSL handshake took %.1f ms": ("SSL handshake took %.1f ms", (False, True)),
    "Close %r": ("Close the event loop", (False,)),
}
"""asyncio's formats whose arguments carry no user content but a number or a class's name (True), each with what
it reads as once the others (False: a callback's text, a transport's repr) are left out."""

_LEFT_OUT = "what asyncio quoted of the task, callback or failure is left out: it may quote users' words"


def asyncio_left_out(record: logging.LogRecord) -> None:
    """Keep an asyncio ``record`` to what asyncio itself says, without the objects it quotes: "Task exception was
    never retrieved" and "Exception in callback" records carry the task's or the callback's repr (a callback's
    arguments, a coroutine's, may be users' words) and the failure with its message and traceback, logged
    whenever the garbage collector finds a task nobody awaited. The failure is named by its type, an argument
    by its type (a number and a class asyncio names stay), and a text that is none of asyncio's own by its
    length: a library's ``call_exception_handler`` message may quote anything."""
    try:
        error = record.exc_info[1] if record.exc_info else None
        kind = f"{type(error).__name__}; " if error is not None else ""
        if record.exc_text and error is None:  # a record rebuilt from another process: its traceback as text
            kind = "a traceback; "
        said = _said(record)
        if said is None:
            return
        record.msg = f"{said} ({kind}{_LEFT_OUT})"
        record.args, record.exc_info, record.exc_text = None, None, None
    except Exception:  # a record whose message does not format: a handler would report it, never the caller
        record.msg, record.args, record.exc_info, record.exc_text = (
            "a record of asyncio's whose message could not be read (left out: it may quote users' words)",
            None, None, None)


def _said(record: logging.LogRecord) -> str | None:
    """What ``record`` may say of its own, or None when it is kept whole (a format of asyncio's own, with no
    failure): its arguments are made safe here."""
    if not isinstance(record.msg, str):
        return f"a record of asyncio's whose message is of type {type(record.msg).__name__}"
    if record.args:
        _arguments_left_out(record)
        said = record.getMessage()  # one that does not format is left out whole (the caller's except)
        return None if not (record.exc_info or record.exc_text) else said.partition("\n")[0]
    first = _QUOTE_STARTS.split(record.msg.partition("\n")[0], maxsplit=1)[0].rstrip(" :")
    if not _asyncio_says(first):
        return f"a message asyncio does not say itself ({len(record.msg):,} characters)"
    return None if first == record.msg and not (record.exc_info or record.exc_text) else first


def _asyncio_says(first: str) -> bool:
    """Whether ``first`` (a record's first line, up to what it quotes) is one of :data:`ASYNCIO_SAYS`."""
    if first in ASYNCIO_SAYS or _NEVER_RETRIEVED.fullmatch(first):
        return True
    callback = first.removeprefix("Exception in callback ")
    return callback != first and bool(_DOTTED_NAME.fullmatch(callback))


def _arguments_left_out(record: logging.LogRecord) -> None:
    """``record``'s arguments as their types (a number stays), a mapping's values too; those of one of
    :data:`OWN_FORMATS` kept where they are a number or a class's name, the others left out of its format."""
    if isinstance(record.args, Mapping):  # `log("%(name)s", {...})`: logging keeps the mapping as the arguments
        record.args = {key: _typed(value) for key, value in record.args.items()}
        return
    args = record.args if isinstance(record.args, tuple) else (record.args,)
    own = OWN_FORMATS.get(record.msg) if isinstance(record.msg, str) else None
    if own is None or len(own[1]) != len(args):
        record.args = tuple(_typed(a) for a in args)
        return
    record.msg = own[0]
    record.args = tuple(_named(a) for a, kept in zip(args, own[1], strict=True) if kept)


def _typed(arg: object) -> object:
    return arg if isinstance(arg, int | float) else f"<{type(arg).__name__}>"


def _named(arg: object) -> object:
    """A number, or a class's name asyncio passes (``EpollSelector``): anything else by its type."""
    return arg if isinstance(arg, str) and arg.isidentifier() else _typed(arg)
