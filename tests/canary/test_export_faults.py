"""Exports under faults: an archive whose path, named after the user, is taken by the time it is written. The
operator is told, and the export's record, which outlives the user's erasure, holds none of the user's ids."""

from __future__ import annotations

import pytest

from tests.canary.canaries import CanaryBook
from tests.canary.deployment import Deployment
from tests.canary.flows import ON_EACH_DATABASE, User, first_run
from tests.canary.model_server import ModelServer
from tests.canary.policy import judge, report, scan

pytestmark = pytest.mark.otlp


@pytest.mark.parametrize("deployment", ON_EACH_DATABASE, indirect=True)
def test_an_export_that_fails_records_no_path_that_names_the_user(
    deployment: Deployment, book: CanaryBook, model_server: ModelServer
) -> None:
    alice = User.plant(book, "alice")
    first_run(deployment, alice, model_server.base_url)
    handed_over = deployment.home.parent / "handed-over"
    handed_over.mkdir()
    target = handed_over / f"{alice.user_id}.zip"  # a desk that names archives after whose they are

    refused = deployment.cli("export", "--user", alice.user_id, "--output", str(target), ok=(1,),
                             host=["--path-taken-after-the-look"])

    # The operator is told which path, as they gave it (the terminal wraps the line where it is full).
    assert f"{target} exists: an export never overwrites" in refused.stderr.replace("\n", ""), refused.stderr
    assert target.read_bytes() == b"someone's archive"
    assert deployment.sql("SELECT status, detail FROM ts_export_requests") == [("failed", "the archive: "
                                                                                         "ExportTargetExists")]
    leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks)
