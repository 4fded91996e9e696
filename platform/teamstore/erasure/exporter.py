"""What the erasure records hold about a user, for an export: the requests still open for the exact id, and
those held that keep a keyed hash of it.

    from teamstore.erasure.exporter import ErasureRequestsExporter

    section = await ErasureRequestsExporter().export(ctx, archive)    # erasure_requests.json

An erasure request names its user only while it is unfinished (open, or failed and waiting for a rerun). One
held under a legal hold has forgotten the id but keeps its keyed hash, found again from the id given
(:func:`teamstore.erasure.requests.user_hashes`). A finished request forgets both, so nothing links it to the user
any more, and it is not exported. The
export package defines the protocol; the composition root hands it this exporter, since the export sits
below the erasure (an erasure reaches the export's records).
"""

from __future__ import annotations

from sqlalchemy import and_, or_, select

from teamstore.erasure import record, requests
from teamstore.erasure.schema import erasure_requests
from teamstore.erasure.settings import ErasureSettings
from teamstore.export.base import Archive, ExportContext, Section


class ErasureRequestsExporter:
    """The user's unfinished erasure requests, with their steps and attempts so far.

    Args:
        knobs: Erasure settings (``TEAMSTORE_ERASURE_HASH_KEY`` keys the hash a held request keeps);
            ``ErasureSettings()`` (the environment) by default, as the coordinator's.
    """

    name = "erasure_requests"

    def __init__(self, knobs: ErasureSettings | None = None) -> None:
        self.knobs = knobs or ErasureSettings()

    async def export(self, ctx: ExportContext, archive: Archive) -> Section:
        """Write each request (its id, dates, extension, who asked and ran it, each store's step).

        Raises:
            ConfigurationError: The previous hash key is given without the current one
                (:func:`teamstore.erasure.requests.check_hash_keys`).
            StoreUnavailable: The database could not be reached.
        """
        r = erasure_requests.c
        hashes = await requests.user_hashes(ctx.engine, self.knobs, ctx.user_id)
        held = and_(r.user_id.is_(None), r.user_hash.in_(hashes))
        async with requests.db(ctx.engine, "read the user's erasure requests") as conn:
            rows = (await conn.execute(select(erasure_requests).where(or_(r.user_id == ctx.user_id, held))
                                       .order_by(r.received_at, r.request_id))).all()
        found = []
        for mapping in (row._mapping for row in rows):
            row = requests.row_of(mapping)
            steps = await record.load_steps(ctx.engine, row.request_id)
            attempts = await record.load_attempts(ctx.engine, row.request_id)
            found.append({
                "request_id": row.request_id, "status": row.status, "received_at": row.received_at,
                "due_at": row.due_at, "reason": row.reason, "requested_by": row.requested_by,
                "extension": row.extension.model_dump(mode="json") if row.extension else None,
                "stores": {name: step.model_dump(mode="json") for name, step in steps.items()},
                "attempts": [attempt.model_dump(mode="json") for attempt in attempts],
            })
        return archive.add_json("erasure_requests.json", {"requests": found}, records=len(found))
