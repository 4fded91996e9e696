"""The registry's files in its git repository: read as committed, a label move written as one commit.

    from config_registry.layout import read_definition, read_labels, versions

    rows = versions(repo, "support_triage")                 # newest first: commit, author, time, message
    definition = read_definition(repo, "support_triage", rows[0]["commit"])
    read_labels(repo, "support_triage")                     # {"production": "<full sha>"}

Layout: ``teams/<name>/component.json`` and ``manifest.json``; ``labels/<name>.json`` (label -> version)
and ``labels/<name>.log.jsonl`` (every move: who, when, why). A version is the last commit that touched
``teams/<name>/``, so moving a label never changes a version. A file that does not read as a registration
wrote it (a hand edit) is :class:`RegistryCorrupt`, with how to repair it.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from config_registry.errors import DefinitionInvalid, RegistryCorrupt, UnknownTeam
from config_registry.fingerprint import fingerprints
from config_registry.gitrepo import GitRepo, default_actor
from config_registry.manifest import Manifest, validate_name
from config_registry.participants import kind_of
from config_registry.types import HistoryEntry, TeamDefinition

DEFINITION_FILES = ("component.json", "manifest.json")
_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256 repositories


def team_names(repo: GitRepo) -> list[str]:
    """Every registered team name, sorted: as committed, so a reader never sees a team a writer has
    put in the working tree but not yet committed."""
    return sorted(
        parts[1] for parts in (path.split("/") for path in repo.files("HEAD", "teams/"))
        if len(parts) == 3 and parts[2] == "manifest.json"
    )


def versions(repo: GitRepo, name: str, *, at: str = "HEAD") -> list[dict[str, str]]:
    """Every version of ``name`` as of the commit ``at``, newest first (``commit``, ``author``, ``time``,
    ``message``).

    Raises:
        UnknownTeam: No such team.
    """
    validate_name(name)
    rows = repo.log(f"teams/{name}/", at=at)
    if not rows:
        raise unknown_team(repo, name)
    return rows


def unknown_team(repo: GitRepo, name: str) -> UnknownTeam:
    """The refusal of a team name no team has. The name given is not repeated (a user's id or words typed in the
    wrong place land in it); the registry's own names are, as the fix: the nearest, or all of them."""
    known = team_names(repo)
    near = difflib.get_close_matches(name, known, n=3)
    listed = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
    return UnknownTeam(
        "no team of the name given is registered (not repeated here: it may be a user's words)",
        hint=(f"did you mean {' or '.join(near)}? " if near else "")
        + f"see 'teamstore registry list'; registered: {listed or 'none'}",
    )


def read_json(repo: GitRepo, version: str, relative: str, *, missing_ok: bool = False) -> Any:
    """The JSON file ``relative`` as committed at ``version`` (``None`` if missing and ``missing_ok``).

    Raises:
        RegistryCorrupt: The file is missing, or is not valid JSON.
    """
    return _loaded(repo.show(version, relative), version, relative, missing_ok=missing_ok)


def _loaded(text: str | None, version: str, relative: str, *, missing_ok: bool = False) -> Any:
    """``text``, the file ``relative`` at ``version`` (``None``: missing), as JSON; see :func:`read_json`."""
    if text is None:
        if missing_ok:
            return None
        raise RegistryCorrupt(
            f"{relative} is missing at version {version[:12]}",
            hint="restore it with git, or register the team again",
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RegistryCorrupt(
            f"{relative} at version {version[:12]} is not valid JSON: {exc.msg} at line {exc.lineno}",
            hint="fix or revert the file with git (git log -p -- " + relative + ")",
        ) from exc


def read_definition(repo: GitRepo, name: str, version: str) -> TeamDefinition:
    """The definition ``version`` of ``name`` holds, with its labels and commit.

    Raises:
        RegistryCorrupt: A file is missing, not valid JSON, or not a definition a registration stores.
    """
    texts = repo.show_many([(version, f"teams/{name}/{file}") for file in DEFINITION_FILES])
    # The version's own commit, if it is one of the team's: the last to touch the team as of it. Not every
    # version's (one walk of the whole history each time a worker resolves a team).
    definition = definition_of(name, version, texts, None)  # a file missing or out of shape is said first
    row = next((r for r in repo.log(f"teams/{name}/", at=version, limit=1) if r["commit"] == version), None)
    labels = sorted(k for k, v in read_labels(repo, name).items() if v == version)
    return replace(definition, labels=labels, **_commit(row))


def definition_of(
    name: str, version: str, texts: Sequence[str | None], row: Mapping[str, str] | None,
    labels: Mapping[str, str] | None = None,
) -> TeamDefinition:
    """The definition in ``texts`` (``component.json``'s and ``manifest.json``'s at ``version``, ``None`` where
    missing), with its commit's ``row`` from :func:`versions` and the team's ``labels`` as read.

    Raises:
        RegistryCorrupt: As :func:`read_definition`.
    """
    component, raw_manifest = (
        _loaded(text, version, f"teams/{name}/{file}") for text, file in zip(texts, DEFINITION_FILES, strict=True)
    )
    try:
        manifest = Manifest.model_validate(raw_manifest)
        kind = kind_of(component)
        prints = fingerprints(component, manifest.persist)
    except (ValidationError, DefinitionInvalid, TypeError, AttributeError) as exc:
        raise RegistryCorrupt(
            f"teams/{name}/ at version {version[:12]} is not a valid definition: {exc}",
            hint="revert the hand edit with git, or register the team again",
        ) from exc
    return TeamDefinition(
        name=name,
        version=version,
        component=component,
        manifest=manifest,
        fingerprints=prints,
        labels=sorted(k for k, v in (labels or {}).items() if v == version),
        kind=kind,
        **_commit(row),
    )


def _commit(row: Mapping[str, str] | None) -> dict[str, Any]:
    """A :class:`TeamDefinition`'s author, time and message from its commit's row (blank without one)."""
    return {"author": row["author"] if row else "", "time": datetime.fromisoformat(row["time"]) if row else None,
            "message": row["message"] if row else ""}


def read_labels(repo: GitRepo, name: str, *, at: str = "HEAD") -> dict[str, str]:
    """Label -> version of ``name``, as committed (a writer may have the file in the working tree before
    its commit lands) at the commit ``at``.

    Raises:
        RegistryCorrupt: The file is not an object of label -> full version sha.
    """
    return labels_of(name, repo.show(at, f"labels/{name}.json"))


def labels_of(name: str, text: str | None) -> dict[str, str]:
    """``labels/<name>.json``'s ``text`` as committed (``None``: there is none) as label -> version.

    Raises:
        RegistryCorrupt: As :func:`read_labels`.
    """
    labels = _loaded(text, "HEAD", f"labels/{name}.json", missing_ok=True)
    if labels is None:
        return {}
    if not isinstance(labels, dict) or not all(
        isinstance(v, str) and _FULL_SHA.fullmatch(v) for v in labels.values()
    ):
        raise RegistryCorrupt(
            f"labels/{name}.json is not an object of label -> full version sha", hint="revert it with git"
        )
    return {str(k): str(v) for k, v in labels.items()}


def latest_versions(repo: GitRepo) -> dict[str, dict[str, str]] | None:
    """Each team's latest version, its row as :func:`versions` gives it, from one walk of the history rather
    than one a team. ``None`` when the history holds a merge (a registry pulled into, say): which merge is a
    version is then git's history simplification's to say, so each team's own history is read instead."""
    if not repo.has_commits() or repo.git("rev-list", "--merges", "-1", "HEAD").strip():
        return None
    # -z ends every field and name in NUL; a commit's fields open with \x01, which no path under teams/ does.
    out = repo.git("log", "-z", "--no-renames", "--name-only", "--format=%x01%H%x00%an <%ae>%x00%aI%x00%s",
                   "--", "teams/")
    latest: dict[str, dict[str, str]] = {}
    fields, at = out.split("\x00"), 0
    while at + 3 < len(fields):
        row = dict(zip(("commit", "author", "time", "message"), fields[at:at + 4], strict=True))
        row["commit"], at = row["commit"].removeprefix("\x01"), at + 4
        while at < len(fields) and not fields[at].startswith("\x01"):
            parts = fields[at].lstrip("\n").split("/")
            if len(parts) > 2 and parts[0] == "teams":
                latest.setdefault(parts[1], row)
            at += 1
    return latest


def label_moves(repo: GitRepo, name: str) -> list[HistoryEntry]:
    """Every label move of ``name`` in the order it was logged (oldest first).

    Raises:
        RegistryCorrupt: A line of the move log is malformed.
    """
    text = repo.show("HEAD", f"labels/{name}.log.jsonl") or ""
    moves = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            r = json.loads(line)
            wrong = [k for k in ("who", "why", "label", "version") if not isinstance(r[k], str)]
            if wrong or not isinstance(r["previous"], str | None):
                raise TypeError(f"{(wrong or ['previous'])[0]!r} is not text")
            when = datetime.fromisoformat(r["when"])
            moves.append(
                HistoryEntry(
                    kind="label",
                    commit="",
                    author=r["who"],
                    time=when if when.tzinfo is not None else when.replace(tzinfo=UTC),
                    message=r["why"],
                    label=r["label"],
                    version=r["version"],
                    previous=r["previous"],
                )
            )
        except (ValueError, KeyError, TypeError) as exc:  # ValueError: bad JSON, or a time that is not ISO
            raise RegistryCorrupt(
                f"labels/{name}.log.jsonl line {number} is malformed: {exc}", hint="revert it with git"
            ) from exc
    return moves


def move_label(repo: GitRepo, name: str, version: str, label: str, reason: str, who: str | None) -> bool:
    """Point ``label`` at ``version`` and log the move, in one commit (under the write lock); ``False``,
    with nothing written, when it points there already."""
    labels = read_labels(repo, name)
    previous = labels.get(label)
    if previous == version:
        return False
    actor = who or default_actor()
    labels[label] = version
    record = {
        "label": label,
        "version": version,
        "previous": previous,
        "who": actor,
        "when": datetime.now(UTC).isoformat(),
        "why": reason,
    }
    paths = [f"labels/{name}.json", f"labels/{name}.log.jsonl"]
    try:
        repo.write_json(paths[0], labels)
        repo.append_line(paths[1], record)
        repo.commit(paths, f"label {name} {label} -> {version[:12]}: {reason}", who)
    except BaseException:
        repo.discard(paths)
        raise
    return True
