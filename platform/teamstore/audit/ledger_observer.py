"""The ledger's observer: each run's token usage written to ``ts_usage`` as the run ends, and the session's id
beside its pseudonymous key (``ts_subject_sessions``), so analysts get cost per session.

    from teamstore.audit.ledger_observer import LedgerObserver

    observer = LedgerObserver(engine, pseudonyms)   # build_audit_observers makes it for a platform
    # runtime: session_opening(...) before the lease; run_finished(ctx, outcome) as each run ends

The rows themselves (what a run's usage is, per attempt, agent, model and purpose) are
:mod:`teamstore.audit.ledger`'s; the run's keys and the erasure fence are :class:`~teamstore.audit.pseudonyms.Pseudonyms`'.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.ledger import usage_rows
from teamstore.audit.price_sync import PriceSync
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.schema import ledger_name
from teamstore.audit.transcripts.record import RunKeys
from teamstore.db.engine import describe_failure
from teamstore.errors import TeamstoreError
from teamstore.events import LaterCalls, RunContext, RunOutcome, StreamItem

log = logging.getLogger(__name__)
RENAME_AFTER_S = 3600.0
"""How long the ledger trusts that it recorded a session's id (``ts_subject_sessions``) before it writes it again."""


class LedgerObserver:
    """Writes the run's token usage to the ledger at the end of the run, and the session id beside its key.

    Args:
        engine: The state database.
        pseudonyms: The shared key resolver.
        prices: Keeps ``ts_prices`` pricing the models recorded (the ``session_costs`` view); ``None``
            leaves it alone.
        cache_size: How many sessions' recorded ids it remembers.
    """

    def __init__(self, engine: AsyncEngine, pseudonyms: Pseudonyms, prices: PriceSync | None = None,
                 cache_size: int = 4096) -> None:
        self.engine = engine
        self.pseudonyms = pseudonyms
        self.prices = prices
        self.cache_size = cache_size
        self._named: OrderedDict[str, float] = OrderedDict()  # session key -> when its id was recorded

    async def session_opening(self, user_id: str, session_id: str, opening: str) -> None:
        """As a session opens, before its lease: the user's subject (made now for a new user; shared with the
        other observers of the platform). The session's runs never make it.

        Raises:
            ErasureInProgress: An erasure holds the user. StoreUnavailable.
        """
        await self.pseudonyms.open_session(user_id, opening)

    async def run_started(self, ctx: RunContext) -> None:
        """Nothing before the run: keys are resolved at its end, off the result's path."""

    async def on_item(self, ctx: RunContext, item: StreamItem) -> None:
        """Usage comes from the metered calls, not the stream."""

    async def run_finished(self, ctx: RunContext, outcome: RunOutcome) -> None:
        """One INSERT of the run's rows (per attempt, agent, model and purpose); none for a fenced user.

        Where the run's keys were looked up as it started, the insert is part of the end-of-run fence's
        statement (:meth:`Pseudonyms.record_usage`). Otherwise, with the user's subject remembered, it does
        not wait for a lookup: it checks the subject and the fence itself. When it writes nothing (an erasure
        holds the user, deleted the subject since, or the run is recorded already), the subject is looked
        up, and the rows written with it.
        """
        keys = await self._record(ctx, outcome)
        if outcome.model_calls:  # a session is named where its ledger rows are
            await self._name_session(ctx, keys)
        await self._price(outcome)

    async def _record(self, ctx: RunContext, outcome: RunOutcome) -> RunKeys:
        """The run's rows: in the end-of-run fence's own statement where the run's keys were looked up as it
        started, else with the remembered subject first; the keys they were written with."""
        if self.pseudonyms.looked_up(ctx):
            checked, written = await self.pseudonyms.record_usage(ctx, lambda keys: usage_rows(ctx, outcome, keys))
            if not written:
                await self._insert(ctx, outcome, checked)
            return checked
        keys = self.pseudonyms.remembered(ctx)
        if keys is not None:
            if await self._insert(ctx, outcome, keys):
                return keys
            self.pseudonyms.forget_subject(ctx.user_id)
        keys = await self.pseudonyms.writable(ctx)  # ErasureInProgress: the runtime logs it, nothing written
        await self._insert(ctx, outcome, keys)
        return keys

    async def later_calls(self, ctx: RunContext, later: LaterCalls) -> None:
        """The memory writer's calls, under the run's id with their own agent and purpose (so a session's
        cost includes them, and ``--by purpose`` shows them apart); none for a fenced user."""
        outcome = later.as_outcome()
        await self._insert(ctx, outcome, await self.pseudonyms.after_run(ctx))
        await self._price(outcome)

    async def _insert(self, ctx: RunContext, outcome: RunOutcome, keys: RunKeys) -> bool:
        """Write the run's rows keyed by ``keys``; whether all of them were written (or there were none)."""
        rows = usage_rows(ctx, outcome, keys)
        if not rows:
            return True
        added = await self.pseudonyms.writes.insert_usage(rows, user_id=ctx.user_id, subject_key=keys.subject_key)
        return added == len(rows)

    async def _name_session(self, ctx: RunContext, keys: RunKeys) -> None:
        """Record the session's id beside its key, once per session in this process (and again after
        :data:`RENAME_AFTER_S`, so a retention sweep that removed it while the session lived is undone)."""
        now = time.monotonic()
        named = self._named.get(keys.session_key)
        if named is not None and now - named < RENAME_AFTER_S:
            return
        await self.pseudonyms.writes.name_session(user_id=ctx.user_id, subject_key=keys.subject_key,
                                                  session_key=keys.session_key, session_id=ctx.session_id)
        self._named[keys.session_key] = now
        self._named.move_to_end(keys.session_key)
        while len(self._named) > self.cache_size:
            self._named.popitem(last=False)

    async def _price(self, outcome: RunOutcome) -> None:
        """Keep ``ts_prices`` pricing the models the run recorded (the ``session_costs`` view)."""
        if self.prices is None or not outcome.model_calls:
            return
        try:
            await self.prices.ensure(self.engine, {ledger_name(call.model) for call in outcome.model_calls})
        except (TeamstoreError, SQLAlchemyError) as exc:  # the ledger row is written; prices can wait
            log.warning("could not write the prices of the run's models for the session_costs view: %s "
                        "(the next run tries again; `teamstore prices sync` does it now)",
                        exc.message if isinstance(exc, TeamstoreError) else describe_failure(exc))

    async def drain(self) -> None:
        """At shutdown: close the connections the audit's statements opened."""
        await self.pseudonyms.aclose()
