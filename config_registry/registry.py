"""The config registry: team definitions versioned in a git repository.

    from config_registry import Manifest, Registry

    registry = Registry("./registry", create=True)    # created only when asked; else RegistryNotFound
    version = registry.add("support_triage", team.dump_component(), Manifest(name="support_triage",
                           persist=["researcher"], context_bound=20), "first version", label="production")
    built = registry.build("support_triage@production")
    report = registry.check("support_triage", "production", version)

:class:`Registry` is the API: it checks, takes the write lock, and resolves ``name@label`` and
``name@version``. How its files lie in git (a version is the last commit that touched ``teams/<name>/``,
so moving a label never changes a version) and how they are read is :mod:`config_registry.layout`.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from autogen_core import ComponentModel

from config_registry.build import Transform, build_team
from config_registry.diff import CompatibilityReport, SemanticDiff, compatibility, semantic_diff
from config_registry.errors import DefinitionInvalid, RegistryCorrupt, UnknownVersion
from config_registry.factory import dump_factory
from config_registry.fingerprint import fingerprints
from config_registry.gitrepo import GitRepo
from config_registry.layout import (
    DEFINITION_FILES,
    definition_of,
    label_moves,
    labels_of,
    latest_versions,
    move_label,
    read_definition,
    read_labels,
    team_names,
    versions,
)
from config_registry.manifest import Manifest, shown, validate_name
from config_registry.participants import kind_of
from config_registry.registration import (
    TRACKED,
    check_actor,
    check_commit,
    check_definition,
    check_owner,
    check_shared_memory,
    commit_definition,
    declared_facts,
)
from config_registry.secrets import check_free_text
from config_registry.types import BuiltTeam, HistoryEntry, TeamDefinition, TeamSummary

_T = TypeVar("_T")

DEFAULT_LABEL = "production"


class Registry:
    """A git-backed registry of team definitions.

    Args:
        path: The repository folder.
        lock_timeout: Seconds a writer waits for another writer before :class:`RegistryConflict`.
        create: Make the repository (``git init`` and a first commit) if ``path`` is absent or an empty
            folder. Off, opening never makes one: a reader (a worker) given a mistyped path is told so,
            rather than starting on an empty registry it made there.

    Raises:
        RegistryCorrupt: ``path`` exists and is not a git repository, or has uncommitted edits under
            ``teams/`` or ``labels/``.
        RegistryNotFound: ``create`` is off and no registry is at ``path``; or, ``create`` on or off, ``path``
            is another project's git repository (no registry README, no ``teams/`` or ``labels/``).
    """

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout: float = 10.0, create: bool = False) -> None:
        self.repo = GitRepo.open_or_init(Path(path), create=create)
        self.path = self.repo.path
        self.lock_timeout = lock_timeout
        self._declared: dict[str, tuple[str, frozenset[str]]] = {}  # scope -> (the HEAD read, its facts)
        # Under the write lock: another process's registration writes files just before committing
        # them, and must not read as a hand edit. A read-only checkout (a worker's volume) has no
        # writer in it to wait for, and no lock file can be made there.
        if not self.repo.writable():
            self.repo.ensure_clean(TRACKED)
            return
        with self.repo.lock(lock_timeout):
            self.repo.ensure_clean(TRACKED)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str], *, lock_timeout: float = 10.0, create: bool = False) -> Registry:
        """Same as ``Registry(path)``."""
        return cls(path, lock_timeout=lock_timeout, create=create)

    # --- writing -------------------------------------------------------------------------------------------
    def add(
        self,
        name: str,
        component: Mapping[str, Any] | ComponentModel,
        manifest: Manifest,
        message: str,
        label: str | None = None,
        author: str | None = None,
        *,
        allow_incompatible: bool = False,
    ) -> str:
        """Validate and register a definition; one commit.

        Args:
            name: The team's registry name (must equal ``manifest.name``).
            component: The team (or agent) itself, ``team.dump_component()`` or its JSON.
            manifest: What the definition declares (persisted participants, allow-lists, secrets ...).
            message: The commit message: why this version exists.
            label: Also point this label at the new version.
            author: ``"Name <email>"``; defaults to ``GIT_AUTHOR_*``, else the login name (as a label move's).
            allow_incompatible: Move ``label`` even when the sessions saved under the version it points at
                would not resume under the new one (:meth:`check`); they then start fresh.

        Returns:
            The version (full commit sha). Registering an unchanged definition returns the current version.

        Raises:
            DefinitionInvalid: A check failed; nothing was written. Among them: the team is registered
                already with another owner, or ``label`` would move across an incompatible change.
            RegistryConflict: Another writer held the lock too long.
            RegistryCorrupt: The repository has uncommitted edits or lock files a killed git left
                (``teamstore registry recover``).
        """
        if label is not None:
            validate_name(label, what="label", field="label")
        check_commit(message, author)
        stored = check_definition(name, component, manifest)
        with self.repo.lock(self.lock_timeout):
            self._ready_to_write()
            check_owner(self.repo, name, manifest)
            if label is not None:
                # Labels it cannot read refuse the label before the version is committed.
                labels = read_labels(self.repo, name)
                if label in labels and not allow_incompatible:
                    self._check_label_move(name, label, labels[label], stored, manifest)
            check_shared_memory(self.repo, name, manifest)  # under the lock: another team may be registering
            version = self._commit_definition(name, stored, manifest, message, author)
            if label is not None:
                move_label(self.repo, name, version, label, f"registered with label {label}: {message}", author)
        return version

    def _check_label_move(
        self, name: str, label: str, current: str, stored: dict[str, Any], manifest: Manifest
    ) -> None:
        """Refuse to move ``label`` from ``current`` to the definition being registered when sessions saved under
        ``current`` would not resume under it (what ``registry check`` reports): every session of the label's
        users would start fresh, its state in quarantine."""
        now = read_definition(self.repo, name, current)  # as committed, under the write lock
        new = TeamDefinition(name=name, version="", component=stored, manifest=manifest,
                             fingerprints=fingerprints(stored, manifest.persist), kind=kind_of(stored))
        report = _reading(now, new, lambda: compatibility(now, new))
        if report.compatible:
            return
        raise DefinitionInvalid(
            f"label {label!r} points at version {current[:12]}, and the sessions saved under it would not resume "
            f"under this definition: {'; '.join(report.reasons)}. Moving the label would start every one of them "
            "afresh (their state kept in quarantine)",
            field="label",
            hint=f"register it without --label {label} (or under another label) and run `teamstore registry check "
            f"{name} --from {label} --to <version>`; to move {label} anyway, pass --allow-incompatible",
        )

    def _ready_to_write(self) -> None:
        """Under the write lock: what an interrupted write left (uncommitted files, git's lock files) or a
        detached HEAD refuses the write, rather than being committed with it or failing halfway."""
        self.repo.ensure_clean(TRACKED)
        self.repo.ensure_no_git_locks()
        self.repo.ensure_on_branch()

    def _commit_definition(
        self, name: str, stored: dict[str, Any], manifest: Manifest, message: str, author: str | None
    ) -> str:
        try:
            sha = commit_definition(self.repo, name, stored, manifest, message, author)
        except BaseException:
            self.repo.discard([f"teams/{name}"])
            raise
        return sha or self._latest(name)

    def add_from_factory(
        self,
        factory: str,
        manifest: Manifest,
        message: str,
        label: str | None = None,
        author: str | None = None,
        *,
        allow_incompatible: bool = False,
    ) -> str:
        """Build a team with ``module:function`` and register its dump.

        Args:
            factory: ``"package.module:function"``; the function takes no arguments and returns a team or agent.
            manifest: As for :meth:`add`; its ``name`` is the team's name.
            message: The commit message.
            label: Also point this label at the new version.
            author: As for :meth:`add`.
            allow_incompatible: As for :meth:`add`.

        Returns:
            The version.

        Raises:
            FactoryInvalid: The factory cannot be imported, raises, or returns something that is not a team.
            DefinitionInvalid: As for :meth:`add`.
        """
        return self.add(manifest.name, dump_factory(factory), manifest, message, label=label, author=author,
                        allow_incompatible=allow_incompatible)

    def label(
        self, name: str, version_or_label: str, label: str, reason: str, who: str | None = None
    ) -> bool:
        """Point ``label`` at a version of ``name`` (rollback = move it back); the move is recorded.

        Args:
            name: The team.
            version_or_label: A version (sha or unique prefix of at least 7) or another label.
            label: The label to set or move, e.g. ``production``.
            reason: Why; kept in the append-only move log.
            who: Who moved it; defaults to ``GIT_AUTHOR_NAME`` or the login name.

        Returns:
            Whether the label moved: one that points at the version already stays, and nothing is recorded.

        Raises:
            UnknownTeam, UnknownVersion: The team or version does not exist.
            DefinitionInvalid: The label name is not allowed or the reason is empty, or the version gives a
                memory fact another type than a team sharing its memory scope does.
        """
        validate_name(label, what="label", field="label")
        if not reason.strip():
            raise DefinitionInvalid(
                "a label move needs a reason", field="reason", hint="say why, e.g. --reason 'rollback'"
            )
        check_free_text("reason", reason)
        check_actor("who", who)
        with self.repo.lock(self.lock_timeout):
            self._ready_to_write()
            version = self._resolve_version(name, version_or_label, alone=True)
            # A version whose memory facts another team now gives other types in a scope they share (a
            # rollback to it, say) is refused as registering it would be.
            check_shared_memory(self.repo, name, self._read(name, version).manifest)
            return move_label(self.repo, name, version, label, reason, who)

    # --- reading -------------------------------------------------------------------------------------------
    def names(self) -> builtins.list[str]:
        """Every registered team name, sorted: as committed, so a reader never sees a team a writer has
        put in the working tree but not yet committed."""
        return team_names(self.repo)

    def list(self) -> builtins.list[TeamSummary]:
        """A summary of every team: latest version, labels, owner, persisted participants."""
        names, latest = self.names(), latest_versions(self.repo) or {}
        # Every team's files in one read, and its latest version from one walk of the history: a process a
        # file and a walk a team made a registry of 300 teams take minutes to list.
        texts = iter(self.repo.show_many([
            (row["commit"], f"teams/{name}/{file}") for name in names if (row := latest.get(name))
            for file in DEFINITION_FILES
        ]))
        labels = self.repo.show_many([("HEAD", f"labels/{name}.json") for name in names])
        rows = []
        for name, labelled in zip(names, labels, strict=True):
            row = latest.get(name)
            if row is None:  # a history with merges: the team's own
                definition = self.resolve(f"{name}@{self._latest(name)}")
                team_labels = read_labels(self.repo, name)
            else:
                team_labels = labels_of(name, labelled)
                definition = definition_of(name, row["commit"], [next(texts), next(texts)], row, team_labels)
            rows.append(
                TeamSummary(
                    name=name,
                    version=definition.version,
                    kind=definition.kind,
                    description=definition.manifest.description,
                    owner=definition.manifest.owner,
                    persisted=list(definition.manifest.persist),
                    labels=team_labels,
                    time=definition.time,
                )
            )
        return rows

    def resolve(self, ref: str) -> TeamDefinition:
        """The definition ``ref`` names: ``name``, ``name@<version>`` or ``name@<label>``.

        A bare name means label ``production`` if set, else the latest version.

        Raises:
            UnknownTeam, UnknownVersion: Nothing matches.
            RegistryCorrupt: A stored file is missing or not valid JSON.
            DefinitionInvalid: ``ref`` is not a string.
        """
        version = self.version_of(ref)  # checks ref first
        return self._read(ref.partition("@")[0], version)

    def memory_facts(self, scope: str) -> frozenset[str]:
        """The memory facts teams declare under ``scope`` in their latest and labelled versions, memory switched
        on or off: what a memory writer keeps of the scope's facts. Read again once the registry moved on.

        Raises:
            RegistryError: git failed.
        """
        head = self.repo.git("rev-parse", "HEAD") if self.repo.has_commits() else ""
        cached = self._declared.get(scope)
        if cached is None or cached[0] != head:
            cached = self._declared[scope] = (head, declared_facts(self.repo, scope))
        return cached[1]

    def version_of(self, ref: str) -> str:
        """The version ``ref`` resolves to, without reading the definition: what a cache of definitions
        asks to learn whether a label still points where it did (a version's definition never changes).

        Raises:
            UnknownTeam, UnknownVersion, DefinitionInvalid: As :meth:`resolve`.
        """
        if not isinstance(ref, str):
            raise DefinitionInvalid(f"a team reference is a string (NAME, NAME@LABEL or NAME@VERSION), "
                                    f"not {type(ref).__name__}", field="team",
                                    hint="pass a registered team's name, e.g. team=\"support_triage\" or "
                                    "team=\"support_triage@production\" (`teamstore registry list` lists them)")
        name, at, selector = ref.partition("@")
        if at and not selector:
            validate_name(name)
            raise UnknownVersion(
                f"{ref!r} names no version or label after '@'",
                hint=f"use {name!r} (label production, else the latest version), {name}@<label> or {name}@<version>",
            )
        return self._resolve_version(name, selector or None)

    def history(self, name: str) -> builtins.list[HistoryEntry]:
        """Every version of ``name`` and every label move, newest first.

        Raises:
            UnknownTeam: No such team.
        """
        entries = [
            HistoryEntry(
                kind="version",
                commit=row["commit"],
                author=row["author"],
                version=row["commit"],
                time=datetime.fromisoformat(row["time"]),
                message=row["message"],
            )
            for row in versions(self.repo, name)
        ]
        moves = label_moves(self.repo, name)
        return self._newest_first(name, entries, moves)

    def _newest_first(
        self, name: str, versions: builtins.list[HistoryEntry], moves: builtins.list[HistoryEntry]
    ) -> builtins.list[HistoryEntry]:
        """Versions and label moves in the order their commits were made: git keeps a version's time to the
        second, so a version made in the second after a label move was listed before it. Each move is the one
        commit that appended its line to the log; a log edited by hand falls back on the recorded times."""
        commits = [row["commit"] for row in self.repo.log(f"teams/{name}/", f"labels/{name}.log.jsonl")]
        made = {entry.commit for entry in versions}
        moved = [commit for commit in reversed(commits) if commit not in made]  # oldest first, as the log's lines
        if len(moved) != len(moves):
            return sorted([*versions, *moves], key=lambda e: e.time, reverse=True)
        rank = {commit: index for index, commit in enumerate(commits)}
        ranked = [(rank[entry.commit], entry) for entry in versions]
        ranked += [(rank[commit], entry) for commit, entry in zip(moved, moves, strict=True)]
        return [entry for _rank, entry in sorted(ranked, key=lambda pair: pair[0])]

    def diff(self, name: str, a: str, b: str) -> SemanticDiff:
        """The semantic difference between two versions or labels of ``name``.

        Raises:
            RegistryCorrupt: A version holds JSON no registration would have stored (a hand edit).
        """
        x, y = self._given(name, a), self._given(name, b)
        return _reading(x, y, lambda: semantic_diff(x, y))

    def check(self, name: str, from_ref: str, to_ref: str) -> CompatibilityReport:
        """Whether resume state saved under ``from_ref`` loads under ``to_ref``.

        Raises:
            RegistryCorrupt: A version holds JSON no registration would have stored (a hand edit).
        """
        x, y = self._given(name, from_ref), self._given(name, to_ref)
        return _reading(x, y, lambda: compatibility(x, y))

    def build(
        self, ref: str, transform: Transform | None = None, env: Mapping[str, str] | None = None
    ) -> BuiltTeam:
        """Build a new team object for ``ref`` with secrets resolved; see :func:`config_registry.build.build_team`."""
        return build_team(self.resolve(ref), transform=transform, env=env)

    # --- internals ----------------------------------------------------------------------------------------
    def _latest(self, name: str) -> str:
        return versions(self.repo, name)[0]["commit"]

    def _resolve_version(self, name: str, selector: str | None, *, alone: bool = False) -> str:
        """The version ``selector`` names. ``alone``: it was given on its own (``registry label NAME VERSION``),
        not after '@' in a team reference (``--team "$INPUT"``, which a user's words may reach)."""
        # Both as of one commit: a registration committing its version and moving a label between the two
        # reads left a worker with a label pointing at a version it had not seen (RegistryCorrupt).
        head = self.repo.head()
        made = [row["commit"] for row in versions(self.repo, name, at=head)]
        labels = read_labels(self.repo, name, at=head)
        if selector is None:
            return self._labelled(name, DEFAULT_LABEL, labels, made) if DEFAULT_LABEL in labels else made[0]
        if selector in labels:
            return self._labelled(name, selector, labels, made)
        matches = [v for v in made if len(selector) >= 7 and v.startswith(selector.lower())]
        if len(matches) == 1:
            return matches[0]
        raise _unknown(name, selector if alone else None, ambiguous=bool(matches), labels=labels)

    @staticmethod
    def _labelled(name: str, label: str, labels: dict[str, str], versions: builtins.list[str]) -> str:
        """The version ``label`` points at, which must be a version of ``name`` (a hand edit may have
        pointed it at another team's commit, or at a commit that is not in the history at all)."""
        version = labels[label]
        if version not in versions:
            raise RegistryCorrupt(
                f"label {label!r} of team {name!r} points at {version[:12]}, which is not a version of the team",
                hint=f"move it to a version: teamstore registry label {name} <version> {label} --reason 'repair'",
            )
        return version

    def _read(self, name: str, version: str) -> TeamDefinition:
        return read_definition(self.repo, name, version)

    def _given(self, name: str, selector: str) -> TeamDefinition:
        """The definition of a version or label given on its own (an argument of ``diff`` or ``check``): a string
        (``None`` would name the default label's version, comparing it with itself unasked)."""
        if not isinstance(selector, str):
            raise UnknownVersion(f"a version or label of team {name!r} is text; got {type(selector).__name__}",
                                 hint=f"give a label or 7+ hex digits of a version (`teamstore registry history {name}`)")
        return self._read(name, self._resolve_version(name, selector, alone=True))


def _unknown(name: str, given: str | None, *, ambiguous: bool, labels: dict[str, str]) -> UnknownVersion:
    """The error of a selector that names no version or label of ``name``: what was typed, when it was given on its
    own (``given``); what follows '@' otherwise, never repeated (a user's words may have reached a team reference)."""
    what = f"{shown(given)} is not a label or version" if given is not None else (
        "what follows '@' is not a label or a unique version (7+ hex digits)")
    why = " (several versions start with it: give more of its digits)" if ambiguous else ""
    return UnknownVersion(
        f"{what} of team {name!r}{why}",
        hint=f"`teamstore registry history {name}` lists its versions (give 7 or more hex digits of one); "
        f"labels: {', '.join(sorted(labels)) or 'none'}",
    )


def _reading(a: TeamDefinition, b: TeamDefinition, compare: Callable[[], _T]) -> _T:
    """``compare()``, with a shape that no registration stores (``"tools": [1]``) reported as corrupt."""
    try:
        return compare()
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        raise RegistryCorrupt(
            f"{a.name} at {a.version[:12]} or {b.version[:12]} holds JSON that is not a registered definition: "
            f"{type(exc).__name__}: {exc}",
            hint="revert the hand edit with git, or register the team again",
        ) from exc
