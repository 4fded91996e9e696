"""The manifest: what a platform team declares about a team definition besides its component JSON.

from config_registry.manifest import Manifest

manifest = Manifest(
    name="support_triage",
    persist=["researcher"],
    context_bound=20,
    secrets={"participants.0.config.model_client.config.api_key": "env:OPENAI_API_KEY"},
    memory=MemoryDeclaration(participants=["triage"], writer="triage", facts={"ticket_id": "str"}),
)
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from config_registry import extensions
from config_registry.errors import DefinitionInvalid

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
VERSION_LIKE = re.compile(r"[0-9a-f]{7,40}")
SECRET_REFERENCE = re.compile(r"^env:[A-Za-z_][A-Za-z0-9_]*$")
# AutoGen's own; installed packages add theirs through entry points (config_registry.extensions).
BUILTIN_PROVIDER_PREFIXES: tuple[str, ...] = ("autogen_agentchat.", "autogen_core.", "autogen_ext.")
Checkpoints = Literal["off", "every_turn"]
"""When a run's progress is made durable while it runs: never, or after every completed agent turn."""


def shown(value: str) -> str:
    """``value`` quoted for a message, cut short: a name can be anything a caller passed."""
    return repr(value) if len(value) <= 80 else f"{value[:60]!r}... ({len(value):,} characters)"


def name_problem(value: str, pattern: re.Pattern[str] = NAME_PATTERN) -> str:
    """What makes ``value`` no name by ``pattern`` (a team's, by default; a fact's is :data:`FACT_NAME`), never
    the name itself: a name given may be a user's words typed in the wrong place (``--team "$INPUT"``), and the
    error line may be logged.

    Returns:
        ``it is empty``, ``it is 70 characters long; the limit is 64``, or the first character it may not hold
        (``it holds U+0020 (' ')``, ``it starts with U+005F ('_')``).
    """
    if not value:
        return "it is empty"
    if len(value) > 64:
        return f"it is {len(value):,} characters long; the limit is 64"
    bad = next((c for i, c in enumerate(value) if not pattern.fullmatch("a" + c if i else c)), value[0])
    where = "starts with" if value.index(bad) == 0 else "holds"
    return f"it {where} U+{ord(bad):04X}" + (f" ({bad!r})" if bad.isascii() and bad.isprintable() else "")


def validate_name(value: str, *, what: str = "team name", field: str = "name") -> str:
    """Check a team or label name: lowercase letters, digits, ``_`` and ``-``; no ``/`` or ``..``.

    Args:
        value: The name.
        what: What the name is, for the message.
        field: The field to name in the error.

    Returns:
        The name, unchanged.

    Raises:
        DefinitionInvalid: The name has other characters, is empty or longer than 64 characters, or (a
            label) is 7-40 hex digits, which refs read as a version.
    """
    if not NAME_PATTERN.fullmatch(value):  # fullmatch: '$' alone would also let a trailing newline through
        raise DefinitionInvalid(
            f"{what} is not allowed: {name_problem(value)}",
            field=field,
            hint="use 1-64 lowercase letters, digits, '_' or '-', starting with a letter or digit",
        )
    if what == "label" and VERSION_LIKE.fullmatch(value):
        raise DefinitionInvalid(
            f"label {shown(value)} looks like a version (7-40 hex digits); refs would resolve it instead of the version",
            field=field,
            hint="give the label a name with a non-hex letter in it, e.g. 'release-1'",
        )
    return value


FactType = Literal["str", "int", "float", "bool", "date"]
"""The types a memory fact may be declared with (``date``: an ISO date, ``2026-09-24``)."""
FACT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_FACTS = 32
MAX_SUMMARY_TOKENS = 4000


class MemoryDeclaration(BaseModel):
    """What a team keeps about a user between sessions: a bounded summary and typed facts.

    Attributes:
        enabled: Off keeps the declaration but reads and writes no memory.
        participants: The participants given the user's memory before their model calls.
        writer: The participant whose model client writes the memory after each session's runs.
        summary_tokens: The summary's budget (about four characters a token); a longer one is refused.
        facts: Fact name -> type; the writer keeps only these, each checked against its type.
        scope: The memory's name: teams declaring the same scope share a user's memory. ``None``: the team's name.
        retention_days: How long a user's memory lives after its last update; ``None`` leaves it to the runtime.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    participants: list[str] = Field(min_length=1)
    writer: str
    summary_tokens: int = Field(default=150, gt=0, le=MAX_SUMMARY_TOKENS, strict=True)  # never `true` as 1
    facts: dict[str, FactType] = Field(default_factory=dict)
    scope: str | None = None
    retention_days: float | None = Field(default=None, gt=0, le=3650, strict=True, allow_inf_nan=False)

    @field_validator("participants")
    @classmethod
    def _participants_unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("names a participant more than once")
        return value

    @field_validator("facts")
    @classmethod
    def _fact_names(cls, value: dict[str, FactType]) -> dict[str, FactType]:
        if len(value) > MAX_FACTS:
            raise ValueError(f"declares {len(value)} facts; at most {MAX_FACTS}")
        for name in value:
            if not FACT_NAME.fullmatch(name):
                raise ValueError(f"fact name {name!r}: use 1-64 lowercase letters, digits or '_', starting with a letter")
        return value

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str | None) -> str | None:
        if value is not None and not NAME_PATTERN.fullmatch(value):
            raise ValueError("use 1-64 lowercase letters, digits, '_' or '-', as a team name")
        return value

    def scope_of(self, team: str) -> str:
        """The memory's name for ``team``: its declared scope, else the team's own name."""
        return self.scope or team


class Manifest(BaseModel):
    """What a team definition declares beyond its component JSON.

    Attributes:
        name: The team's registry name.
        description: One line on what the team does.
        owner: Who to ask about it.
        persist: Participants opted in to resume state.
        context_bound: The most messages a persisted participant's bounding context may keep.
        allowed_providers: Provider prefixes allowed beyond AutoGen's own and those installed packages
            declare (:mod:`config_registry.extensions`).
        allow_source_code_tools: Allow tools that carry Python source (``FunctionTool``), which loading executes,
            and components that run code or commands they are given (code executors, MCP stdio servers).
        secrets: JSON path (under the root component's ``config``) -> reference such as ``env:OPENAI_API_KEY``.
        state_ttl_days: How long resume state for this team lives; ``None`` leaves it to the runtime.
        memory: What the team keeps about a user between sessions; ``None``: nothing.
        checkpoints: ``"off"``, or ``"every_turn"``: each completed agent turn of a run is made durable
            before the next starts, so a run whose worker died continues from its last completed turn
            (docs/checkpoints.md).
        notes: Free text for reviewers.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    owner: str = ""
    persist: list[str] = Field(default_factory=list)
    context_bound: int | None = Field(default=None, gt=0, strict=True)  # never `true` as 1, nor "20" as 20
    allowed_providers: list[str] = Field(default_factory=list)
    allow_source_code_tools: bool = False
    secrets: dict[str, str] = Field(default_factory=dict)
    # Ten years at most, as the runtime's own setting; strict: `true` is not a day.
    state_ttl_days: float | None = Field(default=None, gt=0, le=3650, strict=True, allow_inf_nan=False)
    memory: MemoryDeclaration | None = None
    checkpoints: Checkpoints = "off"
    notes: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_PATTERN.fullmatch(value):
            raise ValueError("use 1-64 lowercase letters, digits, '_' or '-' (no '/' or '..')")
        return value

    @field_validator("persist")
    @classmethod
    def _persist_unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("names a participant more than once")
        return value

    @field_validator("allowed_providers")
    @classmethod
    def _prefixes(cls, value: list[str]) -> list[str]:
        for prefix in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", prefix):
                raise ValueError(f"{prefix!r} is not a module prefix such as 'mycompany.agents.'")
        return value

    @field_validator("secrets")
    @classmethod
    def _references(cls, value: dict[str, str]) -> dict[str, str]:
        for path, reference in value.items():
            if not SECRET_REFERENCE.fullmatch(reference):
                # Not quoted: a reference given wrong is most often the secret's value itself (PATH=$VAR).
                raise ValueError(f"{path}: the reference is not 'env:VARIABLE_NAME' (a variable's name, not its value)")
        return value

    @property
    def keeps_memory(self) -> bool:
        """Whether the team reads and writes user memory (declared and enabled)."""
        return self.memory is not None and self.memory.enabled

    def provider_prefixes(self) -> tuple[str, ...]:
        """Every allowed provider prefix: AutoGen's, those installed packages declare, and the manifest's own."""
        return BUILTIN_PROVIDER_PREFIXES + extensions.provider_prefixes() + tuple(self.allowed_providers)
