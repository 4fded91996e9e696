"""A registry as a platform team grows it, made in one ``git fast-import``: teams registered round after round
(every team's version N before any team's N+1, as teams move at their own pace), then three labels per team.

    from bench.registry_scale import make_registry

    make_registry(Path("/tmp/reg"), teams=300, versions=20, scopes=30)   # ~7,000 commits in a few seconds

Every team keeps memory; the teams share ``scopes`` memory scopes (team i shares ``scope-(i % scopes)``). The
files are what ``Registry.add`` and a label move write (``dump_json``, the move log's lines), so every reader
reads them as it reads a registration's.
"""

from __future__ import annotations

import functools
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from config_registry.gitrepo import _README, dump_json

LABELS = ("canary", "staging", "production")
_EPOCH = 1_767_225_600  # 2026-01-01


def team_files(index: int, version: int, scopes: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Team ``index``'s component and manifest JSON at ``version``."""
    component, manifest = _example()
    manifest.update(name=team_name(index), description=f"team {index}, version {version}")
    manifest["memory"]["scope"] = f"scope-{index % scopes}"
    return component, manifest


@functools.cache
def _base() -> tuple[str, str]:
    from teamstore import examples

    return (json.dumps(examples.support_triage().dump_component().model_dump(mode="json")),
            json.dumps(examples.example_manifest("support_triage").model_dump(mode="json")))


def _example() -> tuple[dict[str, Any], dict[str, Any]]:
    component, manifest = _base()
    return json.loads(component), json.loads(manifest)


def team_name(index: int) -> str:
    """The name of team ``index``."""
    return f"team-{index:04d}"


def make_registry(path: Path, *, teams: int, versions: int, scopes: int) -> dict[str, list[str]]:
    """Make the registry at ``path`` (an absent or empty folder); returns each team's versions, oldest first."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    stream: list[bytes] = []
    commits: list[tuple[str, int]] = []  # (team, mark), in commit order
    clock = [_EPOCH]

    def commit(message: str, files: dict[str, str]) -> int:
        clock[0] += 60
        mark = len(commits) + 1
        head = [f"commit refs/heads/main\nmark :{mark}\n", f"author ops <ops@example.com> {clock[0]} +0000\n",
                f"committer ops <ops@example.com> {clock[0]} +0000\n"]
        body = message.encode()
        stream.append("".join(head).encode() + b"data %d\n" % len(body) + body + b"\n")
        for relative, text in files.items():
            data = text.encode()
            stream.append(f"M 100644 inline {relative}\n".encode() + b"data %d\n" % len(data) + data + b"\n")
        stream.append(b"\n")
        commits.append(("", mark))
        return mark

    commit("Create the teamstore registry", {"README.md": _README})
    made: dict[str, list[int]] = {team_name(i): [] for i in range(teams)}
    for version in range(versions):
        for index in range(teams):
            component, manifest = team_files(index, version, scopes)
            folder = f"teams/{team_name(index)}"
            made[team_name(index)].append(commit(f"v{version}", {
                f"{folder}/component.json": dump_json(component), f"{folder}/manifest.json": dump_json(manifest),
            }))
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet"], input=b"".join(stream), check=True)
    shas = _marks(path, [mark for marks in made.values() for mark in marks], len(commits))
    return _label_all(path, {team: [shas[m] for m in marks] for team, marks in made.items()}, clock[0])


def _marks(path: Path, marks: list[int], total: int) -> dict[int, str]:
    """Mark -> sha, read off the branch (its commits are the marks in order)."""
    shas = subprocess.run(["git", "-C", str(path), "rev-list", "--reverse", "main"], check=True,
                          capture_output=True, text=True).stdout.split()
    assert len(shas) == total
    return {mark: shas[mark - 1] for mark in marks}


def _label_all(path: Path, made: dict[str, list[str]], clock: int) -> dict[str, list[str]]:
    """One commit per label move, as ``registry label`` makes: canary at the latest version, staging one
    behind, production two behind."""
    stream: list[bytes] = []
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "main"], check=True, capture_output=True,
                          text=True).stdout.strip()
    stream.append(b"")
    first = True
    for team, shas in made.items():
        labels: dict[str, str] = {}
        log = ""
        for back, label in enumerate(LABELS):
            clock += 60
            labels[label] = shas[-1 - back]
            log += json.dumps({"label": label, "version": labels[label], "previous": None, "who": "ops",
                               "when": datetime.fromtimestamp(clock, UTC).isoformat(), "why": "release"}, sort_keys=True) + "\n"
            message = f"label {team} {label} -> {labels[label][:12]}: release".encode()
            files = {f"labels/{team}.json": dump_json(labels), f"labels/{team}.log.jsonl": log}
            stream.append(f"commit refs/heads/main\ncommitter ops <ops@example.com> {clock} +0000\n".encode()
                          + b"data %d\n" % len(message) + message + b"\n"
                          + (f"from {head}\n".encode() if first else b""))
            first = False
            for relative, text in files.items():
                data = text.encode()
                stream.append(f"M 100644 inline {relative}\n".encode() + b"data %d\n" % len(data) + data + b"\n")
            stream.append(b"\n")
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet", "--force"], input=b"".join(stream), check=True)
    subprocess.run(["git", "-C", str(path), "checkout", "-q", "-f", "main"], check=True)
    return made
