"""What a session finds when it opens: the stored state judged and loaded, and an interrupted run's checkpoint
judged, each refusal set aside in the quarantine.

    opened = await open_row(row, built, deps, owner)
    opened.verdict.outcome      # ResumeOutcome: "resumed", "new", "interrupted", "definition_changed", ...
    opened.built                # the team to use (built again if AutoGen refused a state teamstore passed)
    opened.checkpoint           # the interrupted run's checkpoint, when it can be continued
"""

from __future__ import annotations

from dataclasses import dataclass

from config_registry.types import BuiltTeam
from teamstore.db.clock import now_utc
from teamstore.runtime import interruptions
from teamstore.runtime.checkpoints import Checkpoint
from teamstore.runtime.deps import AGENTCHAT_VERSION, SessionDeps
from teamstore.runtime.resume import ResumeOutcome, Verdict, apply_states, judge
from teamstore.state.base import StoredSession
from teamstore.state.cancellation import to_the_end


@dataclass(frozen=True)
class Opened:
    """A session's row as judged: the verdict, the team to use, and a checkpoint that can be continued."""

    verdict: Verdict
    built: BuiltTeam
    checkpoint: Checkpoint | None = None
    state_set_aside: bool = False
    """The row's state went to the quarantine (with its checkpoint): the row holds neither now."""


async def open_row(row: StoredSession, built: BuiltTeam, deps: SessionDeps, owner: str) -> Opened:
    """Judge ``row`` against ``built`` and load what passes; never half-loaded.

    Raises:
        StoreUnavailable: A refusal could not be set aside (the session does not open).
    """
    # Judged on the clock the row's expiry was written on (the database server's on Postgres), not this host's.
    verdict = judge(row, built, row.read_at or now_utc(), AGENTCHAT_VERSION, deps.limits.state_max_bytes)
    if verdict.outcome.quarantined:
        assert verdict.outcome.detail is not None
        await to_the_end(_set_aside(row, deps, owner, verdict.outcome.outcome, verdict.outcome.detail))
    if verdict.outcome.applied:
        try:
            await apply_states(built, verdict.states)
        except Exception as exc:
            # Validation passed but AutoGen's load_state raised (a shape teamstore does not check, such as
            # a nested team's state): the state is refused like any other, and the team, maybe half-loaded,
            # is built again from the same version. Only the type is kept: the message may quote content.
            detail = f"AutoGen could not load the stored state ({type(exc).__name__})"
            await to_the_end(_set_aside(row, deps, owner, "corrupt", detail))
            fresh = await deps.build_team(f"{built.name}@{built.version}")
            return Opened(Verdict(ResumeOutcome("corrupt", built.version, detail, (), row.team_version,
                                                quarantined=True)), fresh, state_set_aside=True)
    if row.checkpoint is None or verdict.outcome.quarantined or verdict.outcome.outcome == "expired":
        # none; set aside with the refused row; or as stale as its state
        return Opened(verdict, built, state_set_aside=verdict.outcome.quarantined)
    judged: list[tuple[ResumeOutcome, Checkpoint | None]] = []
    await to_the_end(_judge_checkpoint(row, verdict.outcome, built, deps, owner, judged))
    ((outcome, checkpoint),) = judged
    return Opened(Verdict(outcome, verdict.states), built, checkpoint)


# Each of these is awaited to its end by a session cancelled as it opens (a request timeout): a checkpoint set
# aside without its run recorded would leave the run's paid calls on no record.


async def _set_aside(row: StoredSession, deps: SessionDeps, owner: str, reason: str, detail: str) -> None:
    """Quarantine the refused row and record the interrupted run whose checkpoint goes with it, if any."""
    await deps.store.quarantine(row, owner=owner, reason=reason, detail=detail)
    deps.metrics.quarantined(reason)
    if row.checkpoint is not None:  # an interrupted run's, set aside with the row: it ends here
        await interruptions.report_set_aside(deps.observers, row, reason, owner)


async def _judge_checkpoint(
    row: StoredSession, outcome: ResumeOutcome, built: BuiltTeam, deps: SessionDeps, owner: str,
    judged: list[tuple[ResumeOutcome, Checkpoint | None]],
) -> None:
    """Judge the interrupted run's checkpoint into ``judged``; one refused is set aside and its run recorded."""
    found, checkpoint = await interruptions.judge_at_open(row, outcome, built, deps.store, owner, AGENTCHAT_VERSION)
    if found.checkpoint_refused is not None:
        deps.metrics.quarantined(f"checkpoint {found.checkpoint_refused}")
        await interruptions.report_set_aside(deps.observers, row, found.checkpoint_refused, owner)
    judged.append((found, checkpoint))
