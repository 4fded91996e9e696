"""The records the state store exchanges keep users' words out of their reprs: a service or a library that logs
one (a restored session, a save that failed) writes sizes and versions, never the conversation."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from teamstore.state.base import CheckpointRecord, QuarantinedRow, Restored, SaveRecord, StoredSession

CANARY = '{"said":"CANARY-2718 my router drops"}'
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _row() -> StoredSession:
    return StoredSession("alice", "s1", "support_triage", "v1", 1, "0.7.5", {"researcher": "fp"}, CANARY,
                         len(CANARY), 3, NOW, NOW, NOW, checkpoint=CANARY, checkpoint_bytes=len(CANARY))


@pytest.mark.parametrize("record", [
    _row(),
    Restored(_row(), replaced_by=7),
    SaveRecord("support_triage", "v1", 1, "0.7.5", {"researcher": "fp"}, CANARY, NOW),
    CheckpointRecord("support_triage", "v1", 1, "0.7.5", {"researcher": "fp"}, CANARY, NOW),
    QuarantinedRow(1, "alice", "s1", "corrupt", "the stored state does not open", "support_triage", "v1",
                   len(CANARY), NOW),
], ids=lambda record: type(record).__name__)
def test_a_records_repr_holds_no_state_or_checkpoint_text(record: object) -> None:
    assert "CANARY-2718" not in repr(record) and "CANARY-2718" not in str(record)


def test_a_row_still_holds_its_state_and_says_how_large_it_is() -> None:
    row = _row()
    assert row.state == CANARY and row.checkpoint == CANARY
    assert f"state_bytes={len(CANARY)}" in repr(row) and f"checkpoint_bytes={len(CANARY)}" in repr(row)
