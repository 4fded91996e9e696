"""A host whose clock disagrees with the database's: this process, with the clock teamstore reads moved.

    with host_clock(timedelta(minutes=6)):      # this host runs six minutes ahead of the database server
        await sweep_expired_sessions(engine)

teamstore reads this host's clock two ways, :func:`teamstore.db.clock.now_utc` and ``datetime.now(UTC)``;
both move, in every teamstore module that reads them. The database server's own clock is left alone.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, tzinfo
from typing import Any

import pytest

from teamstore.db import clock


class _AnyDatetime(type):
    """Keeps ``isinstance(value, datetime)`` true for every datetime in a module whose ``datetime`` is moved."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, datetime)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, datetime)


@contextmanager
def host_clock(offset: timedelta) -> Iterator[None]:
    """The clock teamstore reads on this host, ``offset`` away from the database's."""
    real = clock.now_utc

    def skewed() -> datetime:
        return real() + offset

    class Skewed(datetime, metaclass=_AnyDatetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> datetime:
            return datetime.now(tz) + offset

    modules = [module for name, module in list(sys.modules.items()) if name.startswith("teamstore")]
    with pytest.MonkeyPatch.context() as patch:
        for module in modules:
            if getattr(module, "now_utc", None) is real:
                patch.setattr(module, "now_utc", skewed)
            if getattr(module, "datetime", None) is datetime:
                patch.setattr(module, "datetime", Skewed)
        yield
