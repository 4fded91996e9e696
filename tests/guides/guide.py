"""A guide's code, as the guide shows it: its python blocks assembled into the pieces a reader would write, and
the ``teamstore`` command lines of its shell blocks, run by the test of that guide.

    piece = pieces("checkpoints.md")["resume.py"]      # the blocks marked <!-- resume.py: platform, ... -->
    await piece.run(platform=platform, user_id="alice", session_id="t-1", text="hi")
    for line in commands("memory.md"):                 # ["teamstore", "memory", "show", ...], in order
        ...

A python block belongs to a piece when an HTML comment naming it stands on the line before its fence, as in
docs/services.md (tests/web/guide.py): ``<!-- resume.py -->`` for a piece that stands alone,
``<!-- resume.py: platform, user_id -->`` for a fragment that uses names an earlier part of the reader's code
made (the test gives exactly those). The blocks of one piece are joined in the guide's order and run as one
module with top-level ``await``, as a notebook or ``python -m asyncio`` runs them. Every python block of a
guide is marked, so a block added unmarked fails its guide's test rather than going untried.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import Result
from typer.testing import CliRunner

from teamstore.cli import app

DOCS = Path(__file__).resolve().parents[2] / "docs"
_FENCE = re.compile(r"^(?:<!-- (?P<mark>[^\n]*?) -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)
_MARK = re.compile(r"(?P<name>[\w.]+)(?:: (?P<given>\w+(?:, \w+)*))?")


@dataclass(frozen=True)
class Piece:
    """The code of the blocks marked with one name, and the names it is given."""

    guide: str
    name: str
    code: str
    given: frozenset[str]

    async def run(self, **given: Any) -> dict[str, Any]:
        """Run the piece with ``given`` (exactly the names its mark lists) as its globals; returns them, with
        every name the piece bound."""
        assert set(given) == self.given, f"{self.guide} gives {self.name} {sorted(self.given)}, not {sorted(given)}"
        code = compile(self.code, f"docs/{self.guide}:{self.name}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        namespace = {"__name__": self.name.removesuffix(".py"), **given}
        done = eval(code, namespace)  # the guide's own code: what is under test
        if inspect.iscoroutine(done):
            await done
        return namespace


def _blocks(guide: str) -> list[re.Match[str]]:
    return list(_FENCE.finditer((DOCS / guide).read_text(encoding="utf-8")))


def pieces(guide: str) -> dict[str, Piece]:
    """The guide's python pieces by name; every python block of the guide must be marked as part of one."""
    code: dict[str, list[str]] = {}
    given: dict[str, frozenset[str]] = {}
    for block in _blocks(guide):
        if block["lang"] != "python":
            continue
        mark = _MARK.fullmatch(block["mark"] or "")
        assert mark, f"docs/{guide}: a python block with no <!-- piece.py --> mark:\n{block['code']}"
        code.setdefault(mark["name"], []).append(block["code"])
        names = frozenset((mark["given"] or "").replace(" ", "").split(",")) - {""}
        assert given.setdefault(mark["name"], names) == names, f"docs/{guide}: {mark['name']} given two ways"
    return {name: Piece(guide, name, "\n".join(parts), given[name]) for name, parts in code.items()}


@dataclass(frozen=True)
class Command:
    """One ``teamstore`` command line of a shell block: its words after ``teamstore``, and the file its output
    is redirected to (``> november.csv``), if any."""

    args: list[str]
    output: str | None = None

    def starts(self, *words: str) -> bool:
        return self.args[:len(words)] == list(words)

    def __str__(self) -> str:
        return "teamstore " + shlex.join(self.args) + (f" > {self.output}" if self.output else "")


def queries(guide: str) -> list[str]:
    """The guide's ``sql`` blocks, in order, each as the reader would paste it into ``psql``."""
    return [block["code"] for block in _blocks(guide) if block["lang"] == "sql"]


def commands(guide: str) -> list[Command]:
    """Every ``teamstore`` command line of the guide's shell blocks (``bash``, or unlabelled), in order: lines
    joined at a trailing backslash or an open quote, comments dropped. Other lines (an error a command prints,
    a file's layout) are not commands."""
    found = []
    for block in _blocks(guide):
        if block["lang"] not in ("", "bash"):
            continue
        pending = ""
        for line in block["code"].replace("\\\n", " ").splitlines():
            if not pending and not line.startswith("teamstore "):
                continue
            pending += ("\n" if pending else "") + line
            try:
                words = shlex.split(pending, comments=True)
            except ValueError:  # a quote that closes on a later line
                continue
            pending, output = "", None
            if ">" in words:
                words, output = words[:words.index(">")], words[words.index(">") + 1]
            found.append(Command(words[1:], output))
        assert not pending, f"docs/{guide}: a quote never closed: {pending}"
    return found


class Shell:
    """Runs a guide's ``teamstore`` commands in this process (as the other CLI tests do), in ``cwd``, filling
    its placeholders: a word the guide stands in for an id earlier output printed (``filled``), and a part of a
    word that differs here (``replaced``: the guide's bucket for the test's)."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.filled: dict[str, str] = {}
        self.replaced: dict[str, str] = {}

    def __call__(self, *args: str, stdin: str | None = None) -> Result:
        return CliRunner().invoke(app, list(args), input=stdin, env={"COLUMNS": "200"})

    def json(self, *args: str) -> Any:
        done = self(*args, "--json")
        assert done.exit_code == 0, (args, done.output)
        return json.loads(done.stdout)

    def line(self, command: Command, status: int = 0, said: str = "") -> Result:
        """Run one command line of the guide; it must end with ``status`` and say ``said`` (on stdout or
        stderr, whitespace aside). Output redirected by the line is written where it says."""
        args = [self.filled.get(word, word) for word in command.args]
        for old, new in self.replaced.items():
            args = [word.replace(old, new) for word in args]
        done = self(*args)
        shown = f"{command}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        assert done.exit_code == status and said in " ".join(done.output.split()), shown
        if command.output is not None:
            (self.cwd / command.output).write_text(done.stdout, encoding="utf-8")
        return done
