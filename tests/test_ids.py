"""One rule for user and session ids, and one length limit, wherever an id enters."""

from __future__ import annotations

import pytest
from sqlalchemy import String
from sqlalchemy.ext.asyncio import AsyncEngine

import teamstore.erasure.schema
import teamstore.state.schema  # noqa: F401  (their tables join the metadata)
from teamstore.audit.subjects import find_subject, get_or_create_subject
from teamstore.db.metadata import metadata
from teamstore.errors import InvalidIdentifier
from teamstore.ids import MAX_ID_CHARS, check_erasable_id, check_id, refusal

REFUSED = {
    "": "is empty",
    "x" * (MAX_ID_CHARS + 1): "257 characters long; the limit is 256",
    "a\x00b": "control character U\\+0000",
    "a\tb": "control character U\\+0009",
    "a\x7fb": "control character U\\+007F",
    "a\ud800b": "lone surrogate U\\+D800",
    "   ": "is blank: it holds only spaces or invisible characters",
    "\u200b\u3000": "is blank",  # a zero width space and an ideographic space: nothing shows
    " alice": "has U\\+0020, a space or an invisible character, at its start",
    "alice\u00a0": "has U\\+00A0, a space or an invisible character, at its end",
    "\ufeffalice": "has U\\+FEFF",  # a byte order mark, from a file saved by a Windows editor
}


@pytest.mark.parametrize(("value", "why"), REFUSED.items(), ids=lambda v: repr(v)[:12])
async def test_the_audit_refuses_a_user_id_by_the_same_rule_as_a_session(
    engine: AsyncEngine, value: str, why: str
) -> None:
    with pytest.raises(InvalidIdentifier, match=why):
        check_id("user_id", value)
    # The audit's own check admitted every control character but NUL: a subject no session could match.
    with pytest.raises(InvalidIdentifier, match=why):
        await get_or_create_subject(engine, value)
    assert await get_or_create_subject(engine, "x" * MAX_ID_CHARS) == await find_subject(engine, "x" * MAX_ID_CHARS)


def test_erasure_accepts_every_id_an_earlier_release_could_store_and_no_other() -> None:
    assert check_erasable_id("legacy\tid") == "legacy\tid"  # an earlier audit could store it as a subject
    assert check_erasable_id("Zoë/../admin") == "Zoë/../admin"
    for stored_before in ("   ", "alice ", "legacy\tid"):  # sessions were opened under these before the rule
        assert check_erasable_id(stored_before) == stored_before
        refused = refusal("user_id", stored_before)
        assert refused is not None and stored_before not in refused.message  # said without the id
    assert refusal("user_id", "Zoë/../admin") is None and refusal("user_id", "a b") is None
    for value in ("", "x" * (MAX_ID_CHARS + 1), "a\x00b", "a\ud800b", 7):
        with pytest.raises(InvalidIdentifier):
            check_erasable_id(value)


def test_every_user_and_session_id_column_is_as_wide_as_the_rule_allows() -> None:
    columns = [
        (table.name, column.name, column.type)
        for table in metadata.sorted_tables
        for column in table.columns
        if column.name in ("user_id", "session_id")
    ]
    assert len(columns) >= 6  # sessions, quarantine, holds, subjects, erasure requests
    assert [(t, c) for t, c, kind in columns if not (isinstance(kind, String) and kind.length == MAX_ID_CHARS)] == []
