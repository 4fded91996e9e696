"""What run() takes as a task: refused before the team runs, with the reason."""

from __future__ import annotations

import io

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

