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
a shell makes of undecodable bytes, cannot be saved, uploaded or sent to a model), hold no NUL (U+0000, which
no Postgres text column holds, and what UTF-16 read as UTF-8 is full of) and be at most ``max_bytes`` in UTF-8;
a message is measured as its JSON (images included).
"""

from __future__ import annotations

import codecs
import json
import unicodedata
from collections.abc import Sequence
from typing import Any, BinaryIO

from autogen_agentchat.messages import BaseChatMessage, BaseTextChatMessage
from pydantic_core import PydanticSerializationError

from teamstore.errors import InvalidTask
from teamstore.ids import lone_surrogate

# How much of a task tells UTF-16 or UTF-32 from text holding a stray NUL: a page, not the whole task, which
# may be far past its limit when it is checked.
_SAMPLE = 4096
_NUL_HINT = ("remove the NUL characters (text read from a binary file, or from UTF-16 decoded as UTF-8, holds "
             "them; convert UTF-16 with `iconv -f UTF-16LE -t UTF-8`)")
# The byte order marks of the encodings a Windows tool may write instead of UTF-8 (Notepad's "Unicode",
# PowerShell 5's `>`), UTF-32's first: UTF-32LE's begins with UTF-16LE's.
_OTHER_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
               (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))
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
            message a text message that is), or holding a lone surrogate or NUL; over ``max_bytes``.
    """
    if task is None:
        return
    if isinstance(task, str):
        check_text(task)
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
            dumped = message.model_dump_json()
        except PydanticSerializationError:
            raise InvalidTask(f"task message {i} ({type(message).__name__}) holds a value that is not JSON "
                              "text (a lone surrogate, say)", hint="pass message text as valid Unicode") from None
        # Parsed only when its JSON may hold one: a message with an image is mostly base64, read once already.
        if "\\u0000" in dumped and _holds_nul(json.loads(dumped)):
            raise InvalidTask(f"task message {i} ({type(message).__name__}) holds NUL (U+0000), which no "
                              "database stores as text", hint=_NUL_HINT)
        size += len(dumped.encode())
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


def check_text(text: str) -> None:
    """Refuse text a run cannot take or a store cannot keep, whatever its size.

    Raises:
        InvalidTask: ``text`` is empty or only whitespace and characters that show nothing, or holds a lone
            surrogate or NUL (U+0000).
    """
    check_not_blank(text)
    surrogate = lone_surrogate(text)
    if surrogate is not None:
        raise InvalidTask(
            f"the task contains the lone surrogate U+{ord(surrogate):04X}, which is not text",
            hint="pass the task as valid Unicode (check how the client decodes it)",
        )
    if "\x00" in text:
        wide = _wide_encoding([ch == "\x00" for ch in text[:_SAMPLE]])
        if wide is not None:
            raise InvalidTask(f"the task looks like {wide} read as UTF-8: {_nuls(wide, 'character')}",
                              hint=_wide_hint(wide))
        at = text.index("\x00")
        raise InvalidTask(f"the task contains NUL (U+0000) at character {at:,}, which no database stores as text",
                          hint=_NUL_HINT)


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

    UTF-16 and UTF-32 are refused, with or without a byte order mark, naming the ``iconv`` that converts
    them: without a mark UTF-16 would decode as UTF-8 full of NULs, so it cannot be told from UTF-8 with
    certainty; one rule for both keeps the limit and a bad byte's place in the bytes the stream holds.

    Raises:
        InvalidTask: The stream holds more than ``max_bytes`` (its byte order mark and final newline aside),
            is not UTF-8 (UTF-16 or UTF-32 said so), holds NUL, or is empty or only whitespace.
    """
    data = stream.read(len(codecs.BOM_UTF8) + max_bytes + len(b"\r\n") + 1)
    _refuse_utf16(data)
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
    check_text(text)
    return text


def _refuse_utf16(data: bytes) -> None:
    """Refuse bytes that are UTF-16 or UTF-32: a byte order mark of either, or the NULs of mostly Latin text in one."""
    named = next((name for bom, name in _OTHER_BOMS if data.startswith(bom)), None)
    if named is not None:
        raise InvalidTask(f"the task read is {named} (it starts with a {named} byte order mark), not UTF-8",
                          hint=f"convert it to UTF-8 before it is sent (`iconv -f {named} -t UTF-8 message.txt`)")
    wide = _wide_encoding([byte == 0 for byte in data[:_SAMPLE]]) if b"\x00" in data else None
    if wide is not None:
        raise InvalidTask(f"the task read looks like {wide}, not UTF-8: {_nuls(wide, 'byte')}",
                          hint=_wide_hint(wide))


def _wide_encoding(nul: list[bool]) -> str | None:
    """``"UTF-32LE"``, ``"UTF-32BE"``, ``"UTF-16LE"`` or ``"UTF-16BE"`` when ``nul`` (whether each byte, or
    character, is NUL) looks like text of mostly Latin letters in that encoding: NULs in at least half the
    places a Latin letter's high bytes take, and few in the place its low byte takes. Not all and none: a
    character past U+00FF (a dash, a curly quote) has no NUL high byte, and a few (U+0100, U+4E00) have a NUL
    low byte. UTF-32 first: its every other byte is NUL too."""
    for width, name in ((4, "UTF-32"), (2, "UTF-16")):
        for order, low in (("LE", 0), ("BE", width - 1)):
            highs = [at for at in range(width) if at != low]
            if all(_mostly(nul[at::width], nul[low::width]) for at in highs):
                return f"{name}{order}"
    return None


def _mostly(places: list[bool], others: list[bool]) -> bool:
    return sum(places) >= 2 and sum(places) * 2 >= len(places) and sum(others) * 4 < sum(places)


def _nuls(encoding: str, unit: str) -> str:
    return f"every other {unit} is NUL" if encoding.startswith("UTF-16") else f"three {unit}s in four are NUL"


def _wide_hint(encoding: str) -> str:
    return f"convert it to UTF-8 before it is sent (`iconv -f {encoding} -t UTF-8 message.txt`)"


def _holds_nul(value: Any) -> bool:
    """Whether a JSON value holds NUL in any string, a key included."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    return isinstance(value, list) and any(_holds_nul(item) for item in value)


def _describe(task: Any) -> str:
    if isinstance(task, Sequence) and not isinstance(task, str | bytes):
        kinds = sorted({type(m).__name__ for m in task})
        return f"{type(task).__name__} of {', '.join(kinds)}" if kinds else f"an empty {type(task).__name__}"
    return type(task).__name__
