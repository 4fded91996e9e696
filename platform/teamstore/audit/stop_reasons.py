"""Which stop reasons may leave the transcript: those AutoGen's termination conditions and teamstore write.

    from teamstore.audit.stop_reasons import recordable

    recordable("Text 'TERMINATE' mentioned")                       # kept as it is
    recordable("The user asked why router XJ99 drops; answered.")  # OTHER: a model wrote it

A run's stop reason is usually a fixed sentence of one of AgentChat's termination conditions, naming only what
the team's definition names (a termination text, an agent, a function, a limit). Not always:
``MagenticOneGroupChat`` stops with the reason its orchestrator's model gave for the request being satisfied,
which retells the user's request. The transcript keeps every stop reason (sealed, erased with the user); the
ledger (which outlives an erasure, de-identified, and goes to warehouses) and the spans keep a reason only in a
form AutoGen's conditions or teamstore write, holding neither NUL nor a lone surrogate (no database keeps either
as text), and :data:`OTHER` for any other.
"""

from __future__ import annotations

import re

from teamstore.ids import lone_surrogate

OTHER = "other (the run's transcript holds its stop reason)"
"""What the ledger and the spans record for a stop reason no known condition writes."""

_NAME = r"[^']*"  # a termination text, an agent's or a function's name, as the team's definition gives it
_CONDITIONS = (
    r"Stop message received",
    r"Maximum number of messages \d+ reached, current message count: \d+",
    rf"Text '{_NAME}' mentioned",
    r"Functional termination condition met",
    r"Token usage limit reached(?:, [a-z_ ]+: \d+)*\.?",
    r"Handoff to [^ ,]+ from [^ ,]+ detected\.",
    r"Timeout of [\d.]+ seconds reached",
    r"External termination requested",
    rf"'{_NAME}' answered",
    rf"Text message received from '{_NAME}'",
    rf"Function '{_NAME}' was executed\.",
    # The group chats' own, MagenticOne's round limit, and teamstore's for a run that ended interrupted.
    r"Maximum number of turns \d+ reached\.",
    r"Digraph execution is complete",
    r"The group chat is stopped\.",
    r"The group chat has already terminated\.",
    r"An exception occurred in the runtime\.",
    r"An error occurred in the group chat\.",
    r"Max rounds reached\.",
    r"(?:abandoned|set aside|deleted|expired) after turn \d+",
)
_ONE = "(?:" + "|".join(_CONDITIONS) + ")"
# Combined conditions (`a | b`, `a & b`) join their reasons with ", ".
_KNOWN = re.compile(f"{_ONE}(?:, {_ONE})*")


def written_by_a_condition(stop_reason: str | None) -> bool:
    """Whether ``stop_reason`` reads as one AutoGen's termination conditions or teamstore write."""
    return stop_reason is not None and _KNOWN.fullmatch(stop_reason) is not None


def recordable(stop_reason: str | None) -> str | None:
    """``stop_reason`` as the ledger and the spans may record it: as it is when a known condition wrote it,
    else :data:`OTHER` (never text a model or a user wrote); ``None`` stays ``None``.

    A reason holding NUL or a lone surrogate is :data:`OTHER` too, whoever wrote it: no database keeps either
    as text, and Postgres would refuse the run's whole ledger row, its usage then unrecorded. A condition's
    sentence may hold one (the text a ``TextMentionTermination`` waits for, which the model's reply then held),
    as may a model's own reason that reads like a condition's.
    """
    if stop_reason is None:
        return None
    if not written_by_a_condition(stop_reason) or "\x00" in stop_reason or lone_surrogate(stop_reason) is not None:
        return OTHER
    return stop_reason[:256]
