"""The maintenance methods every state backend exposes, forwarded to the :class:`~teamstore.state.admin.SessionAdmin`
it holds, so that each backend writes only its hot path.

    from teamstore.state.admin_methods import AdminMethods

    class RowLeaseStore(AdminMethods):       # self.admin = SessionAdmin(engine, ROW_LEASES, self, check)
        ...
"""

from __future__ import annotations

from datetime import timedelta

from teamstore.state.admin import SessionAdmin
from teamstore.state.base import Ending, QuarantinedRow, Restored, SessionKey, SessionPage, StoredSession


class AdminMethods:
    """The maintenance methods of :class:`teamstore.state.base.StateStore`, forwarded to the backend's
    :class:`SessionAdmin` (so each backend writes only its hot path)."""

    admin: SessionAdmin

    async def quarantine(
        self, row: StoredSession, *, owner: str, reason: str, detail: str, checkpoint_only: bool = False
    ) -> int:
        """See :meth:`SessionAdmin.quarantine`."""
        return await self.admin.quarantine(row, owner=owner, reason=reason, detail=detail,
                                           checkpoint_only=checkpoint_only)

    async def restore_quarantined(
        self, quarantine_id: int, *, ttl: timedelta, replace: bool = False, wait_seconds: float = 0.0,
        retention: timedelta | None = None, ending: Ending | None = None,
    ) -> Restored:
        """See :meth:`SessionAdmin.restore_quarantined`."""
        return await self.admin.restore_quarantined(quarantine_id, ttl=ttl, replace=replace, wait_seconds=wait_seconds,
                                                    retention=retention, ending=ending)

    async def delete_session(
        self, key: SessionKey, *, wait_seconds: float = 0.0, ending: Ending | None = None
    ) -> bool:
        """See :meth:`SessionAdmin.delete_session`."""
        return await self.admin.delete_session(key, wait_seconds=wait_seconds, ending=ending)

    async def get(self, key: SessionKey) -> StoredSession | None:
        """See :meth:`SessionAdmin.get`."""
        return await self.admin.get(key)

    async def list_sessions(self, user_id: str | None = None, limit: int = 100) -> list[StoredSession]:
        """See :meth:`SessionAdmin.list_sessions`."""
        return await self.admin.list_sessions(user_id, limit)

    async def list_sessions_page(
        self, user_id: str | None = None, limit: int = 100, *, after: str | None = None
    ) -> SessionPage:
        """See :meth:`SessionAdmin.list_sessions_page`."""
        return await self.admin.list_sessions_page(user_id, limit, after=after)

    async def live_sessions(self, user_id: str) -> int:
        """See :meth:`SessionAdmin.live_sessions`."""
        return await self.admin.live_sessions(user_id)

    async def list_quarantined(self, user_id: str | None = None, limit: int = 100) -> list[QuarantinedRow]:
        """See :meth:`SessionAdmin.list_quarantined`."""
        return await self.admin.list_quarantined(user_id, limit)

    async def get_quarantined(self, quarantine_id: int) -> QuarantinedRow | None:
        """See :meth:`SessionAdmin.get_quarantined`."""
        return await self.admin.get_quarantined(quarantine_id)

    async def sweep_expired(self, *, batch_size: int = 500, ending: Ending | None = None) -> int:
        """See :meth:`SessionAdmin.sweep_expired`."""
        return await self.admin.sweep_expired(batch_size=batch_size, ending=ending)

    async def check_lease_mode(self) -> None:
        """Refuse to lease sessions on a database that records the other kind of lease or another migration (see
        :class:`teamstore.state.lease_mode.LeaseModeCheck`)."""
        await self.admin.check()
