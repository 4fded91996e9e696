"""The web service docs/services.md builds, from the guide's own code, under a real uvicorn and driven over real
HTTP, on SQLite and Postgres with both kinds of lease: a conversation, its stream, errors as the statuses the
guide's table gives, a client that drops the stream, two requests for one session, an erasure under way, and a
SIGTERM with a request in flight."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from config_registry import Registry
from teamstore.db.engine import create_engine
from teamstore.db.fence import held
from teamstore.errors import KeyFileInDoubt
from tests.conftest import prepare
from tests.runtime.nul_team import REPLY as NUL_REPLY
from tests.runtime.nul_team import RESULT as NUL_RESULT
from tests.runtime.nul_team import register as register_nul_team
from tests.web.guide import GUIDE, ROOT, TURNS, GuideServer, guide_blocks, register_team, write_guide_files

TEXT = "My router keeps dropping"
SOURCES = ["user", *["triage", "researcher", "critic"] * 2]
"""Who says what in one whole run of the registered team: the task, then its six turns."""

Serve = Callable[..., GuideServer]
both_databases = pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
                                         indirect=True)
"""For what no kind of lease changes: SQLite and Postgres (with lock leases) only, to keep the suite short."""


@pytest.fixture
def app_folder(tmp_path: Path) -> Path:
    """The guide's files (``service.py``, ``test_service.py``), as the guide shows them."""
    return write_guide_files(tmp_path / "app")


@pytest.fixture
async def serve(backend: tuple[str, str], app_folder: Path, monkeypatch: pytest.MonkeyPatch
                ) -> AsyncIterator[Serve]:
    """Start the guide's service on the backend (``serve(delay_seconds, lease_timeout, *uvicorn_args, **env)``,
    ``env`` being more ``TEAMSTORE_*`` settings); this process reads the same database and home. Every server is
    stopped at the end."""
    url, lease = backend
    await prepare(url, lease)  # production migrates by `teamstore db upgrade`, never at a worker's start
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", url)
    monkeypatch.setenv("TEAMSTORE_SESSION_LEASE", lease)
    home = Path(os.environ["TEAMSTORE_HOME"])
    servers: list[GuideServer] = []

    def start(delay_seconds: float = 0.05, lease_timeout: float = 2.0, *uvicorn_args: str, **settings: str
              ) -> GuideServer:
        if not (home / "registry").exists():
            register_team(home, delay_seconds)
        env = {**os.environ, "TEAMSTORE_LEASE_TIMEOUT_SECONDS": str(lease_timeout),
               **{f"TEAMSTORE_{name.upper()}": value for name, value in settings.items()}}
        servers.append(GuideServer(app_folder, env, *uvicorn_args))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def session_url(server: GuideServer, user: str = "alice", session: str = "t-1") -> str:
    return f"{server.url}/users/{user}/sessions/{session}"


async def read_stream(client: httpx.AsyncClient, url: str, text: str = TEXT, keep: int | None = None
                      ) -> list[dict[str, Any]]:
    """The NDJSON lines of a streamed run; with ``keep``, only the first ``keep``, the connection then closed
    as a client that goes away closes it."""
    lines: list[dict[str, Any]] = []
    async with client.stream("POST", f"{url}/stream", json={"text": text}) as said:
        assert said.status_code == 200 and said.headers["content-type"] == "application/x-ndjson"
        async for line in said.aiter_lines():
            lines.append(json.loads(line))
            if len(lines) == keep:
                break
    return lines


async def transcripts(user: str, session: str) -> list[dict[str, Any]]:
    """The session's transcripts as ``teamstore transcripts show`` reads them (oldest first)."""
    from teamstore.analytics.api import on_app
    from teamstore.cli.transcripts import load_transcripts

    page, queued = await on_app(None, lambda app: load_transcripts(
        app.engine, app.transcript_store, user, session, None, 10, app.keys))
    assert queued == 0
    return list(page.runs)


async def runs_interrupted(user: str, session: str) -> int:
    """``runs_interrupted`` of the session in ``teamstore cost``."""
    from teamstore.analytics.api import on_app, report_on
    from teamstore.analytics.query import CostQuery

    report = await on_app(None, lambda app: report_on(app, CostQuery.build("session", user=user, session=session),
                                                      False))
    return report.total.runs_interrupted


def test_the_readme_shows_a_piece_of_the_guide_s_service_rather_than_a_service_of_its_own() -> None:
    # One full example, the one these tests run: a second copy in the README drifted from it (a query
    # parameter where the guide takes a JSON body, no handler to make a blank message a 422).
    service = "\n\n".join(guide_blocks(GUIDE.read_text(encoding="utf-8"))["service.py"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = re.findall(r"^```python\n(.*?)^```$", readme, re.MULTILINE | re.DOTALL)
    assert shown, "the README shows no request handler"
    for code in shown:
        assert code in service, f"README.md shows code that docs/services.md's service does not hold:\n{code}"


def test_the_guide_s_own_tests_pass_against_the_guide_s_service(app_folder: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning",
         "test_service.py"], cwd=app_folder, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(app_folder), *sys.path])})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_a_key_file_in_doubt_is_a_503_as_a_retry_clears_it(app_folder: Path) -> None:
    # A new database's first key written, its folder not flushed: the retry flushes it, then serves.
    spec = importlib.util.spec_from_file_location("guide_service", app_folder / "service.py")
    assert spec is not None and spec.loader is not None
    service = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(service)
    doubt = KeyFileInDoubt("the key file was written, but its folder could not be flushed", hint="run it again")
    assert service.status_of(doubt) == 503
    assert "| `KeyFileInDoubt` | 503 |" in GUIDE.read_text(encoding="utf-8")


@both_databases
async def test_a_conversation_goes_on_across_requests_and_streams_as_lines(serve: Serve) -> None:
    server = serve()
    async with httpx.AsyncClient(timeout=30) as client:
        url = session_url(server)
        first = await client.post(f"{url}/messages", json={"text": TEXT})
        assert first.status_code == 200 and first.json()["resume"] == "new"
        assert first.json()["reply"].startswith("[offline-small] (You are critic)")
        second = await client.post(f"{url}/messages", json={"text": "Still broken"})
        assert second.json()["resume"] == "resumed"
        lines = await read_stream(client, url, "Now it is fine")
    assert [line["source"] for line in lines[:-1]] == SOURCES and lines[0]["text"] == "Now it is fine"
    assert lines[-1] == {"done": lines[-1]["done"], "resume": "resumed"} and "7" in lines[-1]["done"]


@both_databases
async def test_bad_input_is_a_422_naming_the_error_and_the_session_is_as_it_was(serve: Serve) -> None:
    server = serve(max_sessions_per_user="1")
    async with httpx.AsyncClient(timeout=30) as client:
        blank = await client.post(f"{session_url(server)}/messages", json={"text": "  "})
        assert (blank.status_code, blank.json()["error"]) == (422, "InvalidTask")
        nul = await client.post(f"{session_url(server)}/messages", json={"text": "ticket\u000055102"})
        assert (nul.status_code, nul.json()["error"]) == (422, "InvalidTask")  # no Postgres text column holds NUL
        spaced = await client.post(f"{session_url(server, user=' alice')}/messages", json={"text": TEXT})
        assert (spaced.status_code, spaced.json()["error"]) == (422, "InvalidIdentifier")
        assert "hint" not in spaced.json()  # the fix is for whoever runs the service: logs, not the response
        lines = await read_stream(client, session_url(server), " ")
        assert lines == [{"error": "InvalidTask", "status": 422, "message": lines[0]["message"]}]
        after = await client.post(f"{session_url(server)}/messages", json={"text": TEXT})
        assert after.json()["resume"] == "new"
        another = await client.post(f"{session_url(server, session='t-2')}/messages", json={"text": TEXT})
    assert (another.status_code, another.json()["error"]) == (409, "TooManySessions")  # her one live session


@both_databases
async def test_nul_in_a_model_s_reply_and_a_tool_s_result_comes_back_whole_in_the_reply_and_the_stream(
    serve: Serve,
) -> None:
    # What a model or a tool says is not the user's to fix: unlike a task's NUL (a 422 above), it is kept and sent.
    register_nul_team(Registry(Path(os.environ["TEAMSTORE_HOME"]) / "registry", create=True), name="support_triage")
    server = serve()
    async with httpx.AsyncClient(timeout=30) as client:
        first = await client.post(f"{session_url(server)}/messages", json={"text": TEXT})
        assert (first.status_code, first.json()) == (200, {"reply": NUL_REPLY, "resume": "new"})
        lines = await read_stream(client, session_url(server), "And now?")
    assert [line.get("type") for line in lines] == [
        "TextMessage", "ToolCallRequestEvent", "ToolCallExecutionEvent", "TextMessage", None]
    assert f"content={NUL_RESULT!r}" in lines[2]["text"]  # AutoGen's text of a tool's results is their repr
    assert lines[3]["text"] == NUL_REPLY and lines[-1]["resume"] == "resumed"


async def test_a_second_request_for_a_session_in_use_is_a_409_and_the_first_run_is_kept(serve: Serve) -> None:
    server = serve(delay_seconds=0.3, lease_timeout=0.3)  # a run of ~2 s; the second waits 0.3 s for it
    url = session_url(server)
    async with httpx.AsyncClient(timeout=30) as client, client.stream(
            "POST", f"{url}/stream", json={"text": TEXT}) as first:
        lines = first.aiter_lines()
        assert json.loads(await anext(lines))["source"] == "user"  # the session is open, its run under way
        busy = await client.post(f"{url}/messages", json={"text": "Hello?"})
        assert (busy.status_code, busy.json()["error"]) == (409, "SessionBusy")
        streamed = await read_stream(client, url, "Hello?")
        assert [(line["error"], line["status"]) for line in streamed] == [("SessionBusy", 409)]
        rest = [json.loads(line) async for line in lines]
        assert rest[-1]["resume"] == "new" and len(rest) == TURNS + 1
        after = await client.post(f"{url}/messages", json={"text": "Hello?"})
    assert after.json()["resume"] == "resumed"


async def test_a_client_that_drops_the_stream_leaves_the_run_to_the_continue_endpoint_recorded_once(
    serve: Serve,
) -> None:
    server = serve(delay_seconds=0.2)
    url = session_url(server, "bob", "s-1")
    async with httpx.AsyncClient(timeout=30) as client:
        seen = await read_stream(client, url, keep=3)  # the task and two turns, then the phone's connection drops
        assert [line["source"] for line in seen] == SOURCES[:3]
        refused = await client.post(f"{url}/messages", json={"text": "Are you there?"})
        assert refused.status_code == 409 and refused.json()["error"] == "RunInterrupted"
        assert refused.json()["continue"] == "/users/bob/sessions/s-1/continue"
        continued = await client.post(f"{server.url}{refused.json()['continue']}")
        assert continued.status_code == 200 and continued.json()["reply"].startswith("[offline-small] (You are critic)")
        again = await client.post(f"{server.url}{refused.json()['continue']}")
        assert (again.status_code, again.json()["error"]) == (409, "NoInterruptedRun")
        after = await client.post(f"{url}/messages", json={"text": "Are you there?"})
        assert after.status_code == 200 and after.json()["resume"] == "resumed"
    assert server.terminate()  # the audit written in the background is drained at shutdown
    dropped, last = await transcripts("bob", "s-1")
    assert [item["source"] for item in dropped["items"]] == SOURCES  # the one run, whole, written once
    assert dropped["items"][0]["message"]["content"] == TEXT and not dropped["run"]["error"]
    assert last["items"][0]["message"]["content"] == "Are you there?"
    assert await runs_interrupted("bob", "s-1") == 1


@both_databases
async def test_an_erasure_under_way_is_a_409_for_a_new_request_and_for_the_run_it_met(
    serve: Serve, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from teamstore import erase_user

    monkeypatch.setenv("TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS", "0.5")
    server = serve(delay_seconds=0.2)
    async with httpx.AsyncClient(timeout=30) as client, client.stream(
            "POST", f"{session_url(server, 'erin')}/stream", json={"text": TEXT}) as running:
        lines = running.aiter_lines()
        assert json.loads(await anext(lines))["source"] == "user"
        erasure = asyncio.ensure_future(erase_user("erin", reason="GDPR art. 17"))
        await _fenced("erin")
        new = await client.post(f"{session_url(server, 'erin', 't-2')}/messages", json={"text": TEXT})
        assert (new.status_code, new.json()["error"]) == (409, "ErasureInProgress")
        last = [json.loads(line) async for line in lines][-1]
        assert (last["error"], last["status"]) == ("ErasureInProgress", 409)
        receipt = await erasure
    assert receipt.ok


async def _fenced(user: str) -> None:
    """Wait until an erasure fences ``user``."""
    engine = create_engine(os.environ["TEAMSTORE_DATABASE_URL"])
    try:
        for _ in range(600):
            async with engine.connect() as conn:
                if (await conn.execute(select(held(user)))).scalar_one():
                    return
            await asyncio.sleep(0.01)
        raise AssertionError(f"no erasure fenced {user}")
    finally:
        await engine.dispose()


async def test_a_sigterm_lets_the_request_in_flight_finish_and_the_next_worker_resumes_the_session(
    serve: Serve,
) -> None:
    server = serve(delay_seconds=0.2)
    url = session_url(server)
    async with httpx.AsyncClient(timeout=30) as client, client.stream(
            "POST", f"{url}/stream", json={"text": TEXT}) as running:
        lines = running.aiter_lines()
        assert json.loads(await anext(lines))["source"] == "user"
        stopping = asyncio.get_running_loop().run_in_executor(None, server.terminate)
        rest = [json.loads(line) async for line in lines]
        assert rest[-1]["resume"] == "new" and len(rest) == TURNS + 1  # the run finished and was saved
        assert await stopping
    following = serve()  # the next worker: the session's lease was given back
    async with httpx.AsyncClient(timeout=30) as client:
        after = await client.post(f"{session_url(following)}/messages", json={"text": "Still broken"})
    assert after.status_code == 200 and after.json()["resume"] == "resumed"


async def test_a_sigterm_past_the_server_s_grace_leaves_the_run_to_the_next_worker_s_continue_endpoint(
    serve: Serve,
) -> None:
    server = serve(0.4, 2.0, "--timeout-graceful-shutdown", "1")  # a run of ~2.4 s, one second of grace
    url = session_url(server)
    async with httpx.AsyncClient(timeout=30) as client, client.stream(
            "POST", f"{url}/stream", json={"text": TEXT}) as running:
        lines = running.aiter_lines()
        for _ in range(2):  # the task and the first turn: a checkpoint of the run is stored
            await anext(lines)
        stopping = asyncio.get_running_loop().run_in_executor(None, server.terminate)
        with pytest.raises(httpx.RemoteProtocolError):  # the server cut the response off at its grace's end
            _ = [line async for line in lines]
        assert await stopping
    following = serve()
    async with httpx.AsyncClient(timeout=30) as client:
        refused = await client.post(f"{session_url(following)}/messages", json={"text": "Still broken"})
        assert (refused.status_code, refused.json()["error"]) == (409, "RunInterrupted")
        continued = await client.post(f"{following.url}{refused.json()['continue']}")
        assert continued.status_code == 200
    assert following.terminate()
    (run,) = await transcripts("alice", "t-1")
    assert [item["source"] for item in run["items"]] == SOURCES



@both_databases
async def test_a_client_that_gives_up_on_a_plain_request_leaves_its_run_to_finish_and_be_saved(serve: Serve) -> None:
    server = serve(delay_seconds=0.2)  # a run of ~1.2 s
    url = session_url(server)
    async with httpx.AsyncClient(timeout=0.5) as impatient:
        with pytest.raises(httpx.ReadTimeout):  # the client's timeout closes its connection mid-run
            await impatient.post(f"{url}/messages", json={"text": TEXT})
    async with httpx.AsyncClient(timeout=30) as client:
        retried = await client.post(f"{url}/messages", json={"text": TEXT})  # waits for the run, then resumes it
    assert retried.status_code == 200 and retried.json()["resume"] == "resumed"
    assert server.terminate()
    first, second = await transcripts("alice", "t-1")
    assert [item["source"] for item in first["items"]] == SOURCES and not first["run"]["error"]
    assert [item["source"] for item in second["items"]] == SOURCES  # the retry: a run of its own after it



@both_databases
async def test_a_run_interrupted_before_a_release_is_a_409_at_the_continue_endpoint_and_a_new_message_runs_on(
    serve: Serve,
) -> None:
    server = serve(0.2, 2.0, registry_refresh_seconds="0")
    url = session_url(server, "bob", "s-1")
    async with httpx.AsyncClient(timeout=30) as client:
        await read_stream(client, url, keep=3)
        register_team(Path(os.environ["TEAMSTORE_HOME"]), delay_seconds=0.1)  # a new version labelled production
        refused = await client.post(f"{url}/continue")
        assert (refused.status_code, refused.json()["error"]) == (409, "RunCannotContinue")
        assert "a run continues only on the version that ran it" in refused.json()["message"]
        new = await client.post(f"{url}/messages", json={"text": "Are you there?"})
        assert new.status_code == 200  # the interrupted run is set aside; the new version runs
        gone = await client.post(f"{url}/continue")
    assert (gone.status_code, gone.json()["error"]) == (409, "NoInterruptedRun")
