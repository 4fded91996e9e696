"""The git command line under the registry: run apart from the caller's repository, its output parsed.

    from config_registry.gitcli import files, git, log, show

    git(path, "status", "--short")                     # stdout; RegistryError naming git's complaint if it fails
    show(path, "HEAD", "README.md")                    # the file's text at HEAD, None where it is absent
    files(path, "HEAD", "teams")                       # the paths of the files under teams/ at HEAD
    log(path, "teams/support_triage", limit=1)         # [{"commit", "author", "time", "message"}], newest first

Plain functions of the repository's folder: :class:`config_registry.gitrepo.GitRepo` is the registry's use of
them (opening a registry, its locks and checks, what it writes and commits). No global git identity is
needed: defaults are passed with ``-c``.
"""

from __future__ import annotations

import locale
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

from config_registry.errors import RegistryError
from config_registry.folders import umask

DEFAULT_NAME = "teamstore"
DEFAULT_EMAIL = "teamstore@localhost"
OTHERS_WRITE = 0o022
"""The write bits of the group and of everyone else: nothing git makes for the registry has them."""

# What 'git rev-parse --local-env-vars' lists: set in the caller's environment (the registry used from a git
# hook, or a CI step inside another checkout), they point every git command at that other repository,
# and the registry's commits would land there.
_REPOSITORY_ENV = frozenset({
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
    "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE",
    "GIT_INDEX_FILE", "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX",
    "GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE", "GIT_COMMON_DIR",
})


@overload
def run(command: list[str]) -> subprocess.CompletedProcess[str]: ...


@overload
def run(command: list[str], given: bytes) -> subprocess.CompletedProcess[bytes]: ...


def run(command: list[str], given: bytes | None = None) -> subprocess.CompletedProcess[Any]:
    """Run a git command line with the caller's repository-selecting variables removed; given ``given``, it is
    the command's input and its output is bytes."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in _REPOSITORY_ENV and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))
    }
    # Git makes the repository's files and folders under the umask: with no write bit for others, whatever the
    # caller's, so no one else can plant a hook, a config or an object (a umask stricter than that is kept).
    return subprocess.run(command, capture_output=True, text=given is None, input=given, check=False, env=env,
                          umask=umask() | OTHERS_WRITE)


def _text(data: bytes) -> str:
    """A file's bytes as :func:`run`'s text output gives them: decoded, its line ends made ``\\n``."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def git(path: Path, *args: str, check: bool = True) -> str:
    """Run git in the repository at ``path`` and return stdout.

    Raises:
        RegistryError: git failed (its stderr is in the message).
    """
    command = [
        "git",
        "-c",
        f"user.name={DEFAULT_NAME}",
        "-c",
        f"user.email={DEFAULT_EMAIL}",
        "-c",
        "core.quotepath=off",
        "-C",
        str(path),
        *args,
    ]
    result = run(command)
    if check and result.returncode != 0:
        raise RegistryError(
            f"git {' '.join(args[:2])} failed in {path}: {result.stderr.strip()}",
            hint="check the repository with 'git status' and 'git log'",
        )
    return result.stdout


def changes(path: Path, paths: Sequence[str]) -> list[tuple[str, str]]:
    """Uncommitted (staged, unstaged or untracked) files under ``paths``: (git's two-letter status, path)."""
    # -z: paths as they are (no quoting of unusual names); a rename's entry is followed by its old path.
    fields = iter(git(path, "status", "--porcelain", "-z", "--untracked-files=all", "--", *paths).split("\x00"))
    found = []
    for entry in fields:
        if entry:
            found.append((entry[:2], entry[3:]))
            if entry[0] in "RC":
                next(fields, None)
    return found


def show(path: Path, version: str, relative: str) -> str | None:
    """The text of ``relative`` at ``version``, or ``None`` if it does not exist there."""
    result = run(["git", "-C", str(path), "show", f"{version}:{relative}"])
    return result.stdout if result.returncode == 0 else None


def show_many(path: Path, wanted: Sequence[tuple[str, str]]) -> list[str | None]:
    """The text of each ``(version, relative)`` as :func:`show` gives it, read by one ``git cat-file --batch``
    rather than a process a file: a registry of hundreds of teams reads hundreds at once."""
    # cat-file reads a name a line: one holding a line end (a label hand-edited to one) is read alone.
    batched = [pair for pair in wanted if not any(end in part for part in pair for end in "\r\n")]
    found = dict(zip(batched, _cat(path, batched), strict=True))
    return [found[pair] if pair in found else show(path, *pair) for pair in wanted]


def _cat(path: Path, wanted: Sequence[tuple[str, str]]) -> list[str | None]:
    if not wanted:
        return []
    names = "".join(f"{version}:{relative}\n" for version, relative in wanted).encode()
    out, at, found = run(["git", "-C", str(path), "cat-file", "--batch"], names).stdout, 0, []
    for pair in wanted:
        end = out.find(b"\n", at)
        if end < 0:  # git stopped short (killed, say): what is left is read as show() reads it
            found.append(show(path, *pair))
            continue
        header, at = out[at:end].split(), end + 1
        if len(header) != 3:  # "<name> missing" or "ambiguous": show() fails too
            found.append(None)
            continue
        size = int(header[2])
        body, at = out[at:at + size], at + size + 1  # each object is followed by a newline
        # A folder (a tree) is given by show() as git's listing of it, not as the tree's bytes.
        found.append(_text(body) if header[1] == b"blob" else show(path, *pair))
    return found


def head(path: Path) -> str:
    """The commit HEAD is at now (``"HEAD"`` in a repository without commits): reads pinned to it see one
    state of the registry, whatever a writer commits meanwhile."""
    return git(path, "rev-parse", "--verify", "-q", "HEAD", check=False).strip() or "HEAD"


def has_commits(path: Path) -> bool:
    """False for a repository created but never committed to (it has no history yet)."""
    result = run(["git", "-C", str(path), "rev-parse", "--verify", "-q", "HEAD"])
    return result.returncode == 0


def files(path: Path, version: str, prefix: str) -> list[str]:
    """Paths of the files under ``prefix`` at ``version`` (none in a repository without commits)."""
    result = run(["git", "-C", str(path), "ls-tree", "-r", "-z", "--name-only", version, "--", prefix])
    return [p for p in result.stdout.split("\x00") if p] if result.returncode == 0 else []


def log(path: Path, *paths: str, at: str = "HEAD", limit: int | None = None) -> list[dict[str, str]]:
    """Commits touching ``paths`` in the history of ``at`` (the ``limit`` newest), newest first: sha,
    author, ISO time, subject."""
    # Fields and commits end in NUL, the one character git keeps out of names and messages (any other
    # separator could sit in a commit message, and that commit would drop out of the history).
    if not has_commits(path):
        return []
    count = [f"-{limit}"] if limit is not None else []
    out = git(path, "log", *count, "-z", "--format=%H%x00%an <%ae>%x00%aI%x00%s", at, "--", *paths)
    fields = out.split("\x00")
    return [
        dict(zip(("commit", "author", "time", "message"), fields[i:i + 4], strict=True))
        for i in range(0, len(fields) - 3, 4)
    ]
