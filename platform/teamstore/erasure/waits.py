"""What an erasure waits out before it deletes anything: writes that may still land for the user.

    from teamstore.erasure.waits import Waits

    waits = Waits(engine, knobs, say=print)            # each wait is said before it starts
    await waits.fence_grace(row.received_at)           # writes that passed the fence check just before it
    still_open = await waits.sessions("alice")         # 0: none of the user's sessions is open
    lands_by = await waits.uploads(subject_key)        # None: no upload of their transcripts can still land

The fence (``ts_user_holds``) refuses every write that begins after it goes up; these waits cover those that
began before it. Each is bounded by its setting (``TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS``,
``..._SESSION_WAIT_SECONDS``, ``..._UPLOAD_WAIT_SECONDS``); what is still in doubt after one is the caller's to
refuse on.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import claims
from teamstore.db.clock import database_now
from teamstore.erasure.settings import ErasureSettings
from teamstore.erasure.steps import Notice
from teamstore.erasure.steps.base import seconds
from teamstore.state.erasure import open_sessions, open_sessions_end

_SESSION_POLL_SECONDS = 0.25
_UPLOAD_POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Waits:
    """The waits of an erasure run against ``engine``, bounded by ``knobs``; ``say`` is told of each first."""

    engine: AsyncEngine
    knobs: ErasureSettings
    say: Notice

    async def fence_grace(self, received_at: datetime) -> None:
        """Wait out what is left of the fence's grace after the request was received at ``received_at``, on the
        clock it was stamped on (on Postgres the server's: a rerun on another host whose clock runs ahead still
        waits).

        Raises:
            StoreUnavailable: The database's clock could not be read.
        """
        # Writes that checked the fence just before it went up (with the request) land within their
        # deadline: wait out what is left of it, on a rerun straight after a killed first attempt too.
        if self.knobs.fence_grace_seconds <= 0:
            return
        now = await database_now(self.engine)
        left = (received_at + timedelta(seconds=self.knobs.fence_grace_seconds) - now).total_seconds()
        if left > 0:
            wait = min(left, self.knobs.fence_grace_seconds)
            self.say(f"fence up; waiting {seconds(wait)} for writes that passed the fence check just before it "
                     "(TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS)")
            await asyncio.sleep(wait)

    async def sessions(self, user_id: str) -> int:
        """Wait up to ``session_wait_seconds`` for the user's open sessions to end; how many are still open.

        None can open meanwhile (the fence refuses them), so once none is open none writes again.
        """
        deadline = time.monotonic() + self.knobs.session_wait_seconds
        said = False
        while True:  # other processes hold the sessions: poll the database
            still_open = await open_sessions(self.engine, user_id)
            left = deadline - time.monotonic()
            if not still_open or left <= 0:
                return still_open
            if not said:
                self.say(f"waiting up to {seconds(left)} for {still_open} open session(s) of the user to end "
                         "(TEAMSTORE_ERASURE_SESSION_WAIT_SECONDS)")
                said = True
            await asyncio.sleep(min(_SESSION_POLL_SECONDS, left))

    async def sessions_end(self, user_id: str) -> datetime | None:
        """When the last of the user's open sessions' row leases runs out if nothing renews it (a worker that died
        holding it); ``None`` under advisory locks, which go with their worker's connection."""
        return await open_sessions_end(self.engine, user_id)

    async def uploads(self, subject_key: str) -> datetime | None:
        """Wait up to ``upload_wait_seconds`` until no upload of the subject's transcripts can still land (an
        outbox row claimed for it); the latest time one still may, if one still may after the wait.

        None can start meanwhile (the fence refuses claims), so once none may land none will.
        """
        deadline = time.monotonic() + self.knobs.upload_wait_seconds
        said = False
        while (lands_by := await claims.in_doubt_until(self.engine, subject_key)) is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return lands_by
            if not said:
                self.say(f"waiting up to {seconds(left)} for uploads of the user's transcripts that may still land "
                         "(TEAMSTORE_ERASURE_UPLOAD_WAIT_SECONDS)")
                said = True
            # Polled rather than slept out: an upload on its way moves its claim on, and one that ends
            # settles it early. (``lands_by`` is on the database's clock, which this host's need not match.)
            await asyncio.sleep(min(_UPLOAD_POLL_SECONDS, left))
        return None
