"""The turns of a team's run: the point between two turns where a checkpoint is written, and the key a tool
reads to refuse a duplicate of its work.

    from teamstore.runtime.turns import current_turn

    async def open_ticket(summary: str) -> str:          # a tool of a team run through a Session
        turn = current_turn()                            # TurnKey(run_id="9f2c..", turn=3), None outside a run
        key = turn.key("open_ticket") if turn else None  # "9f2c..:3:open_ticket", the same if the turn repeats
        return await tickets.create(summary, idempotency_key=key)

A turn is one step of AutoGen's group chat: the manager picks the next speaker(s), they answer, the manager
takes the answer in and checks the termination condition. :func:`current_turn` names the turn in flight by
the run's id and its number (1 for the first turn after the task); a run continued after its worker died
keeps its id, and the turn that was in flight gets the same number again. The key is read from a context
variable that the run's AutoGen runtime inherits, so it is there in async tools and what they call; a sync
``FunctionTool`` runs in a thread pool that does not carry it (there it is ``None``): write such a tool
``async``.

Where AutoGen lets code in between two turns: nowhere public. Its ``BaseGroupChatManager`` moves to the next
speakers through one method, ``_transition_to_next_speakers``, called once the last turn's answer is in the
manager's thread and the termination condition has let the run go on, before the next speaker is picked.
:func:`install` wraps that method (once per process, checked like the span seams of
:mod:`teamstore.runtime.autogen_spans`); the wrapper does nothing unless the run's :class:`TurnTracker` is
current and the manager is its team's own (a nested team's manager is not). The few other private names read
here (a team's id, its termination condition and message factory, the manager's thread) are read nowhere else.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from autogen_agentchat.base import TerminationCondition
from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage
from autogen_agentchat.teams import BaseGroupChat
from autogen_agentchat.teams._group_chat._base_group_chat_manager import BaseGroupChatManager

from teamstore.errors import ConfigurationError

StreamItem = BaseAgentEvent | BaseChatMessage
_SEAM = "_transition_to_next_speakers"


@dataclass(frozen=True)
class TurnKey:
    """The turn in flight: the run's id and the turn's number (1 for the first turn after the task)."""

    run_id: str
    turn: int

    def key(self, *parts: str) -> str:
        """An idempotency key for work done in this turn: ``run_id:turn``, then ``parts`` (say, the tool's
        name and what makes two calls of it in one turn different), joined by ``:``. A turn that repeats
        after its worker died gets the same key."""
        return ":".join((self.run_id, str(self.turn), *parts))


Boundary = Callable[[int, int, bool], Awaitable[None]]
"""Called between two turns with (turns completed, length of the manager's thread, whether this is the run's
first boundary: the start of the run, or of its continuation, when no turn was completed in it yet)."""


@dataclass
class TurnTracker:
    """The turns of one run of one team, told to ``on_boundary`` as they complete.

    Args:
        run_id: The run.
        team: The team that runs (only its own manager is followed).
        completed: Turns completed before this process took the run up (a continued run's checkpoint).
        on_boundary: What to do between two turns (write the checkpoint); awaited before the next speaker is
            picked, so the next turn starts only once it returned. What it raises stops the run, and is kept
            in ``failure`` so the session can raise it as it is (AutoGen reports it as a ``RuntimeError``).
    """

    run_id: str
    team: BaseGroupChat
    completed: int
    on_boundary: Boundary
    current: TurnKey | None = None
    failure: BaseException | None = None
    _started: bool = field(default=False, repr=False)

    def follows(self, manager: BaseGroupChatManager) -> bool:
        """Whether ``manager`` is this team's own (its agent key is the team's id)."""
        return manager.id.key == team_id(self.team)

    async def between_turns(self, manager: BaseGroupChatManager) -> None:
        """The manager is about to pick the next speakers: count the turn just completed, let the session
        make it durable, and name the next one."""
        first, self._started = not self._started, True
        if not first:
            self.completed += 1
        # AutoGen keeps no public count of the manager's thread; its length is where this run's turns end.
        thread: Sequence[Any] = manager._message_thread
        try:
            await self.on_boundary(self.completed, len(thread), first)
        except BaseException as exc:
            self.failure = exc
            raise
        self.current = TurnKey(self.run_id, self.completed + 1)


_tracker: ContextVar[TurnTracker | None] = ContextVar("teamstore_turns", default=None)
_installed = False
_install_lock = threading.Lock()


def current_turn() -> TurnKey | None:
    """The turn in flight of the run this code is part of (a tool of a team run through a Session), or
    ``None``: outside such a run, before its first turn, or in a sync tool's thread."""
    tracker = _tracker.get()
    return tracker.current if tracker is not None else None


def tracking(tracker: TurnTracker | None) -> None:
    """Make ``tracker`` the current run's, in the calling task's context (a task of its own: the run's AutoGen
    runtime, started from it, inherits it)."""
    _tracker.set(tracker)


def install() -> None:
    """Wrap AutoGen's move to the next speakers so a current :class:`TurnTracker` hears of every turn (once
    per process; idempotent).

    Raises:
        ConfigurationError: This autogen-agentchat moves between turns some other way; nothing is changed.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        original = getattr(BaseGroupChatManager, _SEAM, None)
        if original is None or not callable(original):
            raise ConfigurationError(
                f"this autogen-agentchat has no BaseGroupChatManager.{_SEAM}: teamstore cannot find the point "
                "between two turns where a run's checkpoint is written",
                hint="install the autogen-agentchat version teamstore supports (0.7.x), or register the team "
                "with checkpoints 'off'",
            )

        async def between_turns(self: BaseGroupChatManager, cancellation_token: Any) -> None:
            tracker = _tracker.get()
            if tracker is not None and tracker.follows(self):
                await tracker.between_turns(self)
            await original(self, cancellation_token)

        setattr(BaseGroupChatManager, _SEAM, between_turns)
        _installed = True


# --- the private names a checkpoint needs, read here only ------------------------------------------------------
def _private(team: BaseGroupChat, name: str) -> Any:
    value = getattr(team, name, None)
    if value is None and name != "_termination_condition":
        raise ConfigurationError(
            f"this autogen-agentchat's teams have no {name}: a run's checkpoint cannot be taken or applied",
            hint="install the autogen-agentchat version teamstore supports (0.7.x), or register the team "
            "with checkpoints 'off'",
        )
    return value


def team_id(team: BaseGroupChat) -> str:
    """The id AutoGen gives ``team`` (the key of its agents in its runtime)."""
    return str(_private(team, "_team_id"))


def messages(team: BaseGroupChat, dumps: Sequence[Mapping[str, Any]]) -> list[StreamItem]:
    """Messages and events dumped by AutoGen (a manager's thread), made again with ``team``'s message factory
    (which knows the team's own message types)."""
    factory = _private(team, "_message_factory")
    return [factory.create(dump) for dump in dumps]


def termination_condition(team: BaseGroupChat) -> TerminationCondition | None:
    """The condition ``team``'s manager checks after every turn (the team's own object)."""
    condition: TerminationCondition | None = _private(team, "_termination_condition")
    return condition
