"""What keeps the values of the state database's statements and rows out of logs: SQLAlchemy's DEBUG rows and
aiosqlite's DEBUG calls, for teamstore's engines and for one the caller built and hands a ``Platform``.

    from teamstore.db.hidden import protect_engine

    protect_engine(my_engine)   # hide_parameters on; its rows and aiosqlite's calls logged without their values
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

LOGGING_NAME = "teamstore"
"""The ``logging_name`` of teamstore's engines: SQLAlchemy logs them on ``sqlalchemy.engine.Engine.teamstore``."""


class _RowValuesHidden(logging.Filter):
    """Logs each row SQLAlchemy reads without its values, as ``hide_parameters`` logs statements.

    At DEBUG (``sqlalchemy.engine`` set to DEBUG, or ``echo="debug"``) SQLAlchemy logs every row it reads, and
    teamstore's rows hold user and session ids, subject keys and wrapped data keys: a log that kept a user's
    wrapped key would open that user's data after an erasure destroyed the key."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "Row %r":
            record.msg, record.args = "Row [values hidden: they hold users' ids and keys]", None
        return True


_ROWS_HIDDEN = _RowValuesHidden()


def hide_row_values() -> str:
    """Install :class:`_RowValuesHidden` on the logger of teamstore's engines (once); returns their logging name."""
    logger = logging.getLogger(f"sqlalchemy.engine.Engine.{LOGGING_NAME}")
    if _ROWS_HIDDEN not in logger.filters:
        logger.addFilter(_ROWS_HIDDEN)
    return LOGGING_NAME


class _DriverCallValuesHidden(logging.Filter):
    """Logs each call aiosqlite hands its connection's thread by the function's name, without its arguments.

    At DEBUG (the root logger at DEBUG is enough: ``aiosqlite``'s level is its parent's) aiosqlite logs
    ``executing <call>`` and ``operation <call> completed`` for every statement, the call being a
    ``functools.partial`` whose text holds the SQL and every bound value: users' and sessions' ids, subject
    keys, wrapped data keys. ``hide_parameters`` does not reach the driver's own log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, functools.partial) for a in record.args):
            record.args = tuple(_call_named(a) if isinstance(a, functools.partial) else a for a in record.args)
        return True


def _call_named(call: functools.partial[Any]) -> str:
    name = getattr(call.func, "__qualname__", type(call.func).__name__)
    return f"{name}(...) [arguments hidden: they hold users' ids and keys]"


_DRIVER_CALLS_HIDDEN = _DriverCallValuesHidden()


def hide_driver_call_values() -> None:
    """Install :class:`_DriverCallValuesHidden` on aiosqlite's logger (once), whatever its level."""
    logger = logging.getLogger("aiosqlite")
    if _DRIVER_CALLS_HIDDEN not in logger.filters:
        logger.addFilter(_DRIVER_CALLS_HIDDEN)


def protect_engine(engine: AsyncEngine) -> None:
    """Keep the values of ``engine``'s statements and rows out of its errors and logs, as :func:`create_engine`
    does for its own: for an engine the caller built and hands teamstore (``Platform(my_engine, ...)``). Its
    ``hide_parameters`` is turned on, the rows its logger (shared with the caller's other engines of the same
    logging name) would print at DEBUG lose their values, and aiosqlite's DEBUG lines their arguments."""
    engine.sync_engine.hide_parameters = True
    logger: Any = engine.sync_engine.logger  # a Logger, or SQLAlchemy's InstanceLogger around one (echo set)
    named = logging.getLogger(getattr(logger, "logger", logger).name)
    if _ROWS_HIDDEN not in named.filters:
        named.addFilter(_ROWS_HIDDEN)
    hide_driver_call_values()
