"""Work that must finish once begun, however often its caller is cancelled meanwhile.

    from teamstore.state.cancellation import to_the_end

    await to_the_end(write_and_release())   # cancelled meanwhile: the write finishes, then the cancellation goes on

A save cut short may have landed without its writer learning the new row version, a lease statement may have
taken a lease nobody will give back, and SQLite's connection can be left holding the write lock. So these are
carried through a cancellation of the request that began them. Each wait for them is shielded: anyio's cancel
scopes (Starlette's, FastAPI's) cancel a task again at every turn of the event loop until it ends, and an
unshielded wait would pass the second cancellation on to the work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


async def to_the_end(work: Coroutine[Any, Any, None]) -> None:
    """Await ``work`` to its end even if the caller is cancelled meanwhile, however many times; then let the
    cancellation through (what ``work`` raised is then dropped: the cancellation is what the caller gets)."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if not task.done():  # the caller was cancelled, not the work: it goes on
                cancelled = exc
                continue
            if cancelled is None:
                raise
        except Exception:
            if cancelled is None:
                raise
        if cancelled is not None:
            raise cancelled
        return
