"""Rows to records and records to parameters (a row to its quarantine copy too), once for every backend.
Pure: nothing here touches a database.

    from teamstore.state.rows import save_params, stored

    params = save_params(key, expected_version, record, owner="w-1")   # the inputs of any save statement
    row = stored(key.user_id, key.session_id, values)                  # values: SESSION_COLUMNS, then read_at

The parameter names are those of :mod:`teamstore.state.statements`; a statement takes the ones it names
and ignores the rest. A lease's end and an expiry go both as a time on this host's clock (SQLite's
statements write it) and as a length from now (Postgres's add it to the server's clock).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import ColumnElement, RowMapping, literal, select

from teamstore.db.clock import now_utc, utc
from teamstore.db.fence import held
from teamstore.state.base import (
    CheckpointRecord,
    Claim,
    QuarantinedRow,
    SaveRecord,
    SessionKey,
    StoredSession,
    checked,
    read_fingerprints,
)
from teamstore.state.schema import DAMAGED, JsonText, quarantine

_STAND_INS: dict[str, Any] = {"schema_version": 0, "state_bytes": 0, "row_version": 0, "created_at": None,
                              "updated_at": None, "expires_at": None}
"""What a damaged column reads as (see :data:`teamstore.state.schema.DAMAGED`); a quarantine writes them
back, so the row is whole again."""


def stored(user_id: str, session_id: str, values: Sequence[Any]) -> StoredSession:
    """The session row ``values`` (its :data:`teamstore.state.statements.SESSION_COLUMNS`, in order, then the
    time it was read), judged by :func:`teamstore.state.base.checked`: every backend's load, read and listing
    maps its rows here."""
    (state, version, team, team_version, schema, agentchat, fingerprints, size, created, updated, expires,
     checkpoint, checkpoint_bytes, read_at) = values
    damaged: tuple[str, ...] = ()
    if any(value is DAMAGED for value in (schema, size, version, created, updated, expires)):
        # Only SQLite keeps a value of the wrong type in a column; its column types read it as DAMAGED.
        read = dict(zip(_STAND_INS, (schema, size, version, created, updated, expires), strict=True))
        damaged = tuple(name for name, value in read.items() if value is DAMAGED)
        schema, size, version, created, updated, expires = (
            _STAND_INS[name] if name in damaged else value for name, value in read.items())
    return checked(StoredSession(
        user_id=user_id,
        session_id=session_id,
        team=team,
        team_version=team_version,
        schema_version=schema,
        agentchat_version=agentchat,
        fingerprints=read_fingerprints(fingerprints),
        state=state,
        state_bytes=size,
        row_version=version,
        created_at=utc(created) or now_utc(),
        updated_at=utc(updated) or now_utc(),
        expires_at=utc(expires),
        checkpoint=checkpoint,
        # A count of the wrong type (SQLite) reads as -1, which no checkpoint has: the runtime refuses it.
        checkpoint_bytes=-1 if checkpoint_bytes is DAMAGED else int(checkpoint_bytes or 0),
        damaged=damaged,
        defects=(f"the row's {', '.join(damaged)} hold values of the wrong type",) if damaged else (),
        read_at=utc(read_at),
    ))


def new_session(key: SessionKey, claim: Claim) -> StoredSession:
    """A session that has no row yet (advisory-lock leases write it at its first save), as ``claim`` makes it."""
    now = now_utc()
    return StoredSession(key.user_id, key.session_id, claim.team, claim.team_version, claim.schema_version,
                         claim.agentchat_version, dict(claim.fingerprints), None, 0, 0, now, now, None, read_at=now)


def quarantined(m: Mapping[str, Any] | RowMapping) -> QuarantinedRow:
    """A ``ts_quarantine`` row as read back."""
    return QuarantinedRow(
        id=m["id"],
        user_id=m["user_id"],
        session_id=m["session_id"],
        reason=m["reason"],
        detail=m["detail"],
        team=m["team"],
        team_version=m["team_version"],
        state_bytes=m["state_bytes"],
        quarantined_at=utc(m["quarantined_at"]) or now_utc(),
        checkpoint_bytes=len(m["checkpoint"].encode("utf-8", "surrogatepass")) if m.get("checkpoint") else 0,
    )


def _fingerprints(value: Mapping[str, str]) -> JsonText:
    # JSON text, which the fingerprints column writes as it is on both databases (psycopg sends it as text).
    return JsonText(orjson.dumps(dict(value)).decode())


def row_lease_params(
    key: SessionKey, claim: Claim, owner: str, lease_ttl: float, max_sessions: int | None
) -> dict[str, Any]:
    """The inputs of :func:`teamstore.state.statements.acquire_row`."""
    now, lease_for = now_utc(), timedelta(seconds=lease_ttl)
    return {
        "u": key.user_id, "s": key.session_id, "owner": owner, "now": now, "until": now + lease_for,
        "lease_for": lease_for, "max": max_sessions,
        "v_team": claim.team, "v_team_version": claim.team_version, "v_schema_version": claim.schema_version,
        "v_agentchat_version": claim.agentchat_version, "v_fingerprints": _fingerprints(claim.fingerprints),
    }


def lock_params(key: SessionKey, lease_ttl: float, max_sessions: int | None) -> dict[str, Any]:
    """The inputs of :func:`teamstore.state.statements.acquire_lock` (and of releasing the lock)."""
    return {"u": key.user_id, "s": key.session_id, "ttl_ms": str(max(1, round(lease_ttl * 1000))),
            "max": max_sessions}


def lease_params(key: SessionKey, owner: str, lease_ttl: float) -> dict[str, Any]:
    """The inputs of :func:`teamstore.state.statements.renew_row`."""
    lease_for = timedelta(seconds=lease_ttl)
    return {"u": key.user_id, "s": key.session_id, "owner": owner, "until": now_utc() + lease_for,
            "lease_for": lease_for}


def _expiry(now: datetime, record: SaveRecord | CheckpointRecord) -> dict[str, Any]:
    """The record's expiry window, as times and as lengths from ``now``."""
    return {"v_expires_at": record.expires_at, "v_expires_latest": record.expires_latest,
            "v_expires_in": record.expires_at - now, "v_expires_latest_in": record.expires_latest - now}


def save_params(key: SessionKey, expected_version: int, record: SaveRecord, *, owner: str = "") -> dict[str, Any]:
    """The inputs of every save statement (``owner`` for row leases)."""
    now = now_utc()
    return {
        "u": key.user_id, "s": key.session_id, "version": expected_version, "owner": owner, "now": now,
        "v_team": record.team, "v_team_version": record.team_version, "v_schema_version": record.schema_version,
        "v_agentchat_version": record.agentchat_version, "v_fingerprints": _fingerprints(record.fingerprints),
        "v_state": record.state, "v_state_bytes": len(record.state.encode()), **_expiry(now, record),
    }


def checkpoint_params(
    key: SessionKey, expected_version: int, record: CheckpointRecord, *, owner: str = ""
) -> dict[str, Any]:
    """The inputs of every checkpoint statement (``owner`` for row leases)."""
    text, now = record.checkpoint, now_utc()
    return {
        "u": key.user_id, "s": key.session_id, "version": expected_version, "owner": owner, "now": now,
        "v_team": record.team, "v_team_version": record.team_version, "v_schema_version": record.schema_version,
        "v_agentchat_version": record.agentchat_version, "v_fingerprints": _fingerprints(record.fingerprints),
        "v_checkpoint": text, "v_checkpoint_bytes": len(text.encode()) if text is not None else 0,
        "v_state_expired": record.state_expired, **_expiry(now, record),
    }


def quarantine_source(
    row: StoredSession, state: str | None, checkpoint_only: bool, reason: str, detail: str, now: Any, kept: Any
) -> tuple[list[str], Any]:
    """The columns of ``row``'s quarantine copy, and the one-row ``SELECT`` of their values that
    :meth:`teamstore.state.admin.SessionAdmin.quarantine` inserts: none unless ``kept`` holds and no erasure
    holds the user."""
    q = quarantine.c
    record: dict[str, Any] = {
        "user_id": row.user_id, "session_id": row.session_id, "reason": reason[:64], "detail": detail,
        "team": row.team, "team_version": row.team_version, "schema_version": row.schema_version,
        "agentchat_version": row.agentchat_version, "fingerprints": dict(row.fingerprints or {}),
        "state": state, "state_bytes": 0 if checkpoint_only else row.state_bytes,
        "row_version": row.row_version, "quarantined_at": now, "checkpoint": row.checkpoint,
    }
    values = [(v if isinstance(v, ColumnElement) else literal(v, q[name].type)).label(name)
              for name, v in record.items()]
    return list(record), select(*values).where(kept, ~held(row.user_id))
