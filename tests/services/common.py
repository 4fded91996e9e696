"""What every service provider and fixture shares: the errors, a free port, the skip-or-fail rule."""

from __future__ import annotations

import os
import socket

import pytest

REQUIRE = "TEAMSTORE_REQUIRE_SERVICES"
"""Set to ``1`` (CI): a service that cannot start fails its tests instead of skipping them."""


class ServicesError(Exception):
    """The services cannot be chosen as asked: an unknown choice, or ``docker`` forced without an engine."""


class ServiceUnavailable(Exception):
    """One service could not start; the message says why and what to install or start."""


def require_or_skip(reason: str) -> None:
    """Fail in CI, skip elsewhere: CI must never silently skip a service suite."""
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"required service unavailable: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    """An unused TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
