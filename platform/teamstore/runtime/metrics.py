"""The session runtime's own metrics: how sessions resume, what is quarantined, lease waits, state sizes.

    from teamstore.runtime.metrics import SessionMetrics

    metrics = SessionMetrics(meter_provider)   # None: OpenTelemetry's no-op instruments, nothing recorded
    metrics.resumed("expired")

| metric | kind | attributes |
|---|---|---|
| ``teamstore.session.resumes`` | counter | ``teamstore.resume.outcome`` (``resumed``, ``new``, ``expired``...) |
| ``teamstore.session.quarantined`` | counter | ``teamstore.quarantine.reason`` |
| ``teamstore.session.lease.wait`` | histogram, s | ``error.type`` when the lease was not had |
| ``teamstore.session.state.size`` | histogram, By | (none): each saved state's size |

No attribute names a user, a session or a team's words: outcomes, reasons and error types are a short
fixed vocabulary.
"""

from __future__ import annotations

from opentelemetry.metrics import MeterProvider, NoOpMeterProvider

METER = "teamstore"
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SIZE_BUCKETS = tuple(float(1 << n) for n in range(8, 31, 2))  # 256 B to 1 GB, by fours


class SessionMetrics:
    """The instruments a session records on.

    Args:
        meter_provider: teamstore's meter provider; ``None`` records nothing.
    """

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        meter = (meter_provider or NoOpMeterProvider()).get_meter(METER)
        self._resumes = meter.create_counter("teamstore.session.resumes", unit="{session}",
                                             description="Sessions opened, by how their stored state resumed.")
        self._quarantined = meter.create_counter("teamstore.session.quarantined", unit="{state}",
                                                 description="Stored states refused and set aside, by reason.")
        self._lease_wait = meter.create_histogram(
            "teamstore.session.lease.wait", unit="s", explicit_bucket_boundaries_advisory=WAIT_BUCKETS,
            description="Time from asking for a session's lease to holding it (or giving up).",
        )
        self._state_size = meter.create_histogram(
            "teamstore.session.state.size", unit="By", explicit_bucket_boundaries_advisory=SIZE_BUCKETS,
            description="Size of each saved session state (UTF-8 bytes).",
        )

    def resumed(self, outcome: str) -> None:
        """A session opened; ``outcome`` is its resume outcome."""
        self._resumes.add(1, {"teamstore.resume.outcome": outcome})

    def quarantined(self, reason: str) -> None:
        """A stored state was refused and set aside for ``reason``."""
        self._quarantined.add(1, {"teamstore.quarantine.reason": reason})

    def lease_waited(self, seconds: float, error: BaseException | None = None) -> None:
        """Asking for a lease took ``seconds``; ``error`` is why it was not had, if it was not."""
        self._lease_wait.record(seconds, {"error.type": type(error).__name__} if error is not None else {})

    def state_saved(self, size: int) -> None:
        """A state of ``size`` bytes was saved."""
        self._state_size.record(size)
