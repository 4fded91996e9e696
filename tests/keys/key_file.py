"""The local key file's dates, moved back as time a test cannot wait for would have moved them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from teamstore.settings import Settings


def made_days_ago(kek_id: str, days: int) -> None:
    """Date the key file's ``kek_id`` ``days`` back, as if made then (the file's mode is kept: written in place)."""
    path = Settings().resolved_key_file
    doc = json.loads(path.read_text())
    doc["made"] = {**doc.get("made", {}), kek_id: (datetime.now(UTC) - timedelta(days=days)).isoformat()}
    path.write_text(json.dumps(doc))
