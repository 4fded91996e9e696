"""A user's data key reaches no log. KMS's ``Encrypt`` and ``Decrypt`` carry it in plain (their ``Plaintext``),
and botocore logs each request's and answer's body at DEBUG: whoever kept such a log could open the user's
sealed data long after an erasure destroyed the key. So every command, and a host's platform, runs at DEBUG
here, and their stderr and log records are searched for the key as KMS sends it (base64) and as bytes
would be shown (hex); a host that sets botocore to DEBUG itself, which teamstore respects, still logs no key."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest

from teamstore.app import open_platform
from tests.canary.canaries import CanaryBook
from tests.canary.conftest import MakeDeployment
from tests.canary.deployment import Deployment
from tests.canary.flows import TRIAGE, User, erase, export, first_run, register_teams
from tests.canary.model_server import ModelServer
from tests.canary.policy import judge, report, scan

pytestmark = [pytest.mark.otlp, pytest.mark.s3]


def _data_key(deployment: Deployment, user: User) -> bytes:
    """The user's data key in plain, unwrapped by the suite's own KMS client from the row that stores it."""
    ((key_id, wrapped),) = deployment.sql("SELECT key_id, wrapped FROM ts_data_keys WHERE user_id = :u",
                                          u=user.user_id)
    answer: dict[str, Any] = deployment.kms_client().decrypt(
        CiphertextBlob=bytes(wrapped), EncryptionContext={"teamstore": "data-key", "key_id": key_id})
    return bytes(answer["Plaintext"])


def _logged(deployment: Deployment) -> list[tuple[str, bytes]]:
    """Every CLI process's stderr and every log record of this process, as captured."""
    return [*deployment.cli_stderr.read(), *deployment.log_records.read()]


async def test_a_users_data_key_reaches_no_log_at_debug_through_runs_rotation_export_and_erasure(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    deployment = make_deployment("sqlite+s3")
    deployment.use_kms()
    alice = User.plant(book, "alice")
    first_run(deployment, alice, model_server.base_url)  # the key made, wrapped by Encrypt
    key = _data_key(deployment, alice)
    deployment.apply(monkeypatch)
    with deployment.recording_logs():  # a host's platform, logging at DEBUG: Decrypt in this process
        async with open_platform() as platform, platform.session(alice.user_id, alice.sessions[1], team=TRIAGE) as s:
            await s.run(alice.tasks[1])
    deployment.cli("transcripts", "show", "--user", alice.user_id, "--session", alice.sessions[0], "--json")
    export(deployment, book, alice, tmp_path / "alice.zip")
    deployment.cli("keys", "rotate", "--json")  # Decrypt, and Encrypt under the new key
    assert _data_key(deployment, alice) == key, "the rotation wrapped the same key again"
    assert erase(deployment, book, alice)["status"] == "completed"

    forms = {"base64": base64.b64encode(key), "hex": key.hex().encode(), "HEX": key.hex().upper().encode(),
             "KMS's Plaintext field": b"Plaintext"}
    found = [f"{form} in {where}" for where, text in _logged(deployment) for form, needle in forms.items()
             if needle in text]
    assert not found, found
    assert any(b"DEBUG " in text for _, text in _logged(deployment)), "the processes did log at DEBUG"
    leaks = judge(scan(deployment.sinks(), book), erased={"alice"})
    assert not leaks, report(leaks)


async def test_a_users_data_key_reaches_no_log_of_a_host_that_sets_botocore_to_debug_itself(
    make_deployment: MakeDeployment, book: CanaryBook, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    deployment = make_deployment("sqlite+s3")
    deployment.use_kms()
    alice = User.plant(book, "alice")
    register_teams(deployment.registry, model_server.base_url)
    deployment.apply(monkeypatch)
    botocore = logging.getLogger("botocore")
    before = botocore.level
    botocore.setLevel(logging.DEBUG)  # the host's own choice, which teamstore keeps
    try:
        with deployment.recording_logs():
            for session in alice.sessions[:2]:  # the key made (Encrypt), then opened by a new platform (Decrypt)
                async with open_platform() as platform, platform.session(alice.user_id, session, team=TRIAGE) as s:
                    await s.run(alice.tasks[0])
    finally:
        botocore.setLevel(before)
    key = _data_key(deployment, alice)
    forms = {"base64": base64.b64encode(key), "hex": key.hex().encode(), "HEX": key.hex().upper().encode(),
             "KMS's Plaintext field": b"Plaintext"}
    logged = list(deployment.log_records.read())
    found = [f"{form} in {where}" for where, text in logged for form, needle in forms.items() if needle in text]
    assert not found, found
    kms = [text for where, text in logged if where.startswith("logger botocore.")]
    assert any(b"OperationModel(name=Encrypt)" in text and b"KMS body hidden" in text for text in kms), kms
    assert any(b"OperationModel(name=Decrypt)" in text for text in kms), "the key was opened from KMS"
    assert any(b"PutObject" in text and b"'body': " in text for text in kms), "other bodies stay, for debugging"
    leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks)
