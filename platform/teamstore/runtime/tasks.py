"""What ``Session.run()`` accepts as a task, checked before the team runs (and before a token is spent).

    import sys

    from teamstore.runtime.tasks import as_run_takes, check_task, read_task

    check_task("My router keeps dropping", max_bytes=262_144)   # returns None
    check_task(b"bytes", max_bytes=262_144)                      # raises InvalidTask
    task = as_run_takes((message_1, message_2))                  # [message_1, message_2]
    text = read_task(sys.stdin.buffer, max_bytes=262_144)        # a message piped in (`teamstore run -`)

A task is what AutoGen's ``run()`` takes: text, one AgentChat message, a list of them (another sequence, a
tuple say, is handed to the team as a list: :func:`as_run_takes`), or ``None`` to continue without a new one. Text must say something (empty or only whitespace, what an unset shell
variable gives, would spend the team's model calls on no request; so would messages that are all text
messages of no text), be valid Unicode (a lone surrogate, what
a shell makes of undecodable bytes, cannot be saved, uploaded or sent to a model) and be at most
``max_bytes`` in UTF-8; a message is measured as its JSON (images included).
"""

from __future__ import annotations

import codecs
import unicodedata
from collections.abc import Sequence
from typing import Any, BinaryIO

from autogen_agentchat.messages import BaseChatMessage, BaseTextChatMessage
from pydantic_core import PydanticSerializationError

from teamstore.errors import InvalidTask
from teamstore.ids import lone_surrogate

_TOO_LARGE_HINT = "send a shorter task (a summary, or a link to the document), or raise TEAMSTORE_TASK_MAX_BYTES"


def as_run_takes(task: Any) -> Any:
    """``task`` as AutoGen's ``run()`` takes it: a sequence of messages other than a list (a tuple) as a list,
    which alone it accepts; anything else as it is."""
    if isinstance(task, Sequence) and not isinstance(task, str | bytes | list):
        return list(task)
    return task


def check_task(task: Any, max_bytes: int) -> None:
    """Refuse a task AutoGen would refuse or teamstore could not keep.

    Raises:
        InvalidTask: Not text, a message or a list of messages; text empty or only whitespace (or every
            message a text message that is), or holding a lone surrogate; over ``max_bytes``.
    """
    if task is None:
        return
    if isinstance(task, str):
        check_not_blank(task)
        surrogate = lone_surrogate(task)
        if surrogate is not None:
            raise InvalidTask(
                f"the task contains the lone surrogate U+{ord(surrogate):04X}, which is not text",
                hint="pass the task as valid Unicode (check how the client decodes it)",
            )
        size = len(task.encode())
        if size > max_bytes:
            raise InvalidTask(f"the task is {size:,} bytes; the limit is {max_bytes:,}", hint=_TOO_LARGE_HINT)
        return
    messages = [task] if isinstance(task, BaseChatMessage) else task
    if (isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages
            or not all(isinstance(m, BaseChatMessage) for m in messages)):
        raise InvalidTask(
            f"a task is text, an AgentChat message or a non-empty list of them; got {_describe(task)}",
            hint="pass the user's text as a str",
        )
    if all(isinstance(m, BaseTextChatMessage) and shows_nothing(m.content) for m in messages):
        raise InvalidTask(
            f"the task's {'message is' if len(messages) == 1 else 'messages are'} empty or only whitespace",
            hint="pass the user's message (a form field left empty or unset gives none)",
        )
    size = 0
    for i, message in enumerate(messages):
        try:
            size += len(message.model_dump_json().encode())
        except PydanticSerializationError:
            raise InvalidTask(f"task message {i} ({type(message).__name__}) holds a value that is not JSON "
                              "text (a lone surrogate, say)", hint="pass message text as valid Unicode") from None
    if size > max_bytes:
        raise InvalidTask(f"the task's messages are {size:,} bytes as JSON; the limit is {max_bytes:,}",
                          hint=_TOO_LARGE_HINT)


# Characters that show nothing besides whitespace and the format characters (Unicode's Cf: byte order marks,
# zero-width spaces and joiners, direction marks, the soft hyphen): the Hangul fillers, the combining grapheme
# joiner, Khmer's inherent vowels and the blank Braille pattern.
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u034f\u17b4\u17b5\u2800")


def shows_nothing(text: str) -> bool:
    """Whether ``text`` is empty, or only whitespace and characters that show nothing (a byte order mark left after
    another was stripped, a zero-width space, a direction mark): it asks nothing of a model."""
    return all(ch.isspace() or ch in _FILLERS or unicodedata.category(ch) == "Cf" for ch in text)


def check_not_blank(text: str) -> None:
    """Refuse text that asks nothing: empty, or only whitespace and characters that show nothing.

    Raises:
        InvalidTask: ``text`` is empty or only whitespace and characters that show nothing.
    """
    if shows_nothing(text):
        raise InvalidTask(
            "the task is empty" if not text else
            f"the task is only whitespace or invisible characters ({len(text)} characters)",
            hint="pass the user's message (a shell variable that is unset or empty gives none); to finish an "
            "interrupted run, continue it (s.continue_run(), `teamstore run --continue`)",
        )


def read_task(stream: BinaryIO, max_bytes: int) -> str:
    """Read a text task from ``stream`` to its end, reading no more than one over ``max_bytes`` (and a
    leading byte order mark and a final newline): a stream past the limit is refused as soon as it is, not
    held in memory whole.

    One final newline, which ``echo`` and a here-document add (``\r\n`` from a file saved on Windows), is
    not part of the task, nor is a leading UTF-8 byte order mark (Notepad's, PowerShell's), which would
    otherwise reach the model as an invisible character.

    Raises:
        InvalidTask: The stream holds more than ``max_bytes`` (its byte order mark and final newline aside),
            is not UTF-8, or is empty or only whitespace.
    """
    data = stream.read(len(codecs.BOM_UTF8) + max_bytes + len(b"\r\n") + 1)
    marked = data.startswith(codecs.BOM_UTF8)
    data = data.removeprefix(codecs.BOM_UTF8)
    data = data[:-2] if data.endswith(b"\r\n") else data.removesuffix(b"\n")
    if len(data) > max_bytes:
        raise InvalidTask(f"the task read is over the limit of {max_bytes:,} bytes", hint=_TOO_LARGE_HINT)
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        at = exc.start + (len(codecs.BOM_UTF8) if marked else 0)  # as the stream holds it
        raise InvalidTask(f"the task read is not UTF-8 (byte {at:,} is not)",
                          hint="send the message as UTF-8 text") from None
    check_not_blank(text)
    return text


def _describe(task: Any) -> str:
    if isinstance(task, Sequence) and not isinstance(task, str | bytes):
        kinds = sorted({type(m).__name__ for m in task})
        return f"{type(task).__name__} of {', '.join(kinds)}" if kinds else f"an empty {type(task).__name__}"
    return type(task).__name__
