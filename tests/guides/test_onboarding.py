"""docs/onboarding.md run as written: the bounded context of a factory, every command of the walkthrough in order
(add, secrets, review, release, change, compare, roll back, quarantine and restore), the error a registration
over its bound prints, and the registry from Python."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from teamstore.examples import support_triage
from teamstore.offline import OfflineChatCompletionClient
from tests.guides.guide import DOCS, Command, Shell, commands, pieces

GUIDE = "onboarding.md"


def _quarantined(shell: Shell) -> None:
    """What `sessions quarantine` needs: alice's state refused under a version it does not fit (the renamed
    researcher, shipped), then production rolled back to the version that saved it."""
    shell.json("run", "--team", "support_triage", "--user", "alice", "--session", "t-1", "My router keeps dropping")
    rollback = shell.json("registry", "show", "support_triage@production")["version"]
    renamed = shell.json("registry", "add", "support_triage", "--factory", "teamstore.examples:support_triage_v2_renamed",
                         "--persist", "investigator", "--context-bound", "20", "--owner", "support-platform", "-m", "rename",
                         "--label", "production", "--allow-incompatible")["version"]
    refused = shell.json("run", "--team", "support_triage", "--user", "alice", "--session", "t-1", "Hello again?")
    assert refused["resume"]["outcome"] == "definition_changed" and renamed
    shell.json("registry", "label", "support_triage", rollback, "production", "--reason", "rollback")
    (kept,) = shell.json("sessions", "quarantine", "--user", "alice")
    shell.filled["42"] = str(kept["id"])


def test_every_command_of_the_walkthrough_runs_in_order(shell: Shell) -> None:
    lines = commands(GUIDE)
    assert len(lines) == 13, [str(line) for line in lines]
    for line in lines:
        if line.starts("registry", "label", "support_triage", "3f1c2ab"):  # the first version, by a short prefix
            *_, first = [e for e in shell.json("registry", "history", "support_triage") if e["kind"] == "version"]
            shell.filled["3f1c2ab"] = first["version"][:7]
        if line.starts("sessions", "quarantine"):
            _quarantined(shell)
        done = shell.line(line)
        if line.starts("registry", "check"):
            assert "compatible" in done.stdout.lower()
    production = shell.json("registry", "show", "support_triage@production")["version"]
    assert production.startswith(shell.filled["3f1c2ab"])  # rolled back
    (kept,) = shell.json("sessions", "quarantine", "--user", "alice")  # the fresh state, set aside in turn
    assert str(kept["id"]) != shell.filled["42"] and kept["reason"] == "replaced"  # as the guide says


def test_a_registration_over_its_bound_says_what_the_guide_shows(shell: Shell) -> None:
    text = (DOCS / GUIDE).read_text(encoding="utf-8")
    shown = re.search(r"```\n(error: config\.participants.*?)```", text, re.DOTALL)
    assert shown
    component = json.loads(support_triage().dump_component().model_dump_json())
    component["config"]["participants"][1]["config"]["model_context"]["config"]["max_messages"] = 50
    (shell.cwd / "team.json").write_text(json.dumps(component), encoding="utf-8")
    done = shell.line(Command(["registry", "add", "support_triage", "--file", "team.json", "--persist", "researcher",
                               "--context-bound", "20"]), status=1)
    assert " ".join(shown[1].split()) in " ".join(done.output.split())


@pytest.mark.parametrize("piece", ["factory.py", "from_python.py"])
def test_the_guide_s_python_runs(shell: Shell, piece: str) -> None:
    given = {"client": OfflineChatCompletionClient(model="offline-small")} if piece == "factory.py" else {}
    done = asyncio.run(pieces(GUIDE)[piece].run(**given))
    if piece == "factory.py":
        assert done["researcher"].name == "researcher"
        return
    assert done["result"].messages[0].to_text() == "My router keeps dropping"
    assert done["built"].version == done["version"] and (shell.cwd / ".teamstore" / "registry").is_dir()
