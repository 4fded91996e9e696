"""Decide whether a stored session may be resumed, and move state in and out of a built team.

    from teamstore.runtime.resume import apply_states, capture_states, judge, snapshot

    verdict = judge(row, built, now, agentchat_version)   # a Verdict; never raises on bad stored data
    if verdict.outcome.applied:
        await apply_states(built, verdict.states)
    ...
    states = await capture_states(built, message_buffer_cap=20)
    taken = await snapshot(built, max_bytes=262_144)   # (text, states): encoded, checked against the cap; or None

Nothing is loaded until every persisted participant's state has passed validation: a session is
resumed whole or started fresh, never half-loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from autogen_core import AgentId

from config_registry.types import KIND_NAMES, BuiltTeam
from teamstore.errors import Refusal, StateRejected, StateTooLarge
from teamstore.runtime.checkpoints import InterruptedRun
from teamstore.state.base import StoredSession
from teamstore.state.envelope import check_json, decode, encode
from teamstore.state.validate import validate_participant

SCHEMA_VERSION = 1
"""Version of teamstore's own state layout; a row saved under another one is refused."""

Outcome = Literal["resumed", "new", "expired", "interrupted"] | Refusal
"""What happened to a session's stored state when it was opened (:class:`ResumeOutcome`)."""


@dataclass(frozen=True)
class ResumeOutcome:
    """What happened to a session's stored state when it was opened.

    ``outcome`` is one of ``resumed``, ``new``, ``expired``, ``interrupted`` (the session's last run did not
    complete and can be continued from its checkpoint: ``interrupted`` names it; the state from before that
    run is loaded, as ``restored`` says), ``schema_mismatch``, ``library_mismatch``, ``definition_changed``,
    ``too_large`` (saved under a higher byte cap than today's: it could never be saved again) and ``corrupt``
    (:data:`Outcome`); ``detail`` says which participant and how. ``checkpoint_refused`` says why an
    interrupted run's checkpoint was set aside (quarantined) when the state itself could still be judged.

    A session's outcome follows its interrupted run: it is ``interrupted`` while the run waits for a decision
    (:meth:`run_waits`); once the run is continued, abandoned or set aside in that session, it is the state's
    own again (:meth:`run_ended`); once a continuation stops mid-run again, it is ``interrupted`` again
    (:meth:`run_stopped`). ``detail`` is built from what the outcome keeps of the run, never read back.
    """

    outcome: Outcome
    team_version: str
    detail: str | None = None
    restored: tuple[str, ...] = ()
    previous_team_version: str | None = None
    quarantined: bool = False
    interrupted: InterruptedRun | None = None
    checkpoint_refused: Refusal | None = None
    notes: str | None = field(default=None, compare=False, repr=False)
    """The state's own notes: ``detail`` before what it says of a run (the one ``interrupted`` or ``ended``
    names); unset while it says nothing of one, when ``detail`` is all the state's own."""
    ended: tuple[InterruptedRun, str] | None = field(default=None, compare=False, repr=False)
    """The run :meth:`run_ended` last said no longer waits, and what became of it (``continued``, ...)."""

    @property
    def applied(self) -> bool:
        """True when prior state was loaded into the team."""
        return self.outcome == "resumed" or (self.outcome == "interrupted" and bool(self.restored))

    def __str__(self) -> str:
        return f"{self.outcome}: {self.detail}" if self.detail else self.outcome

    @property
    def _own_notes(self) -> str | None:
        return self.detail if self.interrupted is None and self.ended is None else self.notes

    def run_waits(self, run: InterruptedRun) -> ResumeOutcome:
        """This outcome with ``run`` stopped mid-run and waiting for a decision: ``interrupted``, naming it, the
        detail asking for the decision after the state's own notes."""
        notes = self._own_notes
        return replace(self, outcome="interrupted", interrupted=run, notes=notes, ended=None,
                       detail=_joined(notes, _waiting_note(run)))

    def run_ended(self, how: str, *, refused: Refusal | None = None) -> ResumeOutcome:
        """This outcome once the interrupted run it names no longer waits for a decision: the state's own
        (``resumed`` when the state from before the run was loaded, else ``new``), the detail saying what
        became of the run instead of asking for a decision.

        Args:
            how: What became of it: ``continued``, ``abandoned``, ``set aside``.
            refused: Why its checkpoint was set aside (quarantined), if it was.
        """
        run = self.interrupted
        if run is None:
            return self
        notes = self._own_notes
        return replace(self, outcome="resumed" if self.restored else "new", interrupted=None, notes=notes,
                       ended=(run, how), detail=_joined(notes, _ended_note(run, how)),
                       quarantined=self.quarantined or refused is not None,
                       checkpoint_refused=refused or self.checkpoint_refused)

    def run_stopped(self, run: InterruptedRun) -> ResumeOutcome:
        """This outcome once the run it says was continued (:meth:`run_ended`) stops mid-run again:
        ``interrupted`` again, naming ``run`` where it stopped now and waiting for a decision. Another run
        leaves it as it is: the outcome never named it."""
        if self.ended is None or self.ended[0].run_id != run.run_id:
            return self
        return self.run_waits(run)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "outcome": self.outcome,
            "applied": self.applied,
            "detail": self.detail,
            "restored": list(self.restored),
            "team_version": self.team_version,
            "previous_team_version": self.previous_team_version,
            "quarantined": self.quarantined,
            "interrupted": self.interrupted.as_dict() if self.interrupted else None,
            "checkpoint_refused": self.checkpoint_refused,
        }


def _waiting_note(run: InterruptedRun) -> str:
    """What an ``interrupted`` outcome's detail says of its run, after the state's own notes."""
    return f"run {run.run_id[:12]} stopped after turn {run.last_turn}; continue or abandon it"


def _ended_note(run: InterruptedRun, how: str) -> str:
    return f"run {run.run_id[:12]}, interrupted after turn {run.last_turn}, was {how}"


def _joined(notes: str | None, note: str) -> str:
    return f"{notes}; {note}" if notes else note


@dataclass
class Verdict:
    """A judged row: the outcome and, when it may resume, the validated states."""

    outcome: ResumeOutcome
    states: dict[str, Any] = field(default_factory=dict, repr=False)  # the conversation: never in a repr


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _fingerprint_change(stored: Mapping[str, str], built: BuiltTeam) -> str | None:
    """Why the stored participants cannot be loaded into ``built``, or ``None``.

    A participant the definition newly persists starts fresh, and one it no longer persists (but still
    has) starts clean, as every participant that is not persisted does; neither stops the others from
    loading. A persisted participant renamed, removed, retyped or rebounded does.
    """
    changes = []
    for name in sorted(stored):
        if name not in built.fingerprints:
            if name not in built.participants:
                changes.append(f"persisted participant '{name}' was renamed or removed")
        elif stored[name] != built.fingerprints[name]:
            changes.append(f"participant '{name}' changed type or context bound")
    return "; ".join(changes) or None


def _membership_notes(stored: Mapping[str, str], built: BuiltTeam) -> str | None:
    notes = [f"'{n}' is newly persisted and starts fresh" for n in sorted(set(built.fingerprints) - set(stored))]
    notes += [f"'{n}' is no longer persisted: its saved state is dropped" for n in sorted(set(stored) - set(built.fingerprints))]
    return "; ".join(notes) or None


def _refusal(
    row: StoredSession, built: BuiltTeam, agentchat_version: str, max_bytes: int | None
) -> tuple[Refusal, str] | None:
    if row.fingerprints is None:
        return "corrupt", "the row's participant fingerprints are not a name -> fingerprint object"
    if row.schema_version != SCHEMA_VERSION:
        return "schema_mismatch", f"saved under state schema {row.schema_version}, this code reads {SCHEMA_VERSION}"
    if _minor(row.agentchat_version) != _minor(agentchat_version):
        return "library_mismatch", f"saved by autogen-agentchat {row.agentchat_version}, running {agentchat_version}"
    if row.team != built.name:
        return "definition_changed", f"saved by team '{row.team}', opened with '{built.name}'"
    change = _fingerprint_change(row.fingerprints, built)
    if change:
        return "definition_changed", change
    if max_bytes is not None and row.state_bytes > max_bytes:
        # Resumed, every save of this session would be refused (StateTooLarge) and it would never move on.
        return "too_large", f"the state is {row.state_bytes:,} bytes opened, over today's cap of {max_bytes:,}"
    return None


def _parse_states(row: StoredSession, built: BuiltTeam) -> dict[str, Any]:
    """The stored states of the participants ``built`` persists, each validated; the row must hold
    exactly the participants its fingerprints name."""
    assert row.state is not None and row.fingerprints is not None  # _refusal passed the row
    data = decode(row.state)
    participants, kind = data.get("participants"), data.get("kind")
    if kind in ("team", "agent") and kind != built.kind:
        raise StateRejected("definition_changed",
                            f"saved as {KIND_NAMES[kind]}'s state; the definition is now {KIND_NAMES[built.kind]}")
    if kind != built.kind or not isinstance(participants, dict):
        raise StateRejected("corrupt", f"stored payload is not a '{built.kind}' state")
    if set(participants) != set(row.fingerprints):
        raise StateRejected("corrupt", f"stored participants {sorted(participants)} != {sorted(row.fingerprints)}")
    loaded = {name: state for name, state in participants.items() if name in built.fingerprints}
    for name, state in loaded.items():
        validate_participant(name, built.agent_types[name], built.kind, state)
    return loaded


def judge(
    row: StoredSession, built: BuiltTeam, now: datetime, agentchat_version: str, max_bytes: int | None = None
) -> Verdict:
    """Judge a stored row against the team built for it. Never raises on bad stored data.

    Args:
        row: The session row just read.
        built: The freshly built team.
        now: The time to judge the row's expiry against: when it was read, on the clock its expiry was written
            on (:attr:`teamstore.state.base.StoredSession.read_at`).
        agentchat_version: The running autogen-agentchat version.
        max_bytes: The state byte cap in force (``state_max_bytes``); a bigger stored state is refused.

    Returns:
        The verdict; ``outcome.quarantined`` tells the caller to set the row aside.
    """
    version = built.version
    previous = row.team_version
    if row.defects:
        # First, expired or not, with a state or without: no save could follow the row as it is, and the
        # quarantine writes its stand-ins back, so the fresh run's save finds it whole.
        return Verdict(ResumeOutcome("corrupt", version, "; ".join(row.defects), (), previous, quarantined=True))
    expired = row.expires_at.isoformat() if row.expires_at is not None and row.expires_at <= now else None
    if row.is_new and not (expired and row.checkpoint is not None):  # a first run's checkpoint expires too
        return Verdict(ResumeOutcome("new", version))
    if expired:
        return Verdict(ResumeOutcome("expired", version, f"expired at {expired}", (), previous))
    refusal = _refusal(row, built, agentchat_version, max_bytes)
    if refusal is None:
        try:
            states = _parse_states(row, built)
        except StateRejected as exc:
            refusal = (exc.reason, exc.detail)
        else:
            notes = _membership_notes(row.fingerprints or {}, built)
            return Verdict(ResumeOutcome("resumed", version, notes, tuple(sorted(states)), previous), states)
    reason, detail = refusal
    return Verdict(ResumeOutcome(reason, version, detail, (), previous, quarantined=True))


_GROUP_CHAT_INTERNALS = ("_participant_names", "_participant_topic_types", "_team_id", "_runtime", "_initialized",
                         "_init")


def _containers(team: Any) -> dict[str, AgentId] | None:
    """Each participant's container agent in the team's runtime, where AutoGen 0.7's group chats keep
    them (``BaseGroupChat.save_state`` and ``load_state`` go through these); ``None`` for a team that
    does not keep them there."""
    if not all(hasattr(team, name) for name in _GROUP_CHAT_INTERNALS):
        return None
    names, kinds = team._participant_names, team._participant_topic_types
    return {name: AgentId(type=kind, key=team._team_id) for name, kind in zip(names, kinds, strict=True)}


async def apply_states(built: BuiltTeam, states: Mapping[str, Any]) -> None:
    """Load validated states into the persisted participants; the others start clean.

    For a team, only the persisted participants' containers are loaded, as AutoGen's ``load_state``
    loads each one, and the group chat manager keeps its fresh state, so it starts a new turn order (see
    docs/architecture.md). (AutoGen's own ``load_state`` takes the whole team's state: saving the fresh
    team's to fill in the rest cost more than the load.)
    """
    team = built.team
    if built.kind == "agent":
        (name,) = built.persisted
        await team.load_state(states[name])
        return
    containers = _containers(team)
    if containers is None:
        fresh = dict(await team.save_state())
        fresh["agent_states"] = {**fresh["agent_states"], **states}
        await team.load_state(fresh)
        return
    await ready_team(built)
    for name, state in states.items():
        await team._runtime.agent_load_state(containers[name], state)  # type: ignore[union-attr]


async def ready_team(built: BuiltTeam) -> None:
    """Register a team's participants and manager with its runtime, as AutoGen does at the team's first load or
    run (a third of a millisecond of CPU for the example triage team): a session does it while its lease+load is
    on its way. An agent, or a team already registered, has nothing to do."""
    team = built.team
    if built.kind != "agent" and not getattr(team, "_initialized", True):
        await team._init(team._runtime)  # type: ignore[union-attr]


def _cap_buffer(state: Mapping[str, Any], cap: int) -> dict[str, Any]:
    capped = dict(state)
    buffer = capped.get("message_buffer")
    if isinstance(buffer, list) and len(buffer) > cap:
        capped["message_buffer"] = buffer[-cap:]
    return capped


async def capture_states(built: BuiltTeam, message_buffer_cap: int) -> dict[str, Any]:
    """Take the persisted participants' states after a run, checked to be plain JSON.

    Args:
        built: The team that just ran.
        message_buffer_cap: Most undelivered messages kept per participant (AutoGen's container buffer
            grows while a participant does not speak, so it is bounded like the context).

    Raises:
        StateNotSerializable: A value is not JSON; the message names the agent and the path.
    """
    if built.kind == "agent":
        (name,) = built.persisted
        states: dict[str, Any] = {name: dict(await built.team.save_state())}
    else:
        team_state = await built.team.save_state()
        agent_states = team_state["agent_states"]
        states = {n: _cap_buffer(agent_states[n], message_buffer_cap) for n in built.persisted}
    for name, state in states.items():
        check_json(state, name, built.participants)
    return states


async def snapshot(built: BuiltTeam, max_bytes: int) -> tuple[str, dict[str, Any]] | None:
    """The persisted participants' states after a run, encoded as saved, and as taken; ``None`` when the
    definition persists nobody.

    Raises:
        StateNotSerializable: A value is not JSON (names the agent and the path).
        StateTooLarge: The encoded state is over ``max_bytes``.
    """
    if not built.persisted:
        return None
    states = await capture_states(built, message_buffer_cap=built.manifest.context_bound or 50)
    text = encode({"kind": built.kind, "participants": states})
    size = len(text.encode())
    if size > max_bytes:
        raise StateTooLarge(
            f"persisted state is {size} bytes, over the cap of {max_bytes}; the previous state is kept",
            hint="lower the bounding context's max_messages, or raise TEAMSTORE_STATE_MAX_BYTES",
        )
    return text, states
