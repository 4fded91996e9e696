"""README.md's "A quick tour", run as written: every command of its bash block, in order, in a fresh home with
the offline example teams, transcripts in S3 (moto's server over HTTP) and the ledger exported to S3.

The tour is not a script: its placeholders (``<v1>``, ``<v2>``, ``<request-id>``, the quarantine id ``42``,
``"..."``) are filled from what earlier commands printed (``--json``), and what a line needs that the tour
does not show (a second version to diff, a run its worker died in, a quarantined state, an unfinished erasure
to extend) is set up here first, through the CLI. Each command must exit 0, or with the status the docs give
it in that situation (``registry check`` 2 for an incompatible change; ``erase`` 1 without a terminal).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from teamstore.cli import app

ROOT = Path(__file__).resolve().parents[1]
README, MAKEFILE, PYPROJECT = ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"
EXPECTED: dict[str, tuple[int, str]] = {
    "registry check": (2, "INCOMPATIBLE"),  # the tour's v2 renames a persisted participant
    "erase --user": (1, "no terminal to ask on"),  # run without a terminal, it refuses to erase unasked
}
"""Lines that end with a status other than 0, by the words they start with: (status, said on stdout or stderr)."""
MODEL_SECONDS = "1.5"
"""How long each model call of the checkpointed team takes: long enough to kill its worker after turn 1."""


SHELL = ("source", "export", "cd")
"""The words a line of the tour's shell (not a ``teamstore`` command) may start with."""


def lines() -> list[str]:
    """The tour's lines in order as written, a continued line joined, blank and comment-only lines left out."""
    text = README.read_text(encoding="utf-8")
    block = text.split("\n## A quick tour\n", 1)[1].split("```bash\n", 1)[1].split("\n```", 1)[0]
    return [line for line in block.replace("\\\n", " ").splitlines() if shlex.split(line, comments=True)]


def tour() -> list[tuple[list[str], str | None]]:
    """The tour's commands in order: each as its argument list after ``teamstore``, and the text piped to it."""
    commands = []
    for line in lines():
        words = shlex.split(line, comments=True)
        if words[0] in SHELL:
            assert not commands, f"the tour's shell lines come before its first command: {line}"
            continue
        stdin = None
        if "|" in words:
            head, words = words[:words.index("|")], words[words.index("|") + 1:]
            assert head[0] == "echo" and len(head) == 2, line
            stdin = head[1] + "\n"
        assert words[0] == "teamstore", line
        commands.append((words[1:], stdin))
    return commands


def shell(tmp: Path, start: Path) -> tuple[dict[str, str], Path]:
    """What the tour's shell lines before its first command leave, run by bash from ``start`` (``mktemp``
    making its folders in ``tmp``): the variables they export, by name, and the folder they move to."""
    head = list(itertools.takewhile(lambda line: line.split()[0] in SHELL, lines()))
    run = [line for line in head if not line.startswith("source ")]  # the virtualenv: this process's
    exported = [line.split()[1].split("=", 1)[0] for line in run if line.startswith("export ")]
    script = "\n".join([*run, *(f'printf "%s\\0" "${name}"' for name in [*exported, "PWD"])])
    done = subprocess.run(["bash", "-e", "-c", script], cwd=start, env={**os.environ, "TMPDIR": str(tmp)},
                          capture_output=True, text=True, check=True)
    *values, moved_to = done.stdout.split("\0")[:-1]
    return dict(zip(exported, values, strict=True)), Path(moved_to)


def _starts(args: list[str], *words: str) -> bool:
    return args[:len(words)] == list(words)


def _polls() -> Iterator[int]:
    """A poll's turns, a short pause apart; past the last (minutes on a loaded machine), the test fails."""
    for turn in range(3000):
        yield turn
        time.sleep(0.05)
    pytest.fail("what the test waited for never happened")


class Tour:
    """Runs the tour's ``teamstore`` commands (in this process, as the other CLI tests do) and keeps what they
    printed; a worker to be killed, or an erasure to be stopped, is a process of its own."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.filled: dict[str, str] = {}
        self.used: set[str] = set()

    def teamstore(self, *args: str, stdin: str | None = None) -> Result:
        return CliRunner().invoke(app, list(args), input=stdin, env={"COLUMNS": "200"})

    def json(self, *args: str) -> Any:
        done = self.teamstore(*args, "--json")
        assert done.exit_code == 0, (args, done.output)
        return json.loads(done.stdout)

    def popen(self, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "teamstore", *args], cwd=self.cwd, env={**os.environ, **env},
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # --- what a line needs that the tour does not show ---------------------------------------------------------
    def second_version(self) -> None:
        """v2 renames the persisted researcher (a breaking change) and is shipped: the rollback has one to undo."""
        self.filled["<v1>"] = self.json("registry", "show", "support_triage@production")["version"]
        self.filled["<v2>"] = self.json(
            "registry", "add", "support_triage", "--factory", "teamstore.examples:support_triage_v2_renamed",
            "--persist", "investigator", "--context-bound", "20", "-m", "rename researcher to investigator",
        )["version"]
        self.ship("<v2>")

    def ship(self, version: str) -> None:
        self.json("registry", "label", "support_triage", self.filled[version], "production", "--reason", "ship")

    def interrupted_run(self) -> None:
        """A run of the checkpointed team the tour registered, its worker killed (SIGKILL) once turn 1 is durable:
        the version it runs, labelled production, takes its time over each model call so that it can be."""
        from teamstore.examples import support_escalation

        registered = self.json("registry", "show", "support_escalation@production")
        assert registered["manifest"]["checkpoints"] == "every_turn", registered
        component = self.cwd.parent / "support_escalation.json"  # the test's own file, not the tour's
        component.write_text(support_escalation(float(MODEL_SECONDS)).dump_component().model_dump_json())
        self.json("registry", "add", "support_escalation", "--file", str(component), "--persist", "researcher",
                  "--context-bound", "20", "--checkpoints", "every_turn", "--label", "production")
        # A short lease: on SQLite the dead worker's row lease runs out before `--continue` stops waiting for it.
        worker = self.popen("run", "--team", "support_escalation", "--user", "alice", "--session", "t-2",
                            "Escalation: my line has dropped every evening for three weeks.", "--json",
                            env={"TEAMSTORE_LEASE_TTL_SECONDS": "3"})
        try:
            for _ in _polls():
                shown = self.teamstore("sessions", "show", "--user", "alice", "--session", "t-2", "--json")
                assert worker.poll() is None, ("the worker ended before it was killed", worker.communicate())
                checkpoint = json.loads(shown.stdout)["checkpoint"] if shown.exit_code == 0 else None
                if checkpoint and checkpoint["last_turn"] >= 1:
                    break
            worker.send_signal(signal.SIGKILL)
        finally:
            worker.kill()
            worker.communicate(timeout=60)
        assert worker.returncode == -signal.SIGKILL

    def quarantined_state(self) -> None:
        """alice's t-1 refused under the shipped v2 (set aside, with the reason), then the rollback to v1."""
        self.ship("<v2>")
        refused = self.json("run", "--team", "support_triage", "--user", "alice", "--session", "t-1", "Hello again?")
        assert refused["resume"]["outcome"] == "definition_changed", refused["resume"]
        self.ship("<v1>")  # the rollback
        (kept,) = self.json("sessions", "quarantine")
        self.filled["42"] = str(kept["id"])

    def unfinished_erasure(self) -> None:
        """bob's erasure, stopped (SIGTERM) while its fence waits: an open request, which can be extended."""
        self.json("run", "--team", "support_triage", "--user", "bob", "--session", "b-1", "I was billed twice.")
        eraser = self.popen("erase", "--user", "bob", "--reason", "asked", "--requested-by", "ticket 4712", "--yes",
                            env={"TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS": "600"})
        try:
            for _ in _polls():
                if opened := self.json("erase", "list", "--status", "open")["requests"]:
                    break
                assert eraser.poll() is None, eraser.communicate()
            eraser.send_signal(signal.SIGTERM)
            _, said = eraser.communicate(timeout=60)
        finally:
            eraser.kill()
        assert eraser.returncode == 128 + signal.SIGTERM and "it is open" in " ".join(said.split()), said
        self.filled["<request-id>"] = opened[0]["request_id"]

    # --- the tour's lines --------------------------------------------------------------------------------------
    def before(self, args: list[str]) -> None:
        setups: list[tuple[tuple[str, ...], Callable[[], None]]] = [
            (("registry", "diff"), self.second_version),
            (("run", "--team", "support_escalation"), self.interrupted_run),
            (("sessions", "quarantine"), self.quarantined_state),
            (("erase", "extend"), self.unfinished_erasure),
        ]
        for words, setup in setups:
            if _starts(args, *words):
                setup()
                self.used.add(" ".join(words))

    def fill(self, args: list[str]) -> list[str]:
        filled = [self.filled.get(a, a) if a.startswith("<") or a == "42" else a for a in args]
        filled = ["the data are held in three systems" if a == "..." else a for a in filled]
        assert not any(a.startswith("<") for a in filled), f"a placeholder nothing printed: {filled}"
        return filled

    def line(self, args: list[str], stdin: str | None) -> Result:
        self.before(args)
        done = self.teamstore(*self.fill(args), stdin=stdin)
        status, said = next((v for k, v in EXPECTED.items() if _starts(args, *k.split())), (0, ""))
        shown = f"teamstore {shlex.join(args)}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        assert done.exit_code == status and said in " ".join(done.output.split()), shown
        if _starts(args, "erase", "--user"):  # asked by a script: it says how, and the receipt gives the id
            assert "--yes" in done.stderr, shown
            receipt = self.json(*args, "--yes")
            assert receipt["status"] == "completed", receipt
            self.filled["<request-id>"] = receipt["request_id"]
        return done


def test_the_tour_starts_in_the_virtualenv_make_demo_made_on_a_fresh_home_of_its_own(tmp_path: Path) -> None:
    venv = re.search(r"^VENV \?= (\S+)$", MAKEFILE.read_text(encoding="utf-8"), re.MULTILINE)
    assert venv is not None
    assert shlex.split(lines()[0], comments=True) == ["source", f"{venv[1]}/bin/activate"]
    assert 'teamstore = "teamstore.cli:main"' in PYPROJECT.read_text(encoding="utf-8")  # what puts it on the PATH
    exported, scratch = shell(tmp_path, tmp_path)
    home = Path(exported["TEAMSTORE_HOME"])  # not the demo's ./.teamstore, whose teams have an owner
    assert home.parent == tmp_path and home.is_dir() and not any(home.iterdir())
    assert scratch.parent == tmp_path and scratch != home and not any(scratch.iterdir())  # not the checkout


def test_the_tour_registers_every_team_before_it_runs_one() -> None:
    registered: set[str] = set()
    for args, _ in tour():
        if _starts(args, "registry", "add"):
            registered.add(args[2])
        elif _starts(args, "run"):
            team = args[args.index("--team") + 1].split("@")[0]
            assert team in registered, f"the tour runs {team} before it registers it"
    assert registered == {"support_triage", "support_escalation"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> str | None:
    """The database the tour runs on: the embedded default, or a throwaway Postgres database (``None``: SQLite)."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.mark.s3
def test_every_command_of_the_readme_tour_runs_in_order(
    database: str | None, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    checkout = tmp_path / "checkout"  # where the reader's shell starts
    checkout.mkdir()
    monkeypatch.chdir(checkout)
    exported, cwd = shell(tmp_path, checkout)
    for name, value in exported.items():  # the fresh home the tour exports
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", f"s3://{s3_bucket}/teamstore")
    monkeypatch.setenv("OPENAI_API_KEY", "")  # the example teams' offline model client: no network, no key
    monkeypatch.chdir(cwd)  # the scratch folder the tour moves to: where `-o cost.html` and `--output alice.zip` land
    steps = Tour(cwd)
    if database is not None:  # production never migrates implicitly: the README's real-services block runs this
        monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database)
        steps.json("db", "upgrade")

    said = {shlex.join(args): steps.line(args, stdin) for args, stdin in tour()}

    assert steps.used == {"registry diff", "run --team support_escalation", "sessions quarantine", "erase extend"}
    memory = next(done.stdout for line, done in said.items() if line.startswith("memory show"))
    assert "ticket_id" in memory and "55102" in memory  # the writer kept the fact the tour then forgets
    extended = " ".join(next(done.stdout for line, done in said.items() if line.startswith("erase extend")).split())
    assert "subject hash not known yet" in extended, "stopped in its first wait, bob's erasure had not looked up his key"
    restored = next(done.stdout for line, done in said.items() if line.startswith("sessions restore"))
    assert "restored quarantined state" in restored
    assert (cwd / "cost.html").stat().st_size > 0 and (cwd / "alice.zip").stat().st_size > 0
    assert not any(checkout.iterdir()), "the tour left files in the checkout"
    assert list((cwd / "ledger").glob("day=*/part-00000.parquet"))
    rules = boto3.client("s3").get_bucket_lifecycle_configuration(Bucket=s3_bucket)["Rules"]
    assert [rule["Filter"]["Prefix"] for rule in rules] == ["teamstore/subjects/"]
