"""The synchronous calls behind ``teamstore.analytics``: open the configured database, query, close.

They run their own event loop, or, called where one is already running (a Jupyter kernel runs one), on a
worker thread with a loop of its own, so a notebook cell calls them as plain functions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from teamstore.analytics.query import CostQuery, When, cost_report
from teamstore.app import App
from teamstore.audit.cost import CostReport
from teamstore.audit.prices import load_prices
from teamstore.errors import NoMatchingUsage
from teamstore.settings import Settings

T = TypeVar("T")


def run_sync(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work()`` to its end from synchronous code, whether or not an event loop runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(work))
    # A loop runs here (a notebook's): it cannot be blocked on from inside, so the work gets its own.
    with ThreadPoolExecutor(1, thread_name_prefix="teamstore-analytics") as pool:
        return pool.submit(lambda: asyncio.run(_awaited(work))).result()


async def _awaited(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


async def on_app(settings: Settings | None, work: Callable[[App], Awaitable[T]]) -> T:
    """``work`` on the composition root of ``settings`` (the environment by default), closed after it.

    Raises:
        SchemaNotReady: The database does not exist yet or is not migrated.
    """
    app = App(settings, must_exist=True)  # reading a report never creates a database
    try:
        await app.ensure_schema()
        return await work(app)
    finally:
        await app.aclose()


async def report_on(app: App, query: CostQuery, allow_empty: bool) -> CostReport:
    """The report of ``query`` on ``app``'s database with its price table (``TEAMSTORE_PRICES_PATH``)."""
    try:
        return await cost_report(app.engine, load_prices(app.settings.prices_path), query)
    except NoMatchingUsage as exc:
        if allow_empty and isinstance(exc.report, CostReport):
            return exc.report
        raise


def cost(
    by: str | Sequence[str] = "session",
    *,
    user: str | None = None,
    session: str | None = None,
    team: str | None = None,
    model: str | None = None,
    since: When = None,
    until: When = None,
    top: int | None = None,
    pseudonymous: bool = False,
    allow_empty: bool = False,
    settings: Settings | None = None,
) -> CostReport:
    """Token usage and cost from the ledger, as ``teamstore cost`` gives it.

    Args:
        by: One or two of session, user, team, version, model, agent, purpose, day, week, month, year
            (``"team,model"`` or ``("team", "model")``).
        user: Only this user (the exact id).
        session: Only this session of ``user``.
        team: Only this team.
        model: Only this model (its name as the ledger stores it).
        since: Runs started at or after: ``"2026-11-01"``, an ISO timestamp, a ``date``/``datetime``, or a
            time back from now (``"24h"``, ``"7d"``, ``"2w"``).
        until: Runs started before (same forms).
        top: Keep the ``top`` costliest groups (ties by tokens); the total still counts every group.
        pseudonymous: Users and sessions as pseudonymous keys instead of the application's ids.
        allow_empty: Return an empty report when nothing matches, instead of raising.
        settings: Where the database and prices are; the environment (``TEAMSTORE_*``) by default.

    Returns:
        The report: ``rows`` (:class:`~teamstore.audit.cost.CostRow`), ``total``, ``price_version``,
        ``currency``; ``report.to_pandas()`` for a DataFrame.

    Raises:
        NoMatchingUsage: Nothing matches (an unknown user, team or model, an empty window), unless
            ``allow_empty``; ``exc.hint`` names near team or model names.
        ConfigurationError: A malformed grouping, date or ``top``.
        SchemaNotReady: The database does not exist yet or is not migrated.
    """
    query = CostQuery.build(by, user=user, session=session, team=team, model=model, since=since, until=until,
                            top=top, pseudonymous=pseudonymous)
    return run_sync(lambda: on_app(settings, lambda app: report_on(app, query, allow_empty)))


def cost_frame(by: str | Sequence[str] = "session", **filters: Any) -> Any:
    """:func:`cost` as a pandas DataFrame (``pip install 'teamstore[analytics]'``): the same arguments.

    Raises:
        MissingExtra: pandas is not installed.
    """
    return cost(by, **filters).to_pandas()


def write_report(path: str | Path, *, every: str = "day", top: int = 10, pseudonymous: bool = False,
                 settings: Settings | None = None, **filters: Any) -> Path:
    """Write the HTML cost report ``teamstore cost report`` writes: one self-contained page of charts.

    Args:
        path: The file to write, owner-only (``0600``); one already there is replaced whole.
        every: The time scale of the charts: ``day``, ``week``, ``month`` or ``year`` (a longer one when the
            runs span more than :data:`~teamstore.analytics.page.MOST_BARS` of it).
        top: How many of the costliest sessions to chart, 1 to 50.
        pseudonymous: Users and sessions as keys (for a page that leaves the analysts' hands).
        settings: As for :func:`cost`.
        **filters: ``user``, ``session``, ``team``, ``model``, ``since``, ``until`` as for :func:`cost`.

    Returns:
        The path written.

    Raises:
        NoMatchingUsage: Nothing matches the filters (no page is written).
        ReportNotWritten: ``path`` is empty, a folder, in no existing folder, or cannot be written.
    """
    from teamstore.analytics.page import report_page, report_target, write_page

    target = report_target(path)

    async def work(app: App) -> str:
        return await report_page(app.engine, load_prices(app.settings.prices_path), every=every, top=top,
                                 pseudonymous=pseudonymous, **filters)

    html = run_sync(lambda: on_app(settings, work))
    write_page(target, html)
    return target
