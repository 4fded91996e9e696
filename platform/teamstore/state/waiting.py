"""Waiting for a session another worker holds: polls ever further apart, then :class:`SessionBusy`.

    from teamstore.state.waiting import Waiting

    waiting = Waiting(wait_seconds)
    while (row := await try_the_lease(waiting.left)) is None:
        await waiting.pause_or_give_up(crashed="expires on its own")
"""

from __future__ import annotations

import asyncio
import time

from teamstore.state.failures import busy

POLL_START, POLL_MAX = 0.02, 0.25
"""The first pause between attempts at a busy session's lease, and the longest (each pause doubles)."""


class Waiting:
    """The wait for one lease: ``wait_seconds`` from now.

    Args:
        wait_seconds: How long the caller lets another worker keep the session.
    """

    def __init__(self, wait_seconds: float) -> None:
        self.wait_seconds = wait_seconds
        self.deadline = time.monotonic() + wait_seconds
        self._pause = POLL_START

    @property
    def left(self) -> float:
        """Seconds left to wait (0 once the wait is over)."""
        return max(self.deadline - time.monotonic(), 0.0)

    async def pause_or_give_up(self, crashed: str) -> None:
        """Pause before the next attempt, or give up once the wait is over.

        Args:
            crashed: How a crashed holder's lease ends, for the error.

        Raises:
            SessionBusy: The wait is over.
        """
        if time.monotonic() >= self.deadline:
            raise busy(self.wait_seconds, crashed)
        await asyncio.sleep(self._pause)
        self._pause = min(self._pause * 2, POLL_MAX)
