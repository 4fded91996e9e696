"""The services of one session (a pytest run, a benchmark): each started on first use, stopped at the end.

    services = Services(decide(os.environ), database_url_variable="TEAMSTORE_TEST_DATABASE_URL")
    services.url("postgres")           # the variable's URL when set, else the chosen provider's server
    services.url("aws")                # moto's endpoint: S3 (and KMS, on the same endpoint)
    with services.otlp(OtlpReceiver) as receiver:  # an OTLP/HTTP receiver decoding what arrives
        ...
    services.close()
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import TypeVar

from tests.otlp_receiver import OtlpReceiver
from tests.services.choice import Choice
from tests.services.providers import PROVIDERS, Options

R = TypeVar("R", bound=OtlpReceiver)

OTLP_ABOUT = "a receiver in this process"
"""In both modes: the tests assert on the spans it decodes and on the bytes on the wire (the canary suite
searches them), so a collector container would only forward to a receiver that must still run here."""


class Services:
    """Starts each service once, from the provider the session's :class:`Choice` names."""

    def __init__(self, choice: Choice, *, database_url_variable: str, durable: bool = False,
                 environ: Mapping[str, str] = os.environ) -> None:
        """
        Args:
            choice: Docker or local, decided once for the session (:func:`decide`).
            database_url_variable: The variable naming an existing Postgres server to use instead of starting
                one (``TEAMSTORE_TEST_DATABASE_URL`` for the tests, ``TEAMSTORE_BENCH_DATABASE_URL`` for the
                benchmarks).
            durable: Postgres with fsync on (the benchmarks measure against production durability).
            environ: Where to read ``database_url_variable``.
        """
        self.choice = choice
        self._variable = database_url_variable
        self._given = {"postgres": url} if (url := environ.get(database_url_variable)) else {}
        self._options = Options(durable=durable)
        self._urls: dict[str, str] = {}
        self._stack = ExitStack()

    def url(self, name: str) -> str:
        """The URL of service ``name`` (a key of :data:`PROVIDERS`), started on the first call.

        Raises:
            ServiceUnavailable: It could not start; the message says what to install or start.
        """
        if name in self._given:
            return self._given[name]
        if name not in self._urls:
            provider = PROVIDERS[name][self.choice.mode](self._options)
            self._urls[name] = provider.start()
            self._stack.callback(provider.stop)
        return self._urls[name]

    @contextmanager
    def otlp(self, kind: type[R]) -> Iterator[R]:
        """A fresh OTLP/HTTP receiver of class ``kind`` on a loopback port, stopped on leaving."""
        receiver = kind()
        receiver.start()
        try:
            yield receiver
        finally:
            receiver.stop()

    def describe(self) -> list[str]:
        """Which providers this session uses and why: the lines of pytest's header."""
        where = {name: (f"{self._variable} (given)" if name in self._given else modes[self.choice.mode].about)
                 for name, modes in PROVIDERS.items()}
        return [f"teamstore services: {self.choice.mode} ({self.choice.reason})",
                "  " + "; ".join(f"{name}: {about}" for name, about in [*where.items(), ("otlp", OTLP_ABOUT)])]

    def close(self) -> None:
        """Stop every service this session started (each one, even when another fails to stop)."""
        self._stack.close()
