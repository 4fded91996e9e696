"""What registering a definition checks, and the write it then makes: shared by ``Registry.add`` and by
``registry recover``, which commits a definition an interrupted writer left only if it passes the same.

    from config_registry.registration import (check_commit, check_definition, check_owner, check_shared_memory,
                                               commit_definition)

    check_commit("first version", author=None)
    stored = check_definition("support_triage", team.dump_component(), manifest)   # nothing written yet
    with repo.lock(timeout=10):
        check_owner(repo, "support_triage", manifest)           # against the latest version, as committed
        check_shared_memory(repo, "support_triage", manifest)   # against the other teams, as committed
        version = commit_definition(repo, "support_triage", stored, manifest, "first version", None)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from autogen_core import ComponentModel
from pydantic import ValidationError

from config_registry.errors import DefinitionInvalid, validation_message
from config_registry.gitrepo import GitRepo, dump_json
from config_registry.manifest import Manifest, MemoryDeclaration, shown, validate_name
from config_registry.secrets import check_free_text, walk
from config_registry.shapes import known_shape
from config_registry.validate import check_nothing_dropped, validate_definition

TRACKED = ("teams", "labels")
"""The folders registrations and label moves write; nothing else in the repository is theirs."""

MAX_DEFINITION_BYTES = 1024 * 1024
"""The most bytes a definition's ``component.json`` may hold (1 MiB; teamstore's example teams take
about 9 KB). Every worker reads and parses it at each cache refresh and builds it for each session, and
registration scans every string in it for secrets: a definition that large carries data, not settings."""
SIZE_HINT = ("keep documents, examples and data out of the definition (a prompt is sent with every model call): "
             "give them to the team at run time, through its memory or a tool that reads them")
"""How to fix a definition over :data:`MAX_DEFINITION_BYTES`."""


def check_commit(message: str, author: str | None) -> None:
    """The commit message says why and holds no credential; the author is one git can record.

    Raises:
        DefinitionInvalid: Naming ``message`` or ``author``.
    """
    if not message.strip():
        raise DefinitionInvalid("the commit message is empty", field="message", hint="say why this version exists")
    check_free_text("message", message)
    check_actor("author", author)


def check_definition(
    name: str, component: Mapping[str, Any] | ComponentModel, manifest: Manifest
) -> dict[str, Any]:
    """Every check a definition passes before it is stored; returns the JSON to store (secrets as references).

    Raises:
        DefinitionInvalid: The first check that fails, naming the field and the fix.
    """
    validate_name(name)
    if manifest.name != name:
        raise DefinitionInvalid(
            f"manifest name {manifest.name!r} differs from the team name {name!r}",
            field="manifest.name",
            hint=f"register it as {manifest.name!r} or set the manifest's name to {name!r}",
        )
    for field in ("description", "owner", "notes"):
        check_free_text(f"manifest.{field}", getattr(manifest, field))
    for index, prefix in enumerate(manifest.allowed_providers):  # a module name can be a token's shape too
        check_free_text(f"manifest.allowed_providers.{index}", prefix)
    _check_variables(manifest)
    component = component_json(component)
    for field in ("description", "label"):
        check_free_text(field, str(component.get(field) or ""))
    return validate_definition(component, manifest)


def _check_variables(manifest: Manifest) -> None:
    """A secret reference names a variable, never holds the secret: ``env:$GITHUB_TOKEN``, expanded by the
    shell, is a valid variable name with the token in it (GitHub, Stripe and AWS keys are)."""
    for path, reference in manifest.secrets.items():
        shape = known_shape(reference.removeprefix("env:"))
        if shape is not None:
            raise DefinitionInvalid(
                f"the reference names a variable that looks like {'an' if shape[0] in 'AEIOU' else 'a'} {shape} "
                "itself; the registry never stores secrets",
                field=f"secrets.{path}",
                hint="give the variable's name, not its value: --secret PATH=env:GITHUB_TOKEN, not env:$GITHUB_TOKEN",
            )


def check_owner(repo: GitRepo, name: str, manifest: Manifest) -> None:
    """A team registered already with an owner is registered again only by that owner: the same name chosen
    by another team would otherwise replace its definition, and a label moved with it would serve that team's
    users another team. Checked against the latest version, as committed (under the write lock).

    Raises:
        DefinitionInvalid: Naming the current owner, and the two ways on.
    """
    current = _read_json(repo, "HEAD", f"teams/{name}/manifest.json")
    owner = current.get("owner") if isinstance(current, dict) else None
    if not isinstance(owner, str) or not owner or owner == manifest.owner:
        return
    given = f"owner {shown(manifest.owner)}" if manifest.owner else "no owner"
    raise DefinitionInvalid(
        f"team {name!r} is registered already, owned by {shown(owner)}; this registration gives {given}, and "
        "would replace that team's definition",
        field="owner",
        hint=f"register your team under another name; or, to change {name!r} itself, pass --owner {shown(owner)}",
    )


def check_shared_memory(repo: GitRepo, name: str, manifest: Manifest) -> None:
    """Teams that share a memory scope give each fact one type: a value one team's writer stores would fail
    the other's type, for every user they share. Checked against every other team's latest version and the
    versions its labels point at (what may be running), as committed.

    Raises:
        DefinitionInvalid: Naming the fact, both teams, the other team's version and the scope.
    """
    if manifest.memory is None or not manifest.keeps_memory:
        return
    scope, facts = manifest.memory.scope_of(name), manifest.memory.facts
    for other, where, declared in _memory_declarations(repo, name):
        if declared.scope_of(other) != scope:
            continue
        for fact, kind in facts.items():
            theirs = declared.facts.get(fact, kind)
            if theirs != kind:
                raise DefinitionInvalid(
                    f"team {name!r} declares memory fact {fact!r} as {kind}, but team {other!r} ({where}) declares "
                    f"it as {theirs} in the memory scope {scope!r} they share: a value one team stores would fail "
                    "the other's type",
                    field=f"memory.facts.{fact}",
                    hint=f"declare it as {theirs}, give the fact another name, or give this team a memory scope "
                    f"of its own; to change its type in both, first drop it from {other!r}",
                )


def declared_facts(repo: GitRepo, scope: str) -> frozenset[str]:
    """The memory facts that teams declare under ``scope`` in their latest and labelled versions, as committed,
    memory switched on or off (a team that switched it off keeps the declaration, and may switch it back on).
    A fact outside them is kept by no team that may be running (a team pinned to an older version aside)."""
    return frozenset(fact for team, _, declared in _memory_declarations(repo, "", switched_off=True)
                     if declared.scope_of(team) == scope for fact in declared.facts)


def _memory_declarations(
    repo: GitRepo, name: str, *, switched_off: bool = False
) -> Iterator[tuple[str, str, MemoryDeclaration]]:
    """(team, which version, its memory declaration: enabled ones, and ``switched_off`` ones too) for every team
    but ``name``, its latest and labelled versions. A manifest that does not read is passed over: no team is
    built from it, so it writes no memory."""
    teams = sorted({path.split("/")[1] for path in repo.files("HEAD", "teams/") if path.endswith("/manifest.json")}
                   - {name})
    # Two reads for every team's files (labels, then manifests), not a git process a file.
    labels = repo.show_many([("HEAD", f"labels/{team}.json") for team in teams])
    wanted = [
        (team, where, version) for team, text in zip(teams, labels, strict=True)
        for where, version in _latest_and_labelled(_json(text))
    ]
    manifests = repo.show_many([(version, f"teams/{team}/manifest.json") for team, _where, version in wanted])
    for (team, where, _version), text in zip(wanted, manifests, strict=True):
        try:
            declared = Manifest.model_validate(_json(text))
        except ValidationError:
            continue
        if declared.memory is not None and (declared.keeps_memory or switched_off):
            yield team, where, declared.memory


def _latest_and_labelled(labels: Any) -> list[tuple[str, str]]:
    """(which version, its commit) for a team's latest version and those its ``labels`` (as read) point at."""
    return [("its latest version", "HEAD")] + [
        (f"version {version[:12]}, label {label}", version)
        for label, version in sorted(labels.items() if isinstance(labels, dict) else [])
        if isinstance(version, str)
    ]


def _read_json(repo: GitRepo, version: str, relative: str) -> Any:
    return _json(repo.show(version, relative))


def _json(text: str | None) -> Any:
    try:
        return json.loads(text or "null")
    except ValueError:
        return None


def commit_definition(
    repo: GitRepo, name: str, stored: dict[str, Any], manifest: Manifest, message: str, author: str | None
) -> str | None:
    """Write a checked definition's two files and commit them (under the write lock); the new version, or
    ``None`` when the files are as committed already."""
    folder = f"teams/{name}"
    repo.write_json(f"{folder}/component.json", stored)
    repo.write_json(f"{folder}/manifest.json", manifest.model_dump(mode="json"))
    return repo.commit([folder], message, author)


def _check_finite(component: dict[str, Any]) -> None:
    """Refuse NaN and Infinity, which JSON has no word for: AutoGen's component model writes them out as
    null, so a ``max_turns`` of NaN would be stored as no turn limit at all."""
    for path, _key, value, _parent in walk(component):
        if isinstance(value, float) and not math.isfinite(value):
            said = "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
            raise DefinitionInvalid(
                f"is {said}, which JSON cannot hold: a number must be finite",
                field=path,
                hint="give a finite number, or null where the field may be left unset",
            )


def check_actor(field: str, actor: str | None) -> None:
    """Refuse an author git cannot record ('<>', blanks) or would silently change (control characters), or
    one that holds a credential."""
    if actor is None:
        return
    name = actor.partition("<")[0].strip()
    if not name or any(ord(c) < 32 or ord(c) == 127 for c in actor):
        raise DefinitionInvalid(
            f"{field} {shown(actor)} is not a name git can record as a commit's author",
            field=field,
            hint="give a name, optionally with an email: 'Ada Lovelace <ada@example.com>'",
        )
    check_free_text(field, actor)  # kept in the history beside the message


def component_json(component: Mapping[str, Any] | ComponentModel) -> dict[str, Any]:
    """``component`` (a component, its model or its JSON) as AutoGen component JSON.

    Raises:
        DefinitionInvalid: It is not a component, it is a team object whose dump leaves out what decides
            how it behaves (:func:`~config_registry.validate.check_nothing_dropped`), or its JSON, written
            as the registry stores it, is over :data:`MAX_DEFINITION_BYTES`.
    """
    data = _component_json(component)
    # Measured before the secret scan, which runs every detector over every string and is what makes an
    # oversized definition slow to refuse.
    size = len(dump_json(data).encode())
    if size > MAX_DEFINITION_BYTES:
        raise DefinitionInvalid(
            f"is {size:,} bytes of JSON as stored, over the {MAX_DEFINITION_BYTES:,}-byte (1 MiB) limit on a "
            "team definition",
            field="component",
            hint=SIZE_HINT,
        )
    return data


def _component_json(component: Mapping[str, Any] | ComponentModel) -> dict[str, Any]:
    if hasattr(component, "dump_component"):
        check_nothing_dropped(component)
        component = component.dump_component()
    if isinstance(component, ComponentModel):
        _check_finite(component.model_dump())
        return component.model_dump(mode="json")
    if not isinstance(component, Mapping):
        raise DefinitionInvalid(f"expected component JSON, got {type(component).__name__}", field="component")
    _check_finite(dict(component))
    try:
        return ComponentModel.model_validate(dict(component)).model_dump(mode="json")
    except ValidationError as exc:
        raise DefinitionInvalid(
            f"is not an AutoGen component: {validation_message(exc.errors()[0])}",
            field=".".join(map(str, exc.errors()[0]["loc"])) or "component",
            hint="pass what team.dump_component() returns",
        ) from exc
    except (ValueError, RecursionError) as exc:  # pydantic's "Maximum serialization depth exceeded"
        raise DefinitionInvalid(
            f"is nested too deeply to be a component: {exc}",
            field="component",
            hint="pass what team.dump_component() returns",
        ) from exc



class _Pairs(list[tuple[str, Any]]):
    """One JSON object's members as read, in order, before a repeated key can overwrite the first."""


def parse_json(text: str, root: str = "") -> Any:
    """``json.loads(text)``, refusing an object that gives a key twice: ``json.loads`` keeps the last of the
    two without a word, while a person reviewing the file may read the first (a prompt, a fact's type).

    Args:
        text: JSON text (a definition file, a ``--memory`` declaration).
        root: The dotted path the text sits at, for the error (``"memory"``).

    Returns:
        The parsed value.

    Raises:
        DefinitionInvalid: Naming the repeated key's dotted path (never its values).
        ValueError: ``text`` is not JSON.
        RecursionError: It is nested too deeply to read.
    """
    return _objects(json.loads(text, object_pairs_hook=_Pairs), root)


def _objects(node: Any, path: str) -> Any:
    if isinstance(node, _Pairs):
        result: dict[str, Any] = {}
        for key, value in node:
            child = f"{path}.{key}" if path else key
            if key in result:
                raise DefinitionInvalid(
                    "is given twice in one JSON object; a reader keeps one of the two without a word, so "
                    "which was meant is unknown",
                    field=child,
                    hint="keep only the one you mean",
                )
            result[key] = _objects(value, child)
        return result
    if isinstance(node, list):
        return [_objects(value, f"{path}.{index}" if path else str(index)) for index, value in enumerate(node)]
    return node
