"""The main job, every step a CLI process, with canaries in every input: then every sink is searched, before
and after one user's erasure, and one user's export is checked against what the stores held of them. On the embedded default (SQLite, the local folder) and in production's shape
(Postgres, versioned S3): between them every sink there is; the fault scenarios take the other pairings."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from config_registry import Registry
from teamstore.examples import example_manifest, support_triage_v2_renamed
from tests.canary.canaries import USER_DATA, CanaryBook, Kind
from tests.canary.deployment import Deployment
from tests.canary.flows import TRIAGE, User, erase, export, gateway_env, register_teams, runs_at_once
from tests.canary.model_server import ModelServer
from tests.canary.policy import WORDS, Hit, judge, report, scan
from tests.canary.sinks import DATABASE, FILES, S3

pytestmark = pytest.mark.otlp


def _main_job(deployment: Deployment, book: CanaryBook, model_server: ModelServer) -> tuple[User, User]:
    """Register, two users' sessions, resumes in new processes (one on a breaking version: quarantined), a
    tool's output, secrets from the environment, a memory forget, a transcript shown, cost, the ledger exported as Parquet:
    every step after registration a CLI process of its own."""
    alice, bob = User.plant(book, "alice"), User.plant(book, "bob")
    register_teams(deployment.registry, model_server.base_url)
    renamed = example_manifest("support_triage_v2_renamed").model_copy(update={"name": TRIAGE})
    breaking = Registry(deployment.registry).add(TRIAGE, support_triage_v2_renamed().dump_component(), renamed,
                                                 "rename researcher to investigator")
    deployment.cli("db", "upgrade", level="INFO")
    runs_at_once(deployment, (alice, alice.sessions[0], alice.tasks[0]), (bob, bob.sessions[0], bob.tasks[0]))
    status = book.plant(Kind.TOOL_OUTPUT, "the order tool's answer for bob", owner="bob",
                        shape="order {} left the depot in Tromsø")
    secrets = gateway_env(book)
    resumed = runs_at_once(  # bob's on a breaking version: his state is set aside in quarantine
        deployment, (alice, alice.sessions[0], alice.tasks[1]),
        (bob, bob.sessions[0], bob.tasks[1], f"{TRIAGE}@{breaking}", {}),
        (bob, bob.sessions[1], "Where is my order?", "order_desk", {"CANARY_ORDER_STATUS": status}),
        (alice, alice.sessions[1], alice.tasks[2], "gateway_desk", secrets),
    )
    assert [r["resume"]["outcome"] for r in resumed[:2]] == ["resumed", "definition_changed"]
    assert status in resumed[2]["reply"], "the tool ran and its output came back"
    unsent = [v for v in secrets.values() if not any(v in sent for h in model_server.headers for sent in h.values())]
    assert not unsent, "every secret went out to the model endpoint, through the run's whole path"
    for user in (alice, bob):  # memory of a scope they keep none under: the forget's record holds their id
        deployment.cli("memory", "forget", "--user", user.user_id, "--all", "--team", "order_desk")

    shown = deployment.start("transcripts", "show", "--user", alice.user_id, "--session", alice.sessions[0], "--json")
    cost = deployment.start("cost", "--user", bob.user_id, "--format", "json")
    shown_runs = json.loads(deployment.finish(shown).stdout)
    assert shown_runs["total"] == 2 and alice.tasks[0] in json.dumps(shown_runs, ensure_ascii=False), (
        "what is stored sealed opens again for teamstore")
    assert json.loads(deployment.finish(cost).stdout)["total"]["runs_completed"] >= 2
    exported = deployment.cli_json("ledger", "export", "--to", str(deployment.home / "warehouse"))
    assert exported["rows"] > 0, "the ledger's export is written under the home, where the scan reads it"
    (deployment.home / "reports").mkdir()
    deployment.cli("cost", "report", "--pseudonymous", "--output", str(deployment.home / "reports" /
                                                                         "cost-pseudonymous.html"))
    return alice, bob


@pytest.mark.parametrize("deployment", [
    pytest.param("sqlite+local", id="sqlite+local"),
    pytest.param("postgres+s3", marks=[pytest.mark.postgres, pytest.mark.s3], id="postgres+s3"),
], indirect=True)
def test_the_main_job_leaves_canaries_only_where_declared_and_none_of_an_erased_user(
    deployment: Deployment, book: CanaryBook, model_server: ModelServer
) -> None:
    alice, bob = _main_job(deployment, book, model_server)
    before = scan(deployment.sinks(), book)
    assert not judge(before), report(judge(before))
    assert any(path == "/v1/metrics" for path, _ in deployment.receiver.all_bodies()), (
        "teamstore's metrics were exported, and so searched"
    )
    assert {h.canary.token for h in before} >= {alice.user_id, bob.user_id, alice.sessions[0]}, (
        "the scan finds what the stores legitimately hold, so it can find a leak"
    )
    assert not [h for h in before if h.canary.kind in WORDS], "every store holds the users' words sealed only"
    assert any("ts_user_memory_facts" in h.location and h.canary.owner == "bob" for h in before), (
        "the support team's memory keeps a fact taken from bob's words (his router), sealed: the scan reaches "
        "its row (by his id), and the erasure must"
    )
    assert any("ts_user_memory_forgets" in h.location and h.canary.owner == "bob" for h in before), (
        "bob's forget is recorded by his id: the erasure must delete it"
    )

    handed_over = deployment.home.parent / "handed-over"
    handed_over.mkdir()
    _exported_everything_held(deployment, book, alice, before, handed_over)

    receipt = erase(deployment, book, bob)
    assert receipt["status"] == "completed", receipt
    nothing = export(deployment, book, bob, handed_over / "bob.zip", ok=(3,))
    assert nothing["status"] == "no_match" and nothing["path"] is None and not (handed_over / "bob.zip").exists()
    readable = deployment.home / "reports" / "cost.html"
    deployment.cli("cost", "report", "--output", str(readable))  # after the erasure: bob reads as 'erased'
    after = judge(scan(deployment.sinks(), book), erased={"bob"})
    assert not after, report(after)
    page = readable.read_text(encoding="utf-8")
    assert alice.user_id in page  # bob's sessions, under no name: each its own row, by its new ledger key
    assert re.search(r"<td><bdi>erased</bdi> / <bdi>erased-[0-9a-f]{12}</bdi></td>", page), page


# Where the export hands over what each sink location holds (the embedded database's files hold what its
# tables hold). A location holding a user's data that no entry names is a store the export does not cover.
EXPORTED_AS = (
    (r"\bts_sessions\b", "resume_state.json"),
    (r"\bts_quarantine\b", "quarantine.json"),
    (r"\bts_user_memory\b|\bts_user_memory_facts\b|\bts_user_memory_forgets\b", "memory.json"),
    (r"\bts_subjects\b|\bts_subject_sessions\b", "subject.json"),
    (r"\bts_transcript_outbox\b", "outbox.json"),
    (r"\bts_usage\b", "ledger.json"),
    (r"\bts_data_keys\b", "keys.json"),
    (r"\bts_erasure_requests\b|\bts_user_holds\b", "erasure_requests.json"),
    (r"^transcripts/subjects/|^s3://", "transcripts/"),
)
SAME_AS_TABLES = r"(^|/)teamstore\.db(-wal|-shm|-journal)?$"


def _exported_everything_held(
    deployment: Deployment, book: CanaryBook, user: User, held: list[Hit], folder: Path
) -> None:
    """``teamstore export`` of ``user``: every canary of theirs a store held is in the archive, in the part
    for that store; nothing of another user's and no secret is; the manifest holds none of their data."""
    manifest = export(deployment, book, user, folder / f"{user.alias}.zip")
    assert manifest["status"] == "exported", manifest
    with zipfile.ZipFile(manifest["path"]) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    missing = []
    for hit in held:
        if hit.canary.owner != user.alias or hit.sink not in (DATABASE, FILES, S3) or re.search(SAME_AS_TABLES,
                                                                                                 hit.location):
            continue
        part = next((part for where, part in EXPORTED_AS if re.search(where, hit.location)), None)
        given = b"".join(data for name, data in files.items() if part is not None and name.startswith(part))
        if hit.canary not in {canary for canary, _ in book.find(given)}:
            missing.append(f"{hit.canary.origin} held in {hit.sink}: {hit.location} (exported as {part})")
    assert not missing, "not exported:\n" + "\n".join(missing)
    # The stores hold the words sealed (the scan above sees ciphertext only): the export opens them.
    for part in ("resume_state.json", "transcripts/"):
        given = b"".join(data for name, data in files.items() if name.startswith(part))
        assert user.tasks[0] in given.decode("utf-8"), f"{part} holds the user's words, opened"
    found = {canary for data in files.values() for canary, _ in book.find(data)}
    strangers = [c.origin for c in found if c.kind is Kind.SECRET or (c.owner or user.alias) != user.alias]
    assert not strangers, strangers
    leaked = [c.origin for c, _ in book.find(json.dumps(manifest["stores"]).encode()) if c.kind in USER_DATA]
    assert not leaked, leaked
