"""The lease keeper: a session's lease renewed every third of its TTL while it is open, never after it closes;
a renewal that fails is tried again at the next, a lease found lost is not renewed any more, and refuses what
the session would do next."""

from __future__ import annotations

import asyncio
import time

import pytest

from teamstore.errors import StaleStateVersion, StoreUnavailable
from teamstore.runtime.deps import LeaseKeeper
from teamstore.state.base import SessionKey

KEY = SessionKey("alice", "s1")


class Leases:
    """A store's ``renew``: each call recorded; answers from ``answers`` in turn, then ``True``."""

    def __init__(self, *answers: bool | Exception) -> None:
        self.calls: list[tuple[SessionKey, str, float]] = []
        self.answers = list(answers)

    async def renew(self, key: SessionKey, *, owner: str, lease_ttl: float) -> bool:
        self.calls.append((key, owner, lease_ttl))
        answer = self.answers.pop(0) if self.answers else True
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_an_open_session_renews_every_third_of_its_ttl_and_never_once_stopped() -> None:
    leases = Leases()
    keeper = LeaseKeeper(leases, KEY, "w-1/abc", 0.3)  # type: ignore[arg-type]  # renew is all it uses
    await asyncio.sleep(0.05)
    assert leases.calls == []  # not due yet: a short request renews nothing
    await asyncio.sleep(0.3)
    assert 2 <= len(leases.calls) <= 4 and set(leases.calls) == {(KEY, "w-1/abc", 0.3)}
    await keeper.stop()
    renewed = len(leases.calls)
    await asyncio.sleep(0.25)
    assert len(leases.calls) == renewed


async def test_a_failed_renewal_is_tried_again_and_a_lost_lease_is_left_alone() -> None:
    leases = Leases(StoreUnavailable("the database is down"), False)
    keeper = LeaseKeeper(leases, KEY, "w-1/abc", 0.15)  # type: ignore[arg-type]
    await asyncio.sleep(0.4)
    assert len(leases.calls) == 2  # failed, tried again and found lost: no third
    await keeper.stop()


async def test_stopping_waits_for_a_renewal_under_way() -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    done: list[str] = []

    class Slow(Leases):
        async def renew(self, key: SessionKey, *, owner: str, lease_ttl: float) -> bool:
            entered.set()
            await release.wait()
            done.append("renewed")
            return True

    keeper = LeaseKeeper(Slow(), KEY, "w-1/abc", 0.03)  # type: ignore[arg-type]
    await asyncio.wait_for(entered.wait(), 5)
    stopping = asyncio.ensure_future(keeper.stop())
    await asyncio.sleep(0.05)
    assert not stopping.done()
    release.set()
    await asyncio.wait_for(stopping, 5)
    assert done == ["renewed"]


async def test_a_lease_found_lost_refuses_what_the_session_does_next() -> None:
    leases = Leases(False)
    keeper = LeaseKeeper(leases, KEY, "w-1/abc", 0.15)  # type: ignore[arg-type]
    await keeper.check()  # just taken: held, and the store is not asked
    assert leases.calls == []
    await asyncio.sleep(0.1)  # the renewal found it lost
    with pytest.raises(StaleStateVersion, match="lease was lost"):
        await keeper.check()
    await keeper.stop()


async def test_a_worker_that_hung_past_its_lease_asks_the_store_before_it_goes_on() -> None:
    leases = Leases(False)
    keeper = LeaseKeeper(leases, KEY, "w-1/abc", 0.3)  # type: ignore[arg-type]
    time.sleep(0.25)  # the event loop blocked: no renewal went out, and none is due to run before the check
    with pytest.raises(StaleStateVersion, match="lease was lost"):
        await keeper.check()
    assert len(leases.calls) == 1
    await keeper.stop()
