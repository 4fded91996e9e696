"""What run() takes as a task: refused before the team runs, with the reason."""

from __future__ import annotations

import codecs
import io
import re

import pytest
from autogen_agentchat.messages import MultiModalMessage, TextMessage

from teamstore.errors import InvalidTask
from teamstore.runtime.tasks import check_task, read_task


@pytest.mark.parametrize(
    "task",
    [None, "My router drops", " hi ", "x" * 500, "ü" * 250, TextMessage(source="user", content="hi"),
     [TextMessage(source="user", content="a"), MultiModalMessage(source="user", content=["b"])],
     [TextMessage(source="user", content=""), TextMessage(source="user", content="a")]],
)
def test_what_autogen_takes_passes(task: object) -> None:
    check_task(task, max_bytes=500)


@pytest.mark.parametrize(
    ("task", "says"),
    [
        ("", "the task is empty"),  # an unset shell variable: no request to spend model calls on
        (" \n\t\u3000", "the task is only whitespace or invisible characters (4 characters)"),
        (b"bytes", "got bytes"),
        (12, "got int"),
        ({"content": "hi"}, "got dict"),
        ([], "got an empty list"),
        (["text", "in a list"], "got list of str"),
        ([TextMessage(source="user", content="a"), "b"], "got list of TextMessage, str"),
        ("broken \udcff byte", "lone surrogate U+DCFF"),
        ("x" * 201, "201 bytes; the limit is 200"),
        ("ü" * 101, "202 bytes"),  # measured in UTF-8, not in characters
        (TextMessage(source="user", content="\ud800"), "message 0 (TextMessage)"),
        (TextMessage(source="user", content=""), "the task's message is empty or only whitespace"),
        ([TextMessage(source="user", content=" "), TextMessage(source="agent", content="\n")],
         "the task's messages are empty or only whitespace"),
        ([TextMessage(source="user", content="x" * 150)] * 2, "messages are"),
        # characters that show nothing: a byte order mark, zero-width and direction marks, a soft hyphen, fillers
        ("\ufeff\u200b\u200e\u00ad\u2063 \u3164\u034f\u2800\u17b4", "only whitespace or invisible characters"),
        (TextMessage(source="user", content="\ufeff"), "the task's message is empty or only whitespace"),
        ([TextMessage(source="user", content="\u200b\u200e")], "the task's message is empty"),
        # NUL, which no Postgres text column holds; every other character one is UTF-16 read as UTF-8
        ("ticket\x0055102", "NUL (U+0000) at character 6"),
        ("\x00\x00", "NUL (U+0000) at character 0"),
        ("M\x00y\x00 \x00l\x00i\x00n\x00e\x00", "looks like UTF-16LE read as UTF-8"),
        ("\x00M\x00y", "looks like UTF-16BE"),
        ("M\x00\x00\x00y\x00\x00\x00 \x00\x00\x00", "looks like UTF-32LE read as UTF-8: three characters in four"),
        (TextMessage(source="user", content="ticket\x00"), "message 0 (TextMessage) holds NUL"),
        ([TextMessage(source="user", content="hi"), MultiModalMessage(source="user", content=["a", "\x00"])],
         "message 1 (MultiModalMessage) holds NUL"),
        (TextMessage(source="us\x00er", content="hi"), "message 0 (TextMessage) holds NUL"),
    ],
)
def test_what_cannot_run_is_refused_with_the_reason(task: object, says: str) -> None:
    with pytest.raises(InvalidTask) as info:
        check_task(task, max_bytes=200)
    assert says in info.value.message
    assert info.value.hint


@pytest.mark.parametrize(("given", "at"), [(b"abc\xff", 3), (b"\xef\xbb\xbfabc\xff", 6)])
def test_a_task_read_that_is_not_utf8_names_the_bad_bytes_place_in_the_stream(given: bytes, at: int) -> None:
    # With a byte order mark stripped, the place named was the one in what was left: 3 bytes early.
    with pytest.raises(InvalidTask, match=rf"byte {at} is not"):
        read_task(io.BytesIO(given), 100)


MESSAGE = "My router drops every evening, café or not\r\n"


@pytest.mark.parametrize(
    ("given", "says", "fix"),
    [
        # No byte order mark (what some Windows tools write): as UTF-8 it is text full of NULs, not a request.
        (MESSAGE.encode("utf-16-le"), "looks like UTF-16LE, not UTF-8: every other byte is NUL", "UTF-16LE"),
        (MESSAGE.encode("utf-16-be"), "looks like UTF-16BE", "UTF-16BE"),
        ("Ça coupe \u2013 encore".encode("utf-16-le"), "looks like UTF-16LE", "UTF-16LE"),  # a few bytes not NUL
        ("Ā is \u0100, NUL its low byte".encode("utf-16-le"), "looks like UTF-16LE", "UTF-16LE"),
        # With a byte order mark the encoding is certain, and still refused rather than decoded: stdin takes
        # UTF-8 alone, as the same text without the mark must be refused, and the task limit and a bad byte's
        # place are counted in the bytes the stream holds. The fix converts it in one command.
        (MESSAGE.encode("utf-16"), "is UTF-16 (it starts with a UTF-16 byte order mark), not UTF-8", "UTF-16"),
        (codecs.BOM_UTF16_BE + MESSAGE.encode("utf-16-be"), "is UTF-16", "UTF-16"),
        (MESSAGE.encode("utf-32"), "is UTF-32", "UTF-32"),  # its mark begins with UTF-16LE's
        # UTF-32 without a mark: every other byte is NUL there too, so it must be told apart, or the fix given
        # (UTF-16's) turns it into garbage.
        (MESSAGE.encode("utf-32-le"), "looks like UTF-32LE, not UTF-8: three bytes in four are NUL", "UTF-32LE"),
        (MESSAGE.encode("utf-32-be"), "looks like UTF-32BE", "UTF-32BE"),
    ],
)
def test_a_task_read_in_utf16_is_refused_with_how_to_convert_it(given: bytes, says: str, fix: str) -> None:
    with pytest.raises(InvalidTask, match=re.escape(says)) as info:
        read_task(io.BytesIO(given), 1000)
    assert f"iconv -f {fix} -t UTF-8" in info.value.hint


@pytest.mark.parametrize(("given", "says"), [(b"ticket\x0055102\n", "NUL (U+0000) at character 6"),
                                             (b"\xef\xbb\xbf\x00 a binary file", "at character 0")])
def test_a_task_read_holding_nul_is_refused(given: bytes, says: str) -> None:
    with pytest.raises(InvalidTask, match=re.escape(says)) as info:
        read_task(io.BytesIO(given), 100)
    assert "remove the NUL characters" in info.value.hint

