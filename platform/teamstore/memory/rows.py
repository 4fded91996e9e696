"""User-memory rows to :class:`UserMemory`, read as the store shows them. Pure: nothing here touches a database.

    from teamstore.memory.rows import memory_of, past_expiry

    memory = memory_of(row, fact_rows)        # row: a ts_user_memory row, its values opened; fact_rows: its facts
    if past_expiry(memory, read_at):          # read as gone (read_at: the database's clock, read with the row)
        ...

What does not read as it should (a value that does not open, a fact that fails its type, a time or a version
edited by hand) is listed in the memory's ``damaged``, never raised: it is still the user's, kept in view for
``show`` and an export, and given to no model.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from teamstore.memory.facts import DamagedFact, Fact, FactInvalid, UserMemory, WriterFailure, decode_value
from teamstore.memory.sealing import Unopened
from teamstore.state.schema import DAMAGED


def memory_of(row: Mapping[str, Any], fact_rows: list[Mapping[str, Any]]) -> UserMemory:
    """The memory a ``ts_user_memory`` row (its summary opened) and its facts (their values opened) hold."""
    damaged: list[DamagedFact] = []
    summary = row["summary"]
    if isinstance(summary, Unopened):
        damaged.append(DamagedFact("summary", f"the summary does not open: {summary.why}"))
        summary = ""
    elif not isinstance(summary, str):
        damaged.append(DamagedFact("summary", "the summary is not text"))
        summary = ""
    version = row["version"]
    if type(version) is not int or version < 0:
        damaged.append(DamagedFact("version", "the row version is not a whole number >= 0"))
        version = -1  # no write can follow it: the memory must be forgotten first
    failure = row["failure"]
    return UserMemory(
        user_id=str(row["user_id"]), scope=str(row["scope"]), summary=summary, version=version,
        team=str(row["team"]), team_version=str(row["team_version"]), source_run_id=row["source_run_id"],
        updated_at=_moment(row["updated_at"], "updated_at", damaged),
        expires_at=_moment(row["expires_at"], "expires_at", damaged),
        facts=_facts(fact_rows, damaged), damaged=damaged,
        created_at=_moment(row["created_at"], "created_at", damaged),
        failure=None if failure is None else WriterFailure(
            str(failure), _moment(row["failed_at"], "failed_at", damaged),
            row["failures"] if type(row["failures"]) is int else 0),
    )


def leftovers_of(user_id: str, scope: str, rows: list[Mapping[str, Any]]) -> UserMemory:
    """The facts kept under ``scope`` with no memory written, as a ``leftover`` memory."""
    damaged: list[DamagedFact] = []
    return UserMemory(user_id=user_id, scope=scope, summary="", version=0, team="", team_version="",
                      source_run_id=None, updated_at=None, expires_at=None, facts=_facts(rows, damaged),
                      damaged=damaged, leftover=True)


def past_expiry(memory: UserMemory, now: datetime | None) -> bool:
    """Whether ``memory`` is past its expiry at ``now``, the time its row was read at on the clock its expiry
    was written on (on Postgres the server's: workers on hosts whose clocks disagree judge it alike; ``None``:
    no row was read): read as gone."""
    return memory.expires_at is not None and now is not None and memory.expires_at <= now


def _moment(value: Any, name: str, damaged: list[DamagedFact]) -> datetime | None:
    if value is DAMAGED or (value is not None and not isinstance(value, datetime)):
        damaged.append(DamagedFact(name, f"{name} is not a time"))
        return None
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _facts(rows: list[Mapping[str, Any]], damaged: list[DamagedFact]) -> dict[str, Fact]:
    found: dict[str, Fact] = {}
    for row in rows:
        name = str(row["name"])
        if isinstance(row["value"], Unopened):
            damaged.append(DamagedFact(name, f"its value does not open: {row['value'].why}"))
            continue
        try:
            value = decode_value(name, str(row["type"]), row["value"])
        except FactInvalid as exc:  # what it holds is still the user's: kept in view (show, export)
            damaged.append(DamagedFact(name, str(exc), row["value"] if isinstance(row["value"], str) else None))
            continue
        created, confirmed = (_moment(row[k], f"fact {name!r} {k}", damaged) for k in ("created_at", "confirmed_at"))
        if created is None or confirmed is None:
            continue
        found[name] = Fact(name, str(row["type"]), value, str(row["source_run_id"]), created, confirmed)
    return found
