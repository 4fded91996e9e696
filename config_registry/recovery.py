"""Getting a registry back from an interrupted write, never silently.

A registration writes a definition's two files, then commits them; a label move writes the label file and
appends to its log, then commits. A writer killed in between leaves those files uncommitted (one of them
perhaps half-written), and a git command killed mid-write leaves its lock files in ``.git``. Every later
registration is then refused (``RegistryCorrupt``) until the checkout is recovered:

    from config_registry.gitrepo import GitRepo
    from config_registry.recovery import commit_left, discard_left, inspect

    repo = GitRepo.open_or_init(path, create=False)
    left = inspect(repo, lock_timeout=10)        # git's lock files, the files left, whether each definition passes
    discard_left(repo, lock_timeout=10)          # back to the last commit
    commit_left(repo, "recover v2", None, 10)    # or commit the definitions left, if each passes every check

Each step holds the registry's write lock, so a registration still running is waited for, never taken for
an interrupted one. Only a team definition (both of its files, added or changed) can be committed: a label
move left uncommitted is discarded and made again, since its log line may be half-written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from config_registry.errors import DefinitionInvalid, RegistryCorrupt, validation_message
from config_registry.gitrepo import GitRepo
from config_registry.layout import DEFINITION_FILES
from config_registry.manifest import Manifest
from config_registry.registration import (
    TRACKED,
    check_commit,
    check_definition,
    check_owner,
    check_shared_memory,
    commit_definition,
)


@dataclass(frozen=True)
class Definition:
    """A team definition left uncommitted: whether it passes every check a registration applies."""

    team: str
    problem: str | None  # why it cannot be committed; None when it passes
    stored: dict[str, Any] = field(default_factory=dict, repr=False)
    manifest: Manifest | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Left:
    """What interrupted writes left in a registry checkout."""

    locks: list[str]  # git's lock files, relative to .git
    files: list[tuple[str, str]]  # (git's two-letter status, path) under teams/ and labels/
    definitions: list[Definition]
    not_committable: list[str]  # files only discarding can deal with, and why

    @property
    def clean(self) -> bool:
        """True when nothing is left: every registration may go ahead."""
        return not self.locks and not self.files


def inspect(repo: GitRepo, lock_timeout: float) -> Left:
    """What interrupted writes left, changing nothing.

    Raises:
        RegistryConflict: A registration held the write lock for longer than ``lock_timeout``.
    """
    with repo.lock(lock_timeout):
        return _left(repo)


def discard_left(repo: GitRepo, lock_timeout: float) -> Left:
    """Remove git's lock files and put ``teams/`` and ``labels/`` back as last committed; returns what was
    discarded.

    Raises:
        RegistryCorrupt: Something is still left afterwards (the message names it).
        RegistryConflict: A registration held the write lock for longer than ``lock_timeout``.
    """
    with repo.lock(lock_timeout):
        left = _left(repo)
        _remove_locks(repo, left.locks)
        # One folder at a time: git refuses a whole command when one of its paths matches nothing.
        for folder in sorted({path.split("/")[0] for _status, path in left.files}):
            repo.discard([folder])
        _ensure_recovered(repo)
    return left


def commit_left(
    repo: GitRepo, message: str, author: str | None, lock_timeout: float
) -> tuple[Left, dict[str, str | None]]:
    """Commit each definition left, one commit each, if every one passes every check a registration
    applies and nothing else is left; otherwise change nothing.

    Returns:
        What was left, and team -> new version (``None`` when the files left were as committed already).

    Raises:
        DefinitionInvalid: The message or author is refused, or a definition fails a check (naming it).
        RegistryCorrupt: Files only discarding can deal with are left (a label move, a deletion, a stray file).
        RegistryConflict: A registration held the write lock for longer than ``lock_timeout``.
    """
    check_commit(message, author)
    with repo.lock(lock_timeout):
        left = _left(repo)
        _ensure_committable(left)
        repo.ensure_on_branch()
        _remove_locks(repo, left.locks)
        versions = {}
        for definition in left.definitions:
            assert definition.manifest is not None  # it passed
            versions[definition.team] = commit_definition(
                repo, definition.team, dict(definition.stored), definition.manifest, message, author
            )
        _ensure_recovered(repo)
    return left, versions


def _left(repo: GitRepo) -> Left:
    files = repo.changes(TRACKED)
    teams: dict[str, list[str]] = {}
    not_committable = []
    for status, path in files:
        parts = path.split("/")
        if parts[0] == "labels":
            not_committable.append(f"{path}: a label move is made again, not recovered (its log line may be cut short)")
        elif "D" in status:
            not_committable.append(f"{path}: deleted, and no registration deletes a file")
        elif len(parts) != 3 or parts[2] not in DEFINITION_FILES:
            not_committable.append(f"{path}: not a file a registration writes")
        else:
            teams.setdefault(parts[1], []).append(parts[2])
    return Left(repo.git_locks(), files, [_check(repo, team) for team in sorted(teams)], not_committable)


def _check(repo: GitRepo, team: str) -> Definition:
    """The definition as the working tree holds it, through every check a registration applies."""
    try:
        component, raw_manifest = (_read(repo, f"teams/{team}", name) for name in DEFINITION_FILES)
        try:
            manifest = Manifest.model_validate(raw_manifest)
        except ValidationError as exc:
            error = exc.errors()[0]
            raise DefinitionInvalid(
                validation_message(error), field="manifest." + ".".join(str(p) for p in error["loc"])
            ) from exc
        stored = check_definition(team, component, manifest)
        check_owner(repo, team, manifest)
        check_shared_memory(repo, team, manifest)
    except DefinitionInvalid as exc:
        return Definition(team, exc.message)
    return Definition(team, None, stored, manifest)


def _read(repo: GitRepo, folder: str, name: str) -> Any:
    try:
        return json.loads((repo.path / folder / name).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DefinitionInvalid(f"{name} is missing (the writer stopped before writing it)") from None
    except (OSError, ValueError) as exc:  # ValueError: not JSON (cut short, say) or not UTF-8
        raise DefinitionInvalid(f"{name} is not valid JSON (cut short?): {exc}") from None


def _ensure_committable(left: Left) -> None:
    refused = [f"teams/{d.team}/: {d.problem}" for d in left.definitions if d.problem is not None]
    if refused:
        raise DefinitionInvalid(
            "nothing was committed: " + "; ".join(refused),
            hint="fix the files by hand and run --commit again, or discard them with --discard",
        )
    if left.not_committable:
        raise RegistryCorrupt(
            "nothing was committed: " + "; ".join(left.not_committable),
            hint="discard them with `teamstore registry recover --discard`, then register or move the label again",
        )
    if left.clean:
        raise RegistryCorrupt("no definition is left to commit: the registry has nothing to recover",
                              hint="nothing needs recovering: register or move the label as usual")
    if not left.definitions:
        raise RegistryCorrupt(
            f"no definition is left to commit (only git's lock files: {', '.join(left.locks)})",
            hint="`teamstore registry recover --discard` removes lock files left by a killed git command",
        )


def _remove_locks(repo: GitRepo, locks: list[str]) -> None:
    git_dir = repo.git_dir()
    for lock in locks:
        (git_dir / lock).unlink(missing_ok=True)


def _ensure_recovered(repo: GitRepo) -> None:
    left = repo.changes(TRACKED)
    if left or repo.git_locks():
        raise RegistryCorrupt(
            f"registry {repo.path} still has uncommitted files or git lock files after recovering: "
            f"{', '.join(path for _status, path in left[:5]) or ', '.join(repo.git_locks())}",
            hint="look at it with git (git -C <registry> status) and repair it by hand",
        )
