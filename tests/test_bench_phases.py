"""The whole-request benchmark times the runtime from outside, by the names the runtime calls: a request
through it must land in every phase it prints, or a rename in the runtime would silently drop a phase (or
stop the benchmark)."""

from __future__ import annotations

from pathlib import Path

from bench.request_variants import Teamstore
from teamstore.runtime import opening, runs
from teamstore.runtime.session import Session


async def test_one_request_through_the_benchmark_fills_every_phase_it_prints(tmp_path: Path) -> None:
    originals = (opening.judge, opening.apply_states, runs.notify_observers, runs.Run._produce, Session.flush_audit)
    variant = Teamstore(f"sqlite+aiosqlite:///{tmp_path / 'bench.db'}", tmp_path / "home")
    await variant.setup(workers=1)
    try:
        await variant.cycle(0, 2)  # the second request resumes the first one's state: validate and apply run
        times = variant.per_request()
    finally:
        await variant.close()
    timed = {phase: seconds for phase, seconds in times.items() if phase not in ("other", "total")}
    assert set(timed) == set(variant.phases.names)
    # Every phase but the background lookups (made once, ahead of time) is on the request's path.
    assert all(seconds > 0 for phase, seconds in timed.items() if "background" not in phase), timed
    assert originals == (opening.judge, opening.apply_states, runs.notify_observers, runs.Run._produce,
                         Session.flush_audit)  # unwrapped again

