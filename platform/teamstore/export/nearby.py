"""Whether an id that matches nothing has a near twin that does: same letters, other case, form or spaces.

    from teamstore.export.nearby import near_match, near_matches

    hint = await near_match(engine, "Dave")
    # 'a stored user id differs from this one only in letter case ...'  (or None): for the receipt
    twins = await near_matches(engine, "Dave")      # {'dave': 'letter case'}: for a terminal only

Ids match exactly everywhere in teamstore, so ``erase --user Dave`` for the real ``dave`` finds nothing.
The compliance desk is told so, and told whether such a twin exists: in words on the receipt, which is
stored and pasted into tickets and never holds a raw user id; by name only on an operator's terminal
(the command line, when its stdin and stderr are both one), since the operator is trusted with user ids
(they type them) and needs the exact one to act on, while a job's output goes to its logs. The twin's id
is never stored or logged (docs/erasure.md, *No match*).

The probe looks up the id's variants (all lower case, all upper case, capitalised, title case, case-folded,
each in the four Unicode normalisation forms and trimmed) by equality, which the tables' indexes answer,
in the subject mapping, the resume state and the quarantine, and compares letter case in SQL across the
subject mapping (one row per user: a scan of it), so ``dAvE`` for ``Dave`` is found too (SQLite folds ASCII
letters only; Postgres folds what its collation knows).

An id no session can have now (:func:`teamstore.ids.refusal`: blank, spaces around it, a control character) is
erased or exported only while something is stored under it exactly, by an earlier release
(:func:`check_stored_if_unusable`); otherwise it is refused as a mistyped id, before a request or a record is
opened for it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from sqlalchemy import ColumnElement, FromClause, Table, exists, func, or_, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.schema import subjects
from teamstore.db.engine import describe_failure
from teamstore.errors import InvalidIdentifier, StoreUnavailable
from teamstore.ids import refusal
from teamstore.keys.schema import data_keys
from teamstore.memory.schema import facts, forgets, memories
from teamstore.state.schema import quarantine, sessions

TABLES: tuple[Table, ...] = (subjects, sessions, quarantine)
KEYED_BY_USER: tuple[Table, ...] = (subjects, sessions, quarantine, data_keys, memories, facts, forgets)
"""Every store keyed by the raw user id. The rest (transcripts, outbox, ledger, exports) are keyed by the user's
subject, whose mapping (``ts_subjects``) an erasure deletes last: none holds anything once it is gone."""
_MOST = 20  # twins read per table: enough to say what kind of difference, never listed


def variants(user_id: str) -> set[str]:
    """The spellings of ``user_id`` that differ from it only in letter case, Unicode form or spaces."""
    cased = {user_id, user_id.lower(), user_id.upper(), user_id.capitalize(), user_id.title(), user_id.casefold()}
    forms = {unicodedata.normalize(form, text) for text in cased for form in ("NFC", "NFD", "NFKC", "NFKD")}
    return {v for text in cased | forms for v in (text, text.strip())} - {user_id, ""}


def difference(given: str, stored: str) -> str | None:
    """How ``stored`` differs from ``given``: ``surrounding spaces``, ``letter case``, ``Unicode form``, or
    some of them joined by ``and``; ``None`` if it is not a near twin (or the same id)."""
    kinds = []
    if _edges(given) != _edges(stored):
        kinds.append("surrounding spaces")
    a, b = given.strip(), stored.strip()
    if _loose(a) != _loose(b):
        return None
    if a != b:
        if any(unicodedata.normalize(form, a) == unicodedata.normalize(form, b) for form in ("NFC", "NFKC")):
            kinds.append("Unicode form")
        elif a.casefold() == b.casefold():
            kinds.append("letter case")
        else:
            kinds.append("letter case and Unicode form")
    return " and ".join(kinds) or None


def _edges(text: str) -> tuple[str, str]:
    """The spaces around ``text``."""
    return text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]


def _loose(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


async def near_matches(engine: AsyncEngine, user_id: str, tables: Sequence[FromClause] = TABLES) -> dict[str, str]:
    """The stored user ids that differ from ``user_id`` only in letter case, Unicode form or surrounding
    spaces (at most a few per table), each with how it differs. For an operator's terminal only: never
    stored, logged or put on a receipt.

    Args:
        engine: The database.
        user_id: The id that matched nothing.
        tables: Where to look, each with a ``user_id`` column: the stores keyed by the raw id unless told
            (the desk's listing adds the erasure requests its filters keep, the ones it searches).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    found: set[str] = set()
    try:
        async with engine.connect() as conn:
            for table in tables:
                col = table.c.user_id
                where: ColumnElement[bool] = col.in_(sorted(variants(user_id)))
                if table is subjects:  # one row per user: folded letter case is worth a scan here
                    where = or_(where, func.lower(col) == func.lower(user_id))
                query = select(col).where(where, col != user_id).distinct().limit(_MOST)
                found |= set((await conn.execute(query)).scalars())
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"could not look for near-identical user ids: {describe_failure(exc)}",
                               hint="check the database, then run the command again") from exc
    return {stored: kind for stored in sorted(found) if (kind := difference(user_id, stored)) is not None}


async def near_match(engine: AsyncEngine, user_id: str, tables: Sequence[FromClause] = TABLES) -> str | None:
    """A sentence saying that a stored user id differs from ``user_id`` only in letter case, Unicode form or
    surrounding spaces, and how, without naming it (it goes on the receipt); ``None`` when none does.
    ``tables`` as for :func:`near_matches`.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    kinds = sorted(set((await near_matches(engine, user_id, tables)).values()))
    if not kinds:
        return None
    return (f"a stored user id differs from this one only in {' / '.join(kinds)}: check the id exactly as the "
            "service stores it (ids match exactly)")


async def stored_under(engine: AsyncEngine, user_id: str) -> bool:
    """Whether any store holds something under exactly ``user_id`` (one query).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    query = select(or_(*(exists().where(table.c.user_id == user_id) for table in KEYED_BY_USER)))
    try:
        async with engine.connect() as conn:
            return bool(await conn.scalar(query))
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"could not look for what is stored under the user id: {describe_failure(exc)}",
                               hint="check the database, then run the command again") from exc


async def check_stored_if_unusable(engine: AsyncEngine, user_id: str) -> None:
    """Refuse ``user_id`` if no session can have it now (:func:`teamstore.ids.refusal`) and nothing is stored
    under it: only an earlier release could have stored data under such an id, and without any it is a mistyped
    one (an unset or padded variable, a pasted space) that a no-match receipt or record would only answer.

    Raises:
        InvalidIdentifier: The id is blank, has a space or an invisible character around it or holds a
            control character, and no store holds anything under it.
        StoreUnavailable: The database could not be reached.
    """
    refused = refusal("user_id", user_id)
    if refused is None or await stored_under(engine, user_id):
        return
    raise InvalidIdentifier(f"{refused.message}, and nothing is stored under it: no session can have such an id",
                            hint=refused.hint)
