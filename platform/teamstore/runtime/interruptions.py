"""A session's interrupted run: found when the session opens, set aside when it cannot continue, given up and
recorded when the application abandons it.

    outcome, checkpoint = await judge_at_open(row, outcome, built, store, owner, agentchat_version)
    ...
    await report_abandoned(session, checkpoint, resumed=False)   # its turns to the transcript, calls to the ledger
    await store.delete_session(key, ending=ending(observers, "deleted"))   # likewise, as its row goes

A run that stops mid-run (its worker died, or it raised after a checkpoint) is recorded once, by whoever ends
it: the continuation that completes it records the whole run (its earlier turns replayed from the checkpoint,
every model call the checkpoints carried), and abandoning it, or deleting its session (or the sweep of expired
sessions), records what the checkpoint holds, as a run that failed. An erasure records nothing: it removes the
user's transcripts and de-identifies their ledger rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from autogen_agentchat.messages import MessageFactory
from autogen_agentchat.teams import BaseGroupChat

from config_registry.manifest import NAME_PATTERN, VERSION_LIKE
from config_registry.types import BuiltTeam
from teamstore.errors import RunCannotContinue, RunInterrupted, StateRejected
from teamstore.events import ModelCall, RunContext, RunObserver, RunOutcome, StreamItem, notify_observers
from teamstore.runtime import turns
from teamstore.runtime.checkpoints import Checkpoint, InterruptedRun, judge_checkpoint, set_aside_run
from teamstore.runtime.resume import ResumeOutcome
from teamstore.state.base import Ending, SessionKey, StateStore, StoredSession
from teamstore.state.cancellation import to_the_end

if TYPE_CHECKING:
    from teamstore.runtime.runs import Run, RunHost


async def judge_at_open(
    row: StoredSession, outcome: ResumeOutcome, built: BuiltTeam, store: StateStore, owner: str,
    agentchat_version: str,
) -> tuple[ResumeOutcome, Checkpoint | None]:
    """Judge the checkpoint of the run the session's last worker did not complete.

    Returns:
        ``interrupted`` (with the run) and the checkpoint, when it can be continued; otherwise the state's own
        outcome, its detail saying why the run cannot continue, and ``None``: the checkpoint is set aside in
        the quarantine (the state from before the run stays, and was judged on its own).
    """
    found = judge_checkpoint(row, built, agentchat_version)
    if isinstance(found, Checkpoint):
        return outcome.run_waits(found.run), found
    reason, why = found
    await store.quarantine(row, owner=owner, reason=f"checkpoint {reason}", detail=why, checkpoint_only=True)
    note = f"an interrupted run cannot continue ({reason}: {why}); its checkpoint was set aside"
    detail = f"{outcome.detail}; {note}" if outcome.detail else note
    return replace(outcome, detail=detail, quarantined=True, checkpoint_refused=reason), None


def refuse_to_continue(row: StoredSession, built: BuiltTeam, agentchat_version: str) -> None:
    """Before anything is judged or set aside: a session opened to continue its interrupted run with a team
    whose checkpoint that run's does not fit (a mistyped team, a label moved since) is refused, and the
    checkpoint stays where it is for the team that ran it. A damaged checkpoint fits no team: it is left to
    the opening, which sets it aside.

    Raises:
        RunCannotContinue: The checkpoint was written by another definition, version or library.
    """
    if row.checkpoint is None:
        return
    found = judge_checkpoint(row, built, agentchat_version)
    if isinstance(found, Checkpoint) or found[0] == "corrupt":
        return
    reason, why = found
    raise RunCannotContinue(
        f"the session's interrupted run cannot continue on {built.name}@{built.version[:12]}: {why}; "
        "nothing was set aside",
        hint=f"continue it with the team and version that ran it (--team {_ran_by(row)}), or abandon it"
        if reason == "definition_changed" else
        "continue it on a worker with the autogen-agentchat and teamstore versions that ran it, or abandon it")


def _ran_by(row: StoredSession) -> str:
    """The team and version that ran ``row``'s checkpoint (``NAME@VERSION``), each repeated only when it is one
    the registry could have written (a team's name, a version's hex): what a damaged checkpoint holds there
    instead may be anything, a user's words included."""
    ran = set_aside_run(row)  # it reads: a damaged one was left to the opening
    team = ran.team if ran is not None and NAME_PATTERN.fullmatch(ran.team) else "NAME"
    version = ran.run.team_version[:12] if ran is not None else ""
    return f"{team}@{version if VERSION_LIKE.fullmatch(version) else 'VERSION'}"


def read_back(row: StoredSession | None, built: BuiltTeam) -> Checkpoint:
    """The checkpoint of a run that stopped in this session block, read back from the session's ``row``.

    Raises:
        StateRejected: It does not read as one (it was set aside meanwhile, or damaged).
    """
    if row is None or row.checkpoint is None:
        raise StateRejected("corrupt", "the interrupted run's checkpoint is no longer in the session's row")
    found = judge_checkpoint(row, built, row.agentchat_version)
    if not isinstance(found, Checkpoint):
        raise StateRejected(*found)
    return found


async def set_aside(
    store: StateStore, key: SessionKey, owner: str, checkpoint: Checkpoint, team: str, detail: str,
    observers: Sequence[RunObserver],
) -> None:
    """Quarantine the session's checkpoint, which AutoGen refused to load, and record its run as ended there."""
    row = await store.get(key)
    if row is not None and row.checkpoint is not None:
        run = checkpoint.run
        await store.quarantine(row, owner=owner, reason="checkpoint corrupt",
                               detail=f"run {run.run_id[:12]}: {detail}", checkpoint_only=True)
        ctx = _context(key.user_id, key.session_id, team, run, opening=owner)
        await _record_ended(observers, ctx, [], checkpoint.calls, f"set aside after turn {run.last_turn}", "corrupt",
                            _SET_ASIDE)


def stopped(run: Run) -> InterruptedRun:
    """The run that just stopped mid-run, as the session reports it until it is continued or abandoned."""
    progress = run.progress
    return InterruptedRun(progress.run_id, run.durable_turn, progress.interruptions, progress.started_at,
                          run.ctx.team_version, progress.said_after)


async def report_abandoned(session: RunHost, checkpoint: Checkpoint, *, resumed: bool) -> None:
    """Record an abandoned run as it went: its completed turns to the transcript and the model calls its
    checkpoints carried to the ledger and the spans, as a run that failed (``resumed``: the session resumed
    a stored state)."""
    built, run = session.built, checkpoint.run
    team = built.team
    assert isinstance(team, BaseGroupChat)
    thread = checkpoint.agent_states[_manager(checkpoint, built)]["message_thread"]
    ctx = _context(session.key.user_id, session.key.session_id, built.name, run, resumed=resumed,
                   opening=session.opening)
    await _record_ended(session.observers, ctx, turns.messages(team, thread), checkpoint.calls,
                        f"abandoned after turn {run.last_turn}", None, "the application gave the run up")


async def report_set_aside(observers: Sequence[RunObserver], row: StoredSession, why: str, opening: str) -> None:
    """Record the run whose checkpoint was just set aside unloaded as the session ``opening`` opened, as a run
    that failed: the model calls its checkpoints carried to the ledger and the spans (they were paid), and a
    transcript of no turns (they are read only by the version that ran them; the checkpoint itself is in the
    quarantine). A checkpoint too damaged to say which run it was is not recorded (nothing of it can be)."""
    found = set_aside_run(row)
    if found is not None:
        ctx = _context(row.user_id, row.session_id, found.team, found.run, opening=opening)
        await _record_ended(observers, ctx, [], found.calls, f"set aside after turn {found.run.last_turn}", why,
                            _SET_ASIDE)


_SET_ASIDE = "its checkpoint is in the quarantine; it continues only on the version that ran it"


def ending(observers: Sequence[RunObserver], how: Literal["deleted", "expired", "replaced"]) -> Ending:
    """What a delete (``deleted``), the sweep of expired rows (``expired``) or a restore that replaces what the
    session holds (``replaced``) hands a row holding an interrupted run's checkpoint before the row goes (or
    the checkpoint, to the quarantine): :func:`report_gone` (awaited to its end)."""

    async def end(row: StoredSession) -> None:
        await to_the_end(report_gone(observers, row, how))

    return end


async def report_gone(
    observers: Sequence[RunObserver], row: StoredSession, how: str, opening: str | None = None
) -> None:
    """Record the run whose checkpoint goes with its row (deleted, or expired and swept; ``opening``: found expired
    by that opening of the session) as a run that failed: its completed turns to the transcript and the model
    calls its checkpoints carried to the ledger and the spans, as abandoning it does. Read with no team, its
    messages of AutoGen's own types are kept (a message of a type the application registered with its team reads
    only with that team: it is left out). A checkpoint too damaged to say which run it was is not recorded
    (nothing of it can be)."""
    found = set_aside_run(row)
    if found is not None:
        ctx = _context(row.user_id, row.session_id, found.team, found.run, opening=opening)
        await _record_ended(observers, ctx, _readable(found.thread), found.calls,
                            f"{how} after turn {found.run.last_turn}", None,
                            f"its session was {how} before the run was continued or abandoned")


def _readable(thread: Sequence[Any]) -> list[StreamItem]:
    """The messages of ``thread`` AutoGen's own message types read."""
    factory, items = MessageFactory(), []
    for dump in thread:
        try:
            items.append(factory.create(dump))
        except (ValueError, TypeError, KeyError, AttributeError):  # an application's own type, or damaged
            continue
    return items


def _context(
    user_id: str, session_id: str, team: str, run: InterruptedRun, *, resumed: bool = False,
    opening: str | None = None,
) -> RunContext:
    return RunContext(run_id=run.run_id, user_id=user_id, session_id=session_id, team=team,
                      team_version=run.team_version, started_at=run.started_at, resumed=resumed,
                      interruptions=run.interruptions + 1, opening=opening)


async def _record_ended(
    observers: Sequence[RunObserver], ctx: RunContext, items: Iterable[StreamItem], calls: Sequence[ModelCall],
    ended: str, why: str | None, hint: str,
) -> None:
    """Record, once, a run that stopped mid-run and ends here (abandoned or set aside) as a run that failed:
    ``items`` to the transcript, the paid ``calls`` to the ledger and the spans."""
    await notify_observers(observers, "run_started", ctx)
    for item in items:
        await notify_observers(observers, "on_item", ctx, item)
    error = RunInterrupted(f"{ended}: {why}" if why else ended, hint=hint)
    await notify_observers(observers, "run_finished", ctx, RunOutcome(datetime.now(UTC), error=error,
                                                                     stop_reason=ended, model_calls=list(calls)))


def _manager(checkpoint: Checkpoint, built: BuiltTeam) -> str:
    (name,) = [n for n in checkpoint.agent_states if n not in built.participants]
    return name
