"""Semantic diffs between two versions, and whether state saved under one loads under the other.

from config_registry.diff import semantic_diff, compatibility

change = semantic_diff(old_definition, new_definition)
print(change.lines())             # ["participant 'researcher' renamed to 'investigator'", ...]
report = compatibility(old_definition, new_definition)
assert not report.compatible, report.reasons
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from config_registry.allowlist import code_tools
from config_registry.fingerprint import fingerprint_inputs
from config_registry.participants import participant_names, participants
from config_registry.secrets import references
from config_registry.types import KIND_NAMES, TeamDefinition


@dataclass
class SemanticDiff:
    """What changed between two versions of a team, by meaning rather than by text.

    Each ``dict`` maps a participant (or a setting) to ``[before, after]``.
    """

    name: str
    a: str
    b: str
    team_type: list[str] | None = None
    participants_added: list[str] = field(default_factory=list)
    participants_removed: list[str] = field(default_factory=list)
    participants_renamed: dict[str, str] = field(default_factory=dict)
    agent_types: dict[str, list[str]] = field(default_factory=dict)
    system_messages: dict[str, list[str]] = field(default_factory=dict)
    models: dict[str, list[str]] = field(default_factory=dict)
    tools: dict[str, list[list[str]]] = field(default_factory=dict)
    handoffs: dict[str, list[list[str]]] = field(default_factory=dict)
    model_contexts: dict[str, list[Any]] = field(default_factory=dict)
    termination: list[Any] | None = None
    persistence: dict[str, list[Any]] = field(default_factory=dict)
    memory: dict[str, list[Any]] = field(default_factory=dict)
    allowances: dict[str, list[Any]] = field(default_factory=dict)
    order: list[list[str]] | None = None
    other: dict[str, list[str]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """True if anything differs."""
        return bool(self.lines())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view, with the human-readable ``changes`` lines included."""
        return {**asdict(self), "changes": self.lines()}

    def lines(self) -> list[str]:
        """One sentence per change, in a stable order."""
        out: list[str] = []
        if self.team_type:
            out.append(f"team type {self.team_type[0]} -> {self.team_type[1]}")
        out += [f"participant {old!r} renamed to {new!r}" for old, new in self.participants_renamed.items()]
        out += [f"participant {n!r} added" for n in self.participants_added]
        out += [f"participant {n!r} removed" for n in self.participants_removed]
        out += [f"{n}: agent type {a} -> {b}" for n, (a, b) in self.agent_types.items()]
        out += [f"{n}: system message changed" for n in self.system_messages]
        out += [f"{n}: model {a} -> {b}" for n, (a, b) in self.models.items()]
        for n, (added, removed) in self.tools.items():
            out += [f"{n}: tool {t!r} added" for t in added] + [f"{n}: tool {t!r} removed" for t in removed]
        for n, (added, removed) in self.handoffs.items():
            out += [f"{n}: handoff to {t!r} added" for t in added]
            out += [f"{n}: handoff to {t!r} removed" for t in removed]
        out += [f"{n}: model context {a} -> {b}" for n, (a, b) in self.model_contexts.items()]
        if self.termination:
            out.append(f"termination {self.termination[0]} -> {self.termination[1]}")
        out += [f"persistence: {k} {a} -> {b}" for k, (a, b) in self.persistence.items()]
        out += [f"memory: {k} {_absent(a)} -> {_absent(b)}" for k, (a, b) in self.memory.items()]
        out += [f"allowance: {k} {a} -> {b}" for k, (a, b) in self.allowances.items()]
        if self.order:
            out.append(f"participant order {', '.join(self.order[0])} -> {', '.join(self.order[1])}")
        out += [f"{n}: {change}" for n, changes in self.other.items() for change in changes]
        return out


@dataclass
class CompatibilityReport:
    """Whether resume state saved under version ``a`` can be loaded under version ``b``.

    Attributes:
        compatible: False if any persisted participant's stored state would not load.
        reasons: One sentence per breaking change, naming the participant.
        notes: Changes that do not break stored state but are worth knowing.
        fingerprints: ``{"a": {...}, "b": {...}}``, the persisted participants' fingerprints.
    """

    name: str
    a: str
    b: str
    compatible: bool
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fingerprints: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return asdict(self)


def _absent(value: Any) -> Any:
    return "absent" if value is None else value


def _memory_settings(definition: TeamDefinition) -> dict[str, Any]:
    """The memory declaration by meaning: one entry per setting and one per fact (``fact NAME``: its type);
    an undeclared memory has none."""
    memory = definition.manifest.memory
    if memory is None:
        return {}
    found: dict[str, Any] = {
        "enabled": memory.enabled,
        "participants": sorted(memory.participants),
        "writer": memory.writer,
        "summary_tokens": memory.summary_tokens,
        "scope": memory.scope_of(definition.name),
        "retention_days": memory.retention_days,
    }
    found.update({f"fact {name}": kind for name, kind in sorted(memory.facts.items())})
    return found


def _memory_changes(a: TeamDefinition, b: TeamDefinition) -> dict[str, list[Any]]:
    x, y = _memory_settings(a), _memory_settings(b)
    keys = [k for k in x if not k.startswith("fact ")] + [k for k in y if not k.startswith("fact ") and k not in x]
    keys += sorted({k for k in (*x, *y) if k.startswith("fact ")})
    return {key: [x.get(key), y.get(key)] for key in keys if x.get(key) != y.get(key)}


def _memory_compatibility(a: TeamDefinition, b: TeamDefinition, report: CompatibilityReport) -> None:
    """A fact whose type changed breaks the users' stored memory (their values no longer pass the type); a
    scope changed, a fact dropped or the memory switched off leaves it unread, which is worth a note."""
    x, y = a.manifest.memory, b.manifest.memory
    if x is None or y is None or not (x.enabled and y.enabled):
        if (x is not None and x.enabled) != (y is not None and y.enabled):
            state = "kept" if y is not None and y.enabled else "no longer read or written; what is stored stays until its retention"
            report.notes.append(f"user memory is {state}")
        return
    if x.scope_of(a.name) != y.scope_of(b.name):
        report.notes.append(f"memory scope changed {x.scope_of(a.name)!r} -> {y.scope_of(b.name)!r}: users start "
                            "with the new scope's memory, and the old one stays until its retention")
    for name, kind in sorted(x.facts.items()):
        if name not in y.facts:
            report.notes.append(f"memory fact {name!r} is no longer declared: stored values of it are not given")
        elif y.facts[name] != kind:
            report.reasons.append(f"memory fact {name!r} changed type {kind} -> {y.facts[name]}: the values "
                                  "users' memory holds for it would no longer pass their type")


def _by_name(definition: TeamDefinition) -> dict[str, dict[str, Any]]:
    component = definition.component
    return dict(zip(participant_names(component), participants(component), strict=True))


def _summary(component: dict[str, Any] | None) -> str:
    """A short text for a nested component: its class name and its non-default config, compactly."""
    if not component:
        return "none"
    cls = str(component.get("provider", "?")).rsplit(".", 1)[-1]
    config = component.get("config") or {}
    if "conditions" in config:  # AutoGen's `a & b` and `a | b`: the provider says which
        operator = " and " if cls == "AndTerminationCondition" else " or "
        return f"({operator.join(_summary(c) for c in config['conditions'])})"
    simple = {k: v for k, v in sorted(config.items()) if _scalar(v) or (isinstance(v, list) and all(map(_scalar, v)))}
    return f"{cls}({', '.join(f'{k}={v}' for k, v in simple.items())})"


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def _model(agent: dict[str, Any]) -> str:
    client = (agent.get("config") or {}).get("model_client") or {}
    provider = str(client.get("provider", "none")).rsplit(".", 1)[-1]
    model = (client.get("config") or {}).get("model") or (client.get("config") or {}).get("azure_deployment")
    return f"{provider}:{model}" if model else provider


def _tools(agent: dict[str, Any]) -> set[str]:
    config = agent.get("config") or {}
    found = {str((t.get("config") or {}).get("name")) for t in config.get("tools") or []}
    for bench in config.get("workbench") or []:
        found |= {
            str((t.get("config") or {}).get("name")) for t in (bench.get("config") or {}).get("tools") or []
        }
    return found


def _handoffs(agent: dict[str, Any]) -> set[str]:
    """Whom a Swarm participant can hand off to."""
    handoffs = (agent.get("config") or {}).get("handoffs") or []
    return {str(h.get("target")) for h in handoffs if isinstance(h, dict)}


def _renames(old: list[str], new: list[str], a: dict[str, Any], b: dict[str, Any]) -> dict[str, str]:
    """A removed and an added participant at the same position with the same agent type: a rename."""
    removed, added = [n for n in old if n not in new], [n for n in new if n not in old]
    renamed: dict[str, str] = {}
    for name in removed:
        index = old.index(name)
        if (
            index < len(new)
            and new[index] in added
            and a[name].get("provider") == b[new[index]].get("provider")
        ):
            renamed[name] = new[index]
    return renamed


_ABSENT = object()
_SHORT = 60


def _leaves(node: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of a JSON value by its path (``config.tools[0].config.name``)."""
    if isinstance(node, dict) and node and set(node) != {"$secret"}:
        found: dict[str, Any] = {}
        for key, value in node.items():
            found.update(_leaves(value, f"{path}.{key}" if path else str(key)))
        return found
    if isinstance(node, list) and node:
        found = {}
        for i, value in enumerate(node):
            found.update(_leaves(value, f"{path}[{i}]"))
        return found
    return {path: node}


def _show(value: Any, start: int = 0) -> str:
    text = "absent" if value is _ABSENT else json.dumps(value, sort_keys=True)
    if len(text) <= _SHORT:
        return text
    head = "..." if start > 0 else ""
    tail = "..." if start + _SHORT - len(head) - 3 < len(text) else ""
    return head + text[start : start + _SHORT - len(head) - len(tail)] + tail


def _show_pair(before: Any, after: Any) -> str:
    """Both values, long ones cut to a window that starts just before their first difference (two long
    prompts or tool bodies that differ past the cut would otherwise print alike)."""
    a, b = (json.dumps(v, sort_keys=True) if v is not _ABSENT else "" for v in (before, after))
    same = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    start = max(0, same - 15)  # a short value is shown whole whatever the start
    return f"{_show(before, start)} -> {_show(after, start)}"


def _other_changes(x: Any, y: Any, skip: tuple[str, ...]) -> list[str]:
    """Changed leaves outside ``skip`` (prefixes already reported by meaning): what a review must still see,
    a model client's endpoint or temperature, a description, a tool's source code, a team's max_turns."""
    lx, ly = _leaves(x), _leaves(y)
    changes = []
    for path in sorted(set(lx) | set(ly)):
        before, after = lx.get(path, _ABSENT), ly.get(path, _ABSENT)
        if before == after or any(path == p or path.startswith((p + ".", p + "[")) for p in skip):
            continue
        changes.append(f"{path} {_show_pair(before, after)}")
    return changes


def _compare_participant(diff: SemanticDiff, label: str, x: dict[str, Any], y: dict[str, Any]) -> None:
    if x.get("provider") != y.get("provider"):
        diff.agent_types[label] = [str(x.get("provider")), str(y.get("provider"))]
    cx, cy = x.get("config") or {}, y.get("config") or {}
    if cx.get("system_message") != cy.get("system_message"):
        diff.system_messages[label] = [str(cx.get("system_message")), str(cy.get("system_message"))]
    if _model(x) != _model(y):
        diff.models[label] = [_model(x), _model(y)]
    tx, ty = _tools(x), _tools(y)
    if tx != ty:
        diff.tools[label] = [sorted(ty - tx), sorted(tx - ty)]
    hx, hy = _handoffs(x), _handoffs(y)
    if hx != hy:
        diff.handoffs[label] = [sorted(hy - hx), sorted(hx - hy)]
    if _summary(cx.get("model_context")) != _summary(cy.get("model_context")):
        diff.model_contexts[label] = [_summary(cx.get("model_context")), _summary(cy.get("model_context"))]
    skip = ["provider", "config.name", "config.system_message", "config.model_client.provider",
            "config.model_client.config.model", "config.model_client.config.azure_deployment"]
    if label in diff.model_contexts:
        skip.append("config.model_context")
    if label in diff.tools:  # added or removed tools are reported by name; their other fields would be noise
        skip += ["config.tools", "config.workbench"]
    if label in diff.handoffs:  # likewise by target: each handoff's name, message and description follow it
        skip.append("config.handoffs")
    other = _other_changes(x, y, tuple(skip))
    if other:
        diff.other[label] = other


def _settings(definition: TeamDefinition) -> tuple[dict[str, Any], dict[str, Any]]:
    m = definition.manifest
    persistence = {
        "persist": sorted(m.persist),
        "context_bound": m.context_bound,
        "state_ttl_days": m.state_ttl_days,
        "checkpoints": m.checkpoints,
    }
    allowances = {
        "allow_source_code_tools": m.allow_source_code_tools,
        "source_code_tools": code_tools(definition.component),
        "allowed_providers": sorted(m.allowed_providers),
        "secrets": references(definition.component),
    }
    return persistence, allowances


def semantic_diff(a: TeamDefinition, b: TeamDefinition) -> SemanticDiff:
    """Compare two versions of a team by meaning.

    Args:
        a: The older (or "from") definition.
        b: The newer (or "to") definition.

    Returns:
        The differences: participants, prompts, models, tools, contexts, termination, persistence and
        allowances by meaning; participant order; and every other changed field by its path.
    """
    diff = SemanticDiff(name=b.name, a=a.version, b=b.version)
    if a.component.get("provider") != b.component.get("provider"):
        diff.team_type = [str(a.component.get("provider")), str(b.component.get("provider"))]
    pa, pb = _by_name(a), _by_name(b)
    diff.participants_renamed = _renames(list(pa), list(pb), pa, pb)
    diff.participants_added = [n for n in pb if n not in pa and n not in diff.participants_renamed.values()]
    diff.participants_removed = [n for n in pa if n not in pb and n not in diff.participants_renamed]
    pairs = [(n, n, n) for n in pa if n in pb] + [
        (f"{o}->{n}", o, n) for o, n in diff.participants_renamed.items()
    ]
    for label, old, new in pairs:
        _compare_participant(diff, label, pa[old], pb[new])
    common = [n for n in pa if n in pb]
    if common != [n for n in pb if n in pa]:  # who speaks first in a round robin, for one
        diff.order = [common, [n for n in pb if n in pa]]
    ta = _summary((a.component.get("config") or {}).get("termination_condition"))
    tb = _summary((b.component.get("config") or {}).get("termination_condition"))
    if ta != tb:
        diff.termination = [ta, tb]
    # A change the summary does not show (a list-valued setting, such as a SourceMatchTermination's
    # sources) is reported by its path, as a participant's is.
    skip = ("provider", "config.participants") + (("config.termination_condition",) if diff.termination else ())
    team_other = _other_changes(a.component, b.component, skip)
    if team_other:
        diff.other["team"] = team_other
    for (key, x), (_k, y) in zip(_flat(a), _flat(b), strict=True):
        if x != y:
            target = diff.persistence if key.startswith("persistence.") else diff.allowances
            target[key.split(".", 1)[1]] = [x, y]
    diff.memory = _memory_changes(a, b)
    return diff


def _flat(definition: TeamDefinition) -> list[tuple[str, Any]]:
    persistence, allowances = _settings(definition)
    return [(f"persistence.{k}", v) for k, v in persistence.items()] + [
        (f"allowances.{k}", v) for k, v in allowances.items()
    ]


def _explain(name: str, x: dict[str, Any], y: dict[str, Any]) -> list[str]:
    fa, fb = fingerprint_inputs(x), fingerprint_inputs(y)
    reasons = []
    if fa["provider"] != fb["provider"]:
        reasons.append(f"{name}: agent type changed {fa['provider']} -> {fb['provider']}")
    if fa["component_version"] != fb["component_version"]:
        reasons.append(
            f"{name}: agent component_version changed {fa['component_version']} -> {fb['component_version']}"
        )
    ba, bb = fa["bound"] or {}, fb["bound"] or {}
    for key in sorted(set(ba) | set(bb)):
        if ba.get(key) != bb.get(key):
            what = "context provider" if key == "provider" else f"context bound changed {key}"
            reasons.append(f"{name}: {what} {ba.get(key)} -> {bb.get(key)}")
    return reasons or [f"{name}: fingerprint changed"]


def compatibility(a: TeamDefinition, b: TeamDefinition) -> CompatibilityReport:
    """Whether resume state saved under ``a`` loads under ``b``, with a reason per persisted participant.

    Args:
        a: The definition the state was saved under.
        b: The definition it would be loaded under.

    Returns:
        The report; ``compatible`` is False if the definition changed between a team and a single agent,
        any persisted participant of ``a`` was renamed, removed, retyped, or had its context bound
        changed, or a memory fact changed its type (users' stored values of it would fail it). A participant newly persisted, or no longer persisted, is a note: the others still load.
    """
    pa, pb = _by_name(a), _by_name(b)
    report = CompatibilityReport(
        name=b.name,
        a=a.version,
        b=b.version,
        compatible=True,
        fingerprints={"a": dict(a.fingerprints), "b": dict(b.fingerprints)},
    )
    if a.kind != b.kind:
        report.reasons.append(f"the definition changed from {KIND_NAMES[a.kind]} to {KIND_NAMES[b.kind]}: "
                              f"stored states are shaped for {KIND_NAMES[a.kind]}")
    for name, print_a in sorted(a.fingerprints.items()):
        if name not in pb:
            report.reasons.append(f"persisted participant {name!r} was renamed or removed")
        elif name not in b.fingerprints:
            report.notes.append(f"{name!r} is no longer persisted: its saved state will be dropped")
        elif print_a != b.fingerprints[name]:
            report.reasons.extend(_explain(name, pa[name], pb[name]))
    for name in sorted(set(b.fingerprints) - set(a.fingerprints)):
        report.notes.append(f"{name!r} is newly persisted: it starts with fresh state")
    _memory_compatibility(a, b, report)
    if a.version != b.version and a.manifest.checkpoints != "off":
        # A checkpoint holds every participant's and the manager's state mid-run, shaped by its exact version.
        report.notes.append(f"runs interrupted under {a.version[:12]} cannot be continued under {b.version[:12]}: "
                            "a run's checkpoint applies only to the version that wrote it (the state from before "
                            "the run still loads)")
    if a.manifest.checkpoints != b.manifest.checkpoints:
        report.notes.append(f"checkpoints {a.manifest.checkpoints} -> {b.manifest.checkpoints}")
    report.compatible = not report.reasons
    return report


__all__ = ["CompatibilityReport", "SemanticDiff", "compatibility", "semantic_diff"]
