"""A run's checkpoint: what is made durable after each completed turn, judged before it is used, and applied
to a freshly built team so the run goes on where it stopped.

    from teamstore.runtime.checkpoints import Progress, encode_checkpoint, judge_checkpoint, apply_checkpoint

    text = encode_checkpoint(built, progress, await team.save_state(), turn=3, calls=calls)  # after turn 3
    found = judge_checkpoint(row, built, agentchat_version)   # Checkpoint, or (refusal, detail); never raises
    so_far = await apply_checkpoint(built, found)             # the run's messages before the interruption
    text = encode_take_up(built, found)                       # the same, as the attempt taking it up

What a checkpoint holds (docs/checkpoints.md): the state of every participant (persisted or not: the run
goes on with all of them) and of the group chat manager, whose thread is cut to this run's messages (the
task first), so it is bounded by the run; the run's id, when it started, how many times it was continued,
the turn reached, where each turn ended in the thread, and the run's model calls so far, each with the
attempt that made it (``calls``, no content). Its fingerprint is the definition's exact version and its persisted participants: a checkpoint
applies only to the version that wrote it, judged with the same fail-closed rules as a stored state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from autogen_agentchat.teams import BaseGroupChat

from config_registry.types import KIND_NAMES, BuiltTeam
from teamstore.errors import Refusal, StateRejected
from teamstore.events import ModelCall
from teamstore.runtime import turns
from teamstore.runtime.turns import StreamItem
from teamstore.state.base import StoredSession
from teamstore.state.envelope import check_json, decode, encode
from teamstore.state.validate import validate_participant

CHECKPOINT_SCHEMA = 2
"""Version of the checkpoint's layout written now; one written under a layout not in :data:`READ_SCHEMAS` is
refused."""
READ_SCHEMAS = (1, 2)
"""The layouts read: 1 holds no ``said_after`` (written before it was kept), and its run's memory writer is bounded
by the run's start instead (:meth:`teamstore.runtime.memory.MemoryService.said_after`)."""


@dataclass(frozen=True)
class InterruptedRun:
    """A run that did not complete and can be continued from its checkpoint.

    Attributes:
        run_id: The run's id (the one its transcript, ledger rows and spans carry).
        last_turn: The last turn it completed (1 for the first turn after the task).
        interruptions: How many times it was taken up again before (0: it was interrupted once, now).
        started_at: When the run started (on the clock of the worker that started it).
        team_version: The definition version that ran it (and alone can continue it).
        said_after: The database's clock as the session the run started in opened, before anything of the run was
            said: the bound of that session's memory writer, and of the one of a session that continues the run.
            ``None`` when its session read none (its team keeps no memory) or its checkpoint was written before
            the bound was kept (layout 1).
    """

    run_id: str
    last_turn: int
    interruptions: int
    started_at: datetime
    team_version: str
    said_after: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (without ``said_after``, the memory writer's business)."""
        return {"run_id": self.run_id, "last_turn": self.last_turn, "interruptions": self.interruptions,
                "started_at": self.started_at.isoformat(), "team_version": self.team_version}


@dataclass
class Progress:
    """How far a run has come, kept by the session while it runs and written into each checkpoint.

    Attributes:
        run_id: The run.
        started_at: When the run started.
        interruptions: How many times it was continued after an interruption.
        offset: Where this run's messages start in the manager's thread (earlier runs of the same session
            block come before them).
        turn_ends: Where the task ends in this run's thread, then where each completed turn ends.
        carried: Model calls paid before the run was last continued (from its checkpoint).
        said_after: The memory writer's bound of the session the run started in (:attr:`InterruptedRun.said_after`),
            kept in each checkpoint so that a continuation in a later session is bounded by it.
    """

    run_id: str
    started_at: datetime
    interruptions: int = 0
    offset: int = 0
    turn_ends: list[int] = field(default_factory=list)
    carried: list[ModelCall] = field(default_factory=list)
    said_after: datetime | None = None


@dataclass
class Checkpoint:
    """A judged checkpoint: the run it interrupted and what continuing it needs."""

    run: InterruptedRun
    agent_states: dict[str, Any] = field(repr=False)  # the run's messages: never in a repr (a log line)
    turn_ends: list[int]
    calls: list[ModelCall]

    @property
    def progress(self) -> Progress:
        """The run's progress as the continuation takes it up."""
        return Progress(self.run.run_id, self.run.started_at, self.run.interruptions + 1, 0, list(self.turn_ends),
                        list(self.calls), said_after=self.run.said_after)


def _call_record(call: ModelCall) -> dict[str, Any]:
    return {**asdict(call), "started_at": call.started_at.isoformat()}


def encode_checkpoint(
    built: BuiltTeam, progress: Progress, team_state: Mapping[str, Any], turn: int, calls: Sequence[ModelCall]
) -> str:
    """The checkpoint after ``turn``, as stored (the versioned envelope).

    Args:
        built: The team that runs.
        progress: The run's progress (``turn_ends`` already holds ``turn``'s end).
        team_state: ``team.save_state()`` taken between two turns.
        turn: The turn just completed.
        calls: The model calls this process made in the run so far (``progress.carried`` come first).

    Raises:
        StateNotSerializable: A participant's state holds a value that is not JSON (names it and the path).
    """
    agent_states = dict(team_state["agent_states"])
    manager = _manager_name(agent_states, built)
    manager_state = dict(agent_states[manager])
    manager_state["message_thread"] = list(manager_state.get("message_thread", []))[progress.offset:]
    agent_states[manager] = manager_state
    payload = {
        "kind": "checkpoint", "schema": CHECKPOINT_SCHEMA, "run_id": progress.run_id,
        "started_at": progress.started_at.isoformat(), "interruptions": progress.interruptions, "turn": turn,
        "said_after": progress.said_after.isoformat() if progress.said_after is not None else None,
        "team": built.name, "team_version": built.version, "fingerprints": dict(built.fingerprints),
        "agent_states": agent_states, "turn_ends": list(progress.turn_ends),
        "calls": [_call_record(c) for c in (*progress.carried, *calls)],
    }
    check_json(payload, "checkpoint", {*payload, *built.participants, manager})  # words of the code and definition
    return encode(payload)


def encode_take_up(built: BuiltTeam, checkpoint: Checkpoint) -> str:
    """``checkpoint`` as the attempt taking it up writes it back before it makes any model call: the same run,
    turn, states and calls, with one more take-up counted. A worker that dies in this attempt, even after it
    recorded the run, leaves a checkpoint whose next take-up is an attempt of its own (docs/checkpoints.md,
    "The audit side")."""
    return encode_checkpoint(built, checkpoint.progress, {"agent_states": checkpoint.agent_states},
                             checkpoint.run.last_turn, [])


def _manager_name(agent_states: Mapping[str, Any], built: BuiltTeam) -> str:
    """The group chat manager's entry of a team state: the one that is no participant's."""
    others = [name for name in agent_states if name not in built.participants]
    if len(others) != 1:
        raise StateRejected("corrupt", f"the checkpoint's team state names {sorted(others)} beside the participants")
    return others[0]


def _field(payload: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = payload.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise StateRejected("corrupt", f"the checkpoint's {name} is missing or not a {getattr(kind, '__name__', kind)}")
    return value


def _payload(row: StoredSession) -> Mapping[str, Any]:
    """The stored checkpoint's payload, checked to be whole (text, of its byte count, in the envelope)."""
    text = row.checkpoint
    if row.checkpoint_unreadable is not None:
        raise StateRejected("corrupt", f"the stored checkpoint does not open: {row.checkpoint_unreadable}")
    if not isinstance(text, str):
        raise StateRejected("corrupt", f"the checkpoint holds a {type(text).__name__}, not text")
    if row.checkpoint_bytes != len(text.encode("utf-8", "surrogatepass")):
        raise StateRejected("corrupt", f"checkpoint_bytes {row.checkpoint_bytes} is not the checkpoint's size")
    payload = decode(text)
    if payload.get("kind") != "checkpoint":
        raise StateRejected("corrupt", "the stored checkpoint is not a run's checkpoint")
    if payload.get("schema") not in READ_SCHEMAS:
        # A layout is a number: anything else the stored payload holds there is not quoted (it is damaged).
        schema = payload.get("schema")
        layout = (f"layout {schema}" if type(schema) is int else "no layout" if schema is None
                  else "a layout that is no number")
        raise StateRejected("schema_mismatch", f"checkpoint written under {layout}, this code reads "
                                               f"{', '.join(map(str, READ_SCHEMAS))}")
    return payload


def _fits(payload: Mapping[str, Any], built: BuiltTeam, agentchat_version: str, row: StoredSession) -> None:
    """Refuse a checkpoint written by another definition than ``built`` (its exact version) or library."""
    if _minor(row.agentchat_version) != _minor(agentchat_version):
        raise StateRejected("library_mismatch",
                            f"written by autogen-agentchat {row.agentchat_version}, running {agentchat_version}")
    version = _field(payload, "team_version", str)
    if _field(payload, "team", str) != built.name or version != built.version:
        raise StateRejected("definition_changed",
                            f"written by another team or another version of it; the team is now version "
                            f"{built.version[:12]}, and a run continues only on the version that ran it")
    if payload.get("fingerprints") != dict(built.fingerprints):
        raise StateRejected("definition_changed", "the checkpoint's persisted participants are not the team's")


def _minor(version: str) -> str:
    return ".".join(str(version).split(".")[:2])


def _turns(payload: Mapping[str, Any], thread: int) -> tuple[int, list[int]]:
    turn, ends = _field(payload, "turn", int), _field(payload, "turn_ends", list)
    whole = all(type(e) is int for e in ends) and ends == sorted(ends) and len(ends) == turn + 1
    if turn < 1 or not whole or not ends or ends[-1] != thread:
        raise StateRejected("corrupt", f"the checkpoint's turn {turn} and turn ends {ends!r:.60} do not fit "
                                       f"its thread of {thread} messages")
    return turn, ends


def _calls(payload: Mapping[str, Any]) -> list[ModelCall]:
    try:
        return [ModelCall(**{**c, "started_at": datetime.fromisoformat(c["started_at"])})
                for c in _field(payload, "calls", list)]
    except (TypeError, KeyError, ValueError) as exc:
        raise StateRejected("corrupt", f"the checkpoint's model calls do not read ({type(exc).__name__})") from None


def _states(payload: Mapping[str, Any], built: BuiltTeam) -> tuple[dict[str, Any], int]:
    """Every participant's state, validated against AutoGen's typed state models, and the manager's thread."""
    states = dict(_field(payload, "agent_states", dict))
    missing = sorted(set(built.participants) - set(states))
    if missing:
        raise StateRejected("corrupt", f"the checkpoint has no state for {missing}")
    for name in built.participants:
        validate_participant(name, built.agent_types[name], built.kind, states[name])
    manager = states[_manager_name(states, built)]
    thread = manager.get("message_thread") if isinstance(manager, dict) else None
    if not isinstance(thread, list):
        raise StateRejected("corrupt", "the checkpoint's manager state has no message thread")
    return states, len(thread)


def _checkpoint(row: StoredSession, built: BuiltTeam, agentchat_version: str) -> Checkpoint:
    if built.kind != "team":
        raise StateRejected("definition_changed", f"the definition is now {KIND_NAMES[built.kind]}, whose runs "
                                                  "have no turns to continue from")
    payload = _payload(row)
    _fits(payload, built, agentchat_version, row)
    states, thread = _states(payload, built)
    turn, ends = _turns(payload, thread)
    return Checkpoint(_run(payload, turn), states, ends, _calls(payload))  # its version is built's (_fits)


def _run(payload: Mapping[str, Any], turn: int) -> InterruptedRun:
    """The run the checkpoint ``payload`` stopped after ``turn``."""
    return InterruptedRun(_field(payload, "run_id", str), turn, _field(payload, "interruptions", int),
                          _time(payload, "started_at"), _field(payload, "team_version", str), _said_after(payload))


def _time(payload: Mapping[str, Any], name: str, *, aware: bool = False) -> datetime:
    """The time the checkpoint's field ``name`` holds (ISO 8601); with ``aware``, one with its offset."""
    try:
        found = datetime.fromisoformat(_field(payload, name, str))
    except ValueError:
        raise StateRejected("corrupt", f"the checkpoint's {name} is not a time") from None
    if aware and found.tzinfo is None:  # compared with the database's clock, which has one
        raise StateRejected("corrupt", f"the checkpoint's {name} has no time zone")
    return found


def _said_after(payload: Mapping[str, Any]) -> datetime | None:
    """The memory writer's bound the checkpoint keeps: none in layout 1 (written before it was kept), and ``null``
    in a later one whose session read none."""
    if payload.get("schema") == 1 or payload.get("said_after", False) is None:
        return None
    return _time(payload, "said_after", aware=True)


@dataclass(frozen=True)
class SetAsideRun:
    """What a checkpoint set aside without being loaded still says of its run, read with no team.

    Attributes:
        thread: The run's messages so far (the task, then its completed turns) as AutoGen dumped them in the
            manager's thread; empty when no one state of the checkpoint holds a thread.
    """

    run: InterruptedRun
    team: str
    calls: list[ModelCall]
    thread: list[Any] = field(default_factory=list)


def set_aside_run(row: StoredSession) -> SetAsideRun | None:
    """The run ``row``'s checkpoint stopped (its id, team, version, start, turns, the model calls its
    checkpoints carried, and its thread), read without judging it against a team; ``None`` for one that does
    not read that far (damaged, or of a layout this code does not read)."""
    try:
        payload = _payload(row)
        return SetAsideRun(_run(payload, _field(payload, "turn", int)), _field(payload, "team", str),
                           _calls(payload), _thread(payload))
    except StateRejected:
        return None


def _thread(payload: Mapping[str, Any]) -> list[Any]:
    """The manager's thread, told from the participants' states with no team: the one state holding one."""
    states = payload.get("agent_states")
    threads = [state["message_thread"] for state in states.values()
               if isinstance(state, dict) and isinstance(state.get("message_thread"), list)
               ] if isinstance(states, dict) else []
    return list(threads[0]) if len(threads) == 1 else []


def judge_checkpoint(
    row: StoredSession, built: BuiltTeam, agentchat_version: str
) -> Checkpoint | tuple[Refusal, str]:
    """Judge the checkpoint ``row`` holds against the team built for it. Never raises on bad stored data.

    Returns:
        The checkpoint, or why it cannot be used (the caller sets it aside; the state from before the run is
        judged on its own).
    """
    try:
        return _checkpoint(row, built, agentchat_version)
    except StateRejected as exc:
        return exc.reason, exc.detail


async def apply_checkpoint(built: BuiltTeam, checkpoint: Checkpoint) -> list[StreamItem]:
    """Load every participant's and the manager's state into ``built``'s team and bring its termination
    condition to where the run left it; returns the run's messages so far (the task first).

    The condition's state is not part of AutoGen's team state: it is rebuilt by showing it the task and each
    completed turn again, as the manager showed them (a condition that would have stopped the run on them
    means the checkpoint does not belong to this run).

    Raises:
        StateRejected: The checkpoint does not fit the team after all (``corrupt``); the team may be half
            loaded and must be built again.
        Exception: AutoGen's own ``load_state`` refused a state (the caller treats it as ``corrupt`` too).
    """
    team = built.team
    assert isinstance(team, BaseGroupChat)
    await team.load_state({"agent_states": checkpoint.agent_states})
    manager = checkpoint.agent_states[_manager_name(checkpoint.agent_states, built)]
    so_far = turns.messages(team, manager["message_thread"])
    condition = turns.termination_condition(team)
    if condition is not None:
        start = 0
        for end in checkpoint.turn_ends:
            if await condition(so_far[start:end]) is not None:
                raise StateRejected("corrupt", "the run's termination condition stops it at a turn the "
                                               "checkpoint records as completed")
            start = end
    return so_far
