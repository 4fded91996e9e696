"""The git repository under the registry: plain files, one commit per change, one writer at a time.

    from config_registry.gitrepo import GitRepo

    repo = GitRepo.open_or_init(path)
    with repo.lock(timeout=10):
        repo.ensure_clean(["teams", "labels"])
        repo.write_json("teams/support_triage/manifest.json", {"name": "support_triage"})
        sha = repo.commit(["teams/support_triage"], "register support_triage", author=None)

Everything goes through the ``git`` command line (:mod:`config_registry.gitcli` runs it and reads what it
prints), so the repository is an ordinary one that people can clone, review and push.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shlex
import stat
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from config_registry import gitcli
from config_registry.errors import (
    RegistryConflict,
    RegistryCorrupt,
    RegistryError,
    RegistryNotFound,
    folder_failure,
)
from config_registry.folders import SHARED, make_folder
from config_registry.gitcli import DEFAULT_NAME, OTHERS_WRITE

logger = logging.getLogger(__name__)

LOCK_FILE = "teamstore-registry.lock"
RECOVER_HINT = (
    "see what is left with `teamstore registry recover`; then `teamstore registry recover --discard` goes back "
    "to the last commit, or `teamstore registry recover --commit -m WHY` commits the definitions left if each "
    "passes every check a registration applies (docs/registry.md)"
)
FILE_MODE = 0o644
"""The mode of the files the registry writes (less the umask); its folders are :data:`SHARED` (0755)."""
_checked: set[Path] = set()  # registries whose modes this process has checked (and warned of, once)
_README = """# teamstore registry

Team definitions managed by `teamstore registry`. One folder per team under `teams/`
(`component.json`, `manifest.json`); labels under `labels/` (`<team>.json` and an append-only
`<team>.log.jsonl`). Every change is a commit; edit through the CLI, not by hand.
"""


def dump_json(data: Any) -> str:
    """Stable, diff-friendly JSON: sorted keys, two-space indent, trailing newline."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


class GitRepo:
    """A registry repository driven through the ``git`` CLI.

    Args:
        path: The repository's top-level folder.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def open_or_init(cls, path: Path, *, create: bool = True) -> GitRepo:
        """Open the repository at ``path``, creating it (with a first commit) if absent or empty.

        Args:
            path: The repository's folder.
            create: Off for a reader, which must not leave a repository (or a folder) behind on a path
                nothing was ever registered at: a mistyped one, say.

        Raises:
            RegistryCorrupt: ``path`` is a file, or a non-empty folder that is not a git repository's top level.
            RegistryNotFound: ``create`` is off and ``path`` is absent or an empty folder; or ``path`` is
                another git repository, one that is no registry (a project's checkout).
        """
        path = Path(path).expanduser().absolute()
        if path.exists() and not path.is_dir():
            raise RegistryCorrupt(
                f"registry path {path} is a file", hint="point TEAMSTORE_REGISTRY_PATH at a folder"
            )
        if not create and not path.exists():
            raise _not_found(path)
        repo = cls(path)
        repo._make_folder()
        # Several processes may open a new path at once: one creates the repository while the others wait
        # (unlocked, a second 'git init' or first commit raced the first, or saw a half-made repository).
        with repo._folder_lock():
            if not any(path.iterdir()):
                if not create:
                    raise _not_found(path)
                repo._init()
            elif not repo._is_toplevel():
                raise RegistryCorrupt(
                    f"registry path {path} exists but is not a git repository",
                    hint="point TEAMSTORE_REGISTRY_PATH at an empty folder, a new path or an existing registry",
                )
            elif not repo._is_registry():
                raise _not_a_registry(path)
        repo._check_modes()
        return repo

    @contextlib.contextmanager
    def _folder_lock(self) -> Iterator[None]:
        """Hold an exclusive ``flock`` on the registry folder itself (there is no ``.git`` to lock yet)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:  # no permission to read the folder
            raise RegistryError(
                f"cannot open the registry folder {str(self.path)!r}: {exc.strerror or type(exc).__name__}",
                hint="set TEAMSTORE_HOME (or TEAMSTORE_REGISTRY_PATH) to a folder this process may read and write",
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _is_toplevel(self) -> bool:
        result = gitcli.run(["git", "-C", str(self.path), "rev-parse", "--show-toplevel"])
        if "dubious ownership" in result.stderr:
            # A registry checked out by another user (a sync job, a deploy user): git refuses to read it.
            # Trusting it here would bypass git's guard against a stranger's repository config running commands.
            raise RegistryError(
                f"git refuses to read the registry {self.path}: it is owned by another user than this process",
                hint=f"run as the registry's owner, or trust it for this user: "
                f"git config --global --add safe.directory {self.path}",
            )
        return result.returncode == 0 and Path(result.stdout.strip()).resolve() == self.path.resolve()

    def _is_registry(self) -> bool:
        """A repository this module made (the README it commits first, under :data:`_README`'s title), or one
        that holds teams or labels; one with nothing in it at all is an empty registry. Any other repository
        is someone's project: registering there would commit ``teams/`` onto its branch."""
        if not self.has_commits():
            return set(self.dirty(["."])) <= {"README.md"}  # a registry stopped before its first commit
        readme = self.show("HEAD", "README.md") or ""
        return readme.startswith(_README.partition("\n")[0] + "\n") or bool(
            self.files("HEAD", "teams") or self.files("HEAD", "labels")
        )

    def _check_modes(self) -> None:
        """Warn, once a process, of a registry that others than its owner may write: writing to it is running
        code on every worker that builds its teams. A repository git shares with a group on purpose
        (``core.sharedRepository``) is warned of only where everyone may write."""
        if self.path in _checked:
            return
        _checked.add(self.path)
        loose = 0o002 if self._shared_with_group() else OTHERS_WRITE
        found = [(path, mode) for path, mode in _modes(self.path) if mode & loose]
        if found:
            named = ", ".join(str(path.relative_to(self.path)) for path, _mode in found[:3])
            logger.warning(
                "%s may write to the registry %s (%s%s); write access to the registry is code execution on the "
                "workers (docs/operations.md); fix: chmod -R go-w %s",
                "everyone" if any(mode & 0o002 for _path, mode in found) else "its group", self.path, named,
                f" and {len(found) - 3} more" if len(found) > 3 else "", shlex.quote(str(self.path)),
            )

    def _shared_with_group(self) -> bool:
        shared = self.git("config", "--get", "core.sharedRepository", check=False).strip().lower()
        if shared in ("", "umask", "false", "no", "off", "0"):
            return False
        if shared.startswith("0") and set(shared) <= set("01234567"):  # a mode: does it let the group write?
            return bool(int(shared, 8) & 0o020)
        return True  # group, all, world, everybody, true, 1, 2

    def _make_folder(self) -> None:
        try:
            make_folder(self.path, SHARED)  # not writable by others; a home made on the way is private
        except OSError as exc:  # a file on the way (TEAMSTORE_HOME itself, say), no permission, a read-only disk
            raise RegistryError(
                f"cannot make the registry folder {str(self.path)!r}: {folder_failure(exc)}",
                hint="set TEAMSTORE_HOME (or TEAMSTORE_REGISTRY_PATH) to a folder this process may write",
            ) from None

    def _init(self) -> None:
        self.git("init", "-q")
        self.git("symbolic-ref", "HEAD", "refs/heads/main")
        with self._open("README.md", os.O_TRUNC) as handle:
            handle.write(_README)
        self.commit(["README.md"], "Create the teamstore registry")

    def git(self, *args: str, check: bool = True) -> str:
        """Run git in the repository and return stdout (:func:`gitcli.git`).

        Raises:
            RegistryError: git failed (its stderr is in the message).
        """
        return gitcli.git(self.path, *args, check=check)

    def changes(self, paths: Sequence[str]) -> list[tuple[str, str]]:
        """Uncommitted (staged, unstaged or untracked) files under ``paths``: (git's two-letter status, path)."""
        return gitcli.changes(self.path, paths)

    def dirty(self, paths: Sequence[str]) -> list[str]:
        """Uncommitted (staged, unstaged or untracked) files under ``paths``."""
        return [path for _status, path in self.changes(paths)]

    def ensure_clean(self, paths: Sequence[str]) -> None:
        """Refuse to work on a repository with uncommitted edits under ``paths``.

        Raises:
            RegistryCorrupt: Naming the edited files.
        """
        edited = self.dirty(paths)
        if edited:
            raise RegistryCorrupt(
                f"registry {self.path} has uncommitted edits (a registration or label move stopped before its "
                f"commit, or a hand edit): {', '.join(edited[:5])}",
                hint=RECOVER_HINT,
            )

    def git_locks(self) -> list[str]:
        """Lock files git left in ``.git`` (relative to it), other than the registry's own write lock.

        Git makes one for each file it rewrites (the index, a branch) and renames it into place when done: one
        that is left behind was left by a git command that was killed. Only meaningful under :meth:`lock`,
        where no registry writer is running git.
        """
        git_dir = self.git_dir()
        found = [p for p in git_dir.glob("*.lock") if p.name != LOCK_FILE]
        found += (git_dir / "refs").rglob("*.lock")
        return sorted(str(p.relative_to(git_dir)) for p in found)

    def ensure_no_git_locks(self) -> None:
        """Refuse to write while git's lock files from a killed git command are left (git would refuse it
        halfway, with the registry's files written and not committed).

        Raises:
            RegistryCorrupt: Naming the lock files.
        """
        locks = self.git_locks()
        if locks:
            raise RegistryCorrupt(
                f"registry {self.path} has lock files a killed git command left in .git: {', '.join(locks[:5])}",
                hint=RECOVER_HINT,
            )

    def ensure_on_branch(self) -> None:
        """Refuse to commit on a detached HEAD: the commit would belong to no branch, and the next
        ``git checkout`` (or a clone, or a push) would leave that version and its label moves behind.

        Raises:
            RegistryCorrupt: HEAD is detached (a checkout of a commit, a rebase in progress).
        """
        if self.has_commits() and not self.git("symbolic-ref", "-q", "HEAD", check=False).strip():
            where, branch = shlex.quote(str(self.path)), self.detached_from()
            checkout = (
                f"git -C {where} checkout {shlex.quote(branch)}" if branch
                else f"git -C {where} checkout BRANCH, one that `git -C {where} branch` lists"
            )
            raise RegistryCorrupt(
                f"registry {self.path} has a detached HEAD; a commit made now would be on no branch",
                hint=f"check out the registry's branch ({checkout}), finishing or aborting any rebase first",
            )

    def detached_from(self) -> str | None:
        """The branch a detached HEAD belongs to: the one a rebase in progress rewrites, else the branch last
        checked out, else the only branch (or the only one holding HEAD); ``None`` when none is one."""
        git_dir = self.git_dir()
        for state in ("rebase-merge", "rebase-apply"):
            rebasing = git_dir / state / "head-name"
            if rebasing.is_file() and rebasing.read_text().startswith("refs/heads/"):
                return rebasing.read_text().strip().removeprefix("refs/heads/")
        branches = self._branches()
        previous = self.git("rev-parse", "--symbolic-full-name", "@{-1}", check=False).strip()
        if previous.startswith("refs/heads/") and previous.removeprefix("refs/heads/") in branches:
            return previous.removeprefix("refs/heads/")
        holding = self._branches("--contains", "HEAD")
        found = branches if len(branches) == 1 else holding
        return found[0] if len(found) == 1 else None

    def _branches(self, *where: str) -> list[str]:
        refs = self.git("for-each-ref", "--format=%(refname)", *where, "refs/heads/", check=False)
        return [ref.removeprefix("refs/heads/") for ref in refs.splitlines()]

    @contextlib.contextmanager
    def lock(self, timeout: float) -> Iterator[None]:
        """Hold the registry's exclusive write lock (``flock`` on a file inside ``.git``).

        Raises:
            RegistryConflict: Another writer held it for longer than ``timeout`` seconds.
        """
        lock_path = self.git_dir() / LOCK_FILE
        try:
            handle = os.fdopen(os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, FILE_MODE), "a+")
        except OSError as exc:  # a read-only mount, no permission
            raise RegistryError(
                f"cannot take the registry's write lock {lock_path}: {exc.strerror or type(exc).__name__}",
                hint="register and move labels in a writable checkout of the registry (this one can only be read)",
            ) from None
        with handle:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise RegistryConflict(
                            f"another registration holds the registry lock {lock_path} (waited {timeout:g}s)",
                            hint="retry when the other registration has finished",
                        ) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def git_dir(self) -> Path:
        """The repository's ``.git`` folder."""
        return Path(self.git("rev-parse", "--absolute-git-dir").strip())

    def writable(self) -> bool:
        """False for a checkout this process cannot write (a read-only volume, say): it can still be read."""
        return os.access(self.git_dir(), os.W_OK)

    def write_json(self, relative: str, data: Any) -> None:
        """Write ``data`` as stable JSON at ``relative`` (folders created)."""
        with self._open(relative, os.O_TRUNC) as handle:
            handle.write(dump_json(data))

    def append_line(self, relative: str, data: Any) -> None:
        """Append one compact JSON line to ``relative`` (an append-only log)."""
        with self._open(relative, os.O_APPEND) as handle:
            handle.write(json.dumps(data, sort_keys=True, ensure_ascii=False) + "\n")

    def _open(self, relative: str, how: int) -> IO[str]:
        """``relative`` opened for writing (``os.O_TRUNC`` or ``os.O_APPEND``), made 0644 and its folders 0755
        (less the umask) if missing: whatever the umask, no one else may write what the registry holds."""
        target = self.path / relative
        make_folder(target.parent, SHARED, above=SHARED)
        return os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | how, FILE_MODE), "w", encoding="utf-8")

    def commit(self, paths: Sequence[str], message: str, author: str | None = None) -> str | None:
        """Commit ``paths``; return the new sha, or ``None`` if nothing changed.

        Args:
            paths: Files or folders to stage and commit.
            message: The commit message.
            author: ``"Name <email>"`` or a bare name; defaults to ``GIT_AUTHOR_*``, else the login name, as a
                label move's actor does (:func:`default_actor`).
        """
        self.git("add", "-A", "--", *paths)
        if not self.git("diff", "--cached", "--name-only", "--", *paths).strip():
            return None
        args = ["commit", "-q", "--no-verify", "-m", message]
        if not author and not os.environ.get("GIT_AUTHOR_NAME"):  # git reads GIT_AUTHOR_* itself
            author = default_actor()
        if author:
            args.append(f"--author={normalise_author(author)}")
        self.git(*args, "--", *paths)
        return self.git("rev-parse", "HEAD").strip()

    def discard(self, paths: Sequence[str]) -> None:
        """Throw away uncommitted changes under ``paths`` (after a failed write)."""
        self.git("reset", "-q", "--", *paths, check=False)
        self.git("checkout", "-q", "--", *paths, check=False)
        self.git("clean", "-fdq", "--", *paths, check=False)

    # The reads are gitcli's, on this repository: callers (and the registry's checks) hold one object.

    def show(self, version: str, relative: str) -> str | None:
        """The text of ``relative`` at ``version``, or ``None`` if it does not exist there."""
        return gitcli.show(self.path, version, relative)

    def show_many(self, wanted: Sequence[tuple[str, str]]) -> list[str | None]:
        """The text of each ``(version, relative)`` as :meth:`show` gives it, read by one git process."""
        return gitcli.show_many(self.path, wanted)

    def head(self) -> str:
        """The commit HEAD is at now (``"HEAD"`` in a repository without commits)."""
        return gitcli.head(self.path)

    def has_commits(self) -> bool:
        """False for a repository created but never committed to (it has no history yet)."""
        return gitcli.has_commits(self.path)

    def files(self, version: str, prefix: str) -> list[str]:
        """Paths of the files under ``prefix`` at ``version`` (none in a repository without commits)."""
        return gitcli.files(self.path, version, prefix)

    def log(self, *paths: str, at: str = "HEAD", limit: int | None = None) -> list[dict[str, str]]:
        """Commits touching ``paths`` in the history of ``at`` (the ``limit`` newest), newest first: sha,
        author, ISO time, subject."""
        return gitcli.log(self.path, *paths, at=at, limit=limit)


def _modes(top: Path) -> Iterator[tuple[Path, int]]:
    """``top`` and every file and folder under it (``.git`` included), with its permission bits; links (whose
    own bits mean nothing) are neither given nor followed, and what goes meanwhile (git packing) is left out."""
    for folder, _folders, files in os.walk(top):  # each folder is walked itself, so it is given once, there
        for path in (Path(folder), *(Path(folder, name) for name in files)):
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:
                continue
            if not stat.S_ISLNK(mode):
                yield path, stat.S_IMODE(mode)


def _not_found(path: Path) -> RegistryNotFound:
    return RegistryNotFound(
        f"no registry at {path}: it does not exist yet, so no team is registered there",
        hint="`teamstore registry add` creates it with the first team; if it should exist, check "
        "TEAMSTORE_HOME and TEAMSTORE_REGISTRY_PATH",
    )


def _not_a_registry(path: Path) -> RegistryNotFound:
    return RegistryNotFound(
        f"no registry at {path}: it is a git repository but not a teamstore registry (no README.md that "
        "`teamstore registry` made, nothing under teams/ or labels/), and registering there would commit onto "
        "its branch",
        hint="point TEAMSTORE_REGISTRY_PATH at the registry's own checkout, or at a new path or an empty folder, "
        "where `teamstore registry add` creates one",
    )


def normalise_author(author: str) -> str:
    """``"Name <email>"`` as given, or ``"name <name@teamstore.invalid>"`` for a bare name."""
    if re.search(r"<[^>]*>\s*$", author):
        return author.strip()
    local = re.sub(r"[^A-Za-z0-9._-]+", ".", author.strip()).strip(".") or "unknown"  # '名前' has none
    return f"{author.strip()} <{local}@teamstore.invalid>"


def default_actor() -> str:
    """Who is acting, for label moves: ``GIT_AUTHOR_NAME``, else the login name."""
    name = os.environ.get("GIT_AUTHOR_NAME")
    if name:
        return name
    try:
        import getpass

        return getpass.getuser()
    except (OSError, KeyError):
        return DEFAULT_NAME
