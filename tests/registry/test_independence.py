"""The registry names no package built on it: teamstore's providers and bounding context reach it through
entry points, and a process using the registry alone never imports teamstore unless a definition needs it."""

from __future__ import annotations

import json
import pkgutil
import re
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.replay import ReplayChatCompletionClient

import config_registry
import teamstore
from config_registry import Manifest, bounds, extensions
from config_registry.bounds import BoundingContext
from config_registry.errors import ExtensionInvalid, HintedError, RegistryError, UnknownTeam
from teamstore.context import BoundedChatCompletionContext
from teamstore.errors import TeamstoreError
from tests.registry.conftest import dump

# Run in a fresh interpreter: uses the registry alone on the definitions the test wrote, then prints
# which teamstore modules it imported and what the registry answered.
ALONE = """
import json, sys
from pathlib import Path
from config_registry import Manifest, Registry
from config_registry.errors import DefinitionInvalid

home = Path(sys.argv[1])
plain = [json.loads((home / f"plain{i}.json").read_text()) for i in (1, 2)]
registry = Registry(home / "registry", create=True)
first = registry.add("plain", plain[0], Manifest(name="plain"), "first", label="production")
second = registry.add("plain", plain[1], Manifest(name="plain"), "second")
answers = {
    "diff": bool(registry.diff("plain", first, second).to_dict()),
    "check": registry.check("plain", first, second).compatible,
    "listed": [team.name for team in registry.list()],
}
imported = {"plain": sorted(m for m in sys.modules if m.partition(".")[0] == "teamstore")}
if len(sys.argv) > 2:
    bounded = [json.loads((home / f"bounded{i}.json").read_text()) for i in (1, 2, 3)]
    manifest = Manifest(name="bounded", persist=["helper"])
    try:
        registry.add("bounded", bounded[0], manifest, "too small")
    except DefinitionInvalid as exc:
        answers["refused"] = [exc.field, exc.message]
    first = registry.add("bounded", bounded[1], manifest, "first")
    report = registry.check("bounded", first, registry.add("bounded", bounded[2], manifest, "wider"))
    answers["bounded_check"] = [report.compatible, report.reasons]
    imported["bounded"] = sorted(m for m in sys.modules if m.partition(".")[0] == "teamstore")
print(json.dumps({"answers": answers, "imported": imported}))
"""


def _agent(**changes: Any) -> dict[str, Any]:
    client = ReplayChatCompletionClient(["hello"])
    return dump(AssistantAgent("helper", model_client=client, **changes))


def _bounded(max_messages: int) -> dict[str, Any]:
    return _agent(model_context=BoundedChatCompletionContext(max_messages=max_messages, keep_first=1))


def _alone(tmp_path: Path, *, bounded: bool) -> dict[str, Any]:
    for index, system_message in enumerate(("Be brief.", "Be briefer."), start=1):
        (tmp_path / f"plain{index}.json").write_text(json.dumps(_agent(system_message=system_message)))
    too_small = _bounded(5)
    too_small["config"]["model_context"]["config"]["max_messages"] = 3  # the constructor refuses 3
    for index, definition in enumerate((too_small, _bounded(5), _bounded(6)), start=1):
        (tmp_path / f"bounded{index}.json").write_text(json.dumps(definition))
    args = [sys.executable, "-c", ALONE, str(tmp_path), *(["bounded"] if bounded else [])]
    proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer


def test_a_process_using_the_registry_alone_never_imports_teamstore_for_a_definition_that_does_not_need_it(
    tmp_path: Path,
) -> None:
    answer = _alone(tmp_path, bounded=False)
    assert answer["answers"] == {"diff": True, "check": True, "listed": ["plain"]}
    assert answer["imported"] == {"plain": []}


def test_a_process_using_the_registry_alone_knows_teamstores_bounding_context_from_its_entry_point(
    tmp_path: Path,
) -> None:
    answer = _alone(tmp_path, bounded=True)
    field, message = answer["answers"]["refused"]
    # The context's own check of its sizes, and its bound fields in the fingerprints.
    assert field == "config.model_context.config.max_messages"
    assert "would lose its newest tool exchange" in message and "max_messages=3" in message
    compatible, reasons = answer["answers"]["bounded_check"]
    assert not compatible and any("bound" in reason for reason in reasons)
    assert "teamstore.context" in answer["imported"]["bounded"]


def _module_names(package: Any) -> set[str]:
    prefix = package.__name__ + "."
    return {package.__name__} | {info.name for info in pkgutil.walk_packages(package.__path__, prefix)}


def test_the_registrys_code_names_no_teamstore_module() -> None:
    modules = _module_names(teamstore) - {"teamstore"}  # the bare word also names the command line program
    named = []
    for source in Path(config_registry.__file__).parent.glob("*.py"):
        for word in re.findall(r"[A-Za-z_][\w.]*", source.read_text()):
            if word == "teamstore." or any(word == m or word.startswith(m + ".") for m in modules):
                named.append(f"{source.name}: {word}")
    assert named == []


def test_the_registrys_errors_are_teamstore_errors_without_the_registry_naming_teamstore() -> None:
    assert TeamstoreError is HintedError
    assert issubclass(UnknownTeam, TeamstoreError) and issubclass(ExtensionInvalid, RegistryError)
    with pytest.raises(TeamstoreError, match="no team"):
        raise UnknownTeam("no team named 'x' is registered", hint="see the registry's list")


def _declaring(monkeypatch: pytest.MonkeyPatch, provider: str, value: str) -> None:
    entry = EntryPoint(name=provider, value=value, group=extensions.BOUNDING_CONTEXTS)
    declared: Callable[[str], dict[str, EntryPoint]] = lambda group: (  # noqa: E731
        {provider: entry} if group == extensions.BOUNDING_CONTEXTS else {}
    )
    monkeypatch.setattr(extensions, "declared", declared)


SIZES = BoundingContext(("size",))


def test_a_declared_bounding_context_is_loaded_when_a_definition_first_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _declaring(monkeypatch, "tests.example.SizedContext", f"{__name__}:SIZES")
    assert bounds.bound_of({"provider": "tests.example.SizedContext", "config": {"size": 4}}) == {
        "provider": "tests.example.SizedContext", "size": 4,
    }
    assert "tests.example.SizedContext" in bounds.known_bounding_contexts()


@pytest.mark.parametrize(
    ("value", "why"),
    [("tests.no_such_module:BOUNDING", "does not load: ModuleNotFoundError"), ("json:dumps", "not a config_registry")],
)
def test_a_declared_bounding_context_that_does_not_load_is_refused_by_name_never_read_as_unbounded(
    monkeypatch: pytest.MonkeyPatch, value: str, why: str
) -> None:
    provider = f"tests.example.Broken{abs(hash(value))}"
    _declaring(monkeypatch, provider, value)
    with pytest.raises(ExtensionInvalid, match=why) as caught:
        bounds.bound_of({"provider": provider, "config": {}})
    assert provider in caught.value.message and caught.value.hint


def test_a_provider_prefix_registered_on_import_is_allowed_like_a_declared_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extensions, "declared", lambda group: {})  # no installed metadata at all
    monkeypatch.setattr(extensions, "_REGISTERED_PREFIXES", set())
    assert "teamstore." not in Manifest(name="x").provider_prefixes()
    extensions.register_provider_prefix("teamstore.")
    assert "teamstore." in Manifest(name="x").provider_prefixes()
