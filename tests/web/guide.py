"""The web service docs/services.md builds, assembled from the guide's own code and run under a real uvicorn.

    files = write_guide_files(tmp_path / "app")          # service.py, test_service.py: the guide's blocks
    register_team(home, delay_seconds=0.1)               # support_triage@production, checkpointed every turn
    with GuideServer(files, env) as server:              # `uvicorn service:app` on a free port
        httpx.post(f"{server.url}/users/alice/sessions/t-1/messages", json={"text": "hi"})

A block of the guide belongs to a file when an HTML comment naming the file (``<!-- service.py -->``) stands
on the line before its fence; the blocks of one file are joined in the guide's order, so the app is what the
guide shows and nothing else.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from config_registry import Registry
from teamstore.examples import example_manifest, support_escalation
from tests.services import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
GUIDE = ROOT / "docs" / "services.md"
_BLOCK = re.compile(r"^<!-- (?P<file>[\w.]+) -->\n```python\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)


def guide_blocks(text: str) -> dict[str, list[str]]:
    """The guide's marked python blocks, by the file each belongs to, in the guide's order."""
    blocks: dict[str, list[str]] = {}
    for found in _BLOCK.finditer(text):
        blocks.setdefault(found["file"], []).append(found["code"])
    return blocks


def write_guide_files(folder: Path) -> Path:
    """Write each file the guide's marked blocks make into ``folder`` (made), returning it."""
    folder.mkdir(parents=True, exist_ok=True)
    blocks = guide_blocks(GUIDE.read_text(encoding="utf-8"))
    assert {"service.py", "test_service.py"} <= set(blocks), f"{GUIDE.name} marks no blocks of {set(blocks)}"
    for name, parts in blocks.items():
        (folder / name).write_text("\n\n".join(parts), encoding="utf-8")
    return folder


TURNS = 6
"""The turns of a run of the team :func:`register_team` registers (it stops at its seventh message)."""


def register_team(home: Path, delay_seconds: float) -> None:
    """Register the team the guide's service runs (``support_triage@production``) in ``home``'s registry: the
    example escalation team under that name, checkpointed after every turn, each model call taking
    ``delay_seconds`` (so a request can be caught mid-run). Registered again with another delay, it is a new
    version of the team, labelled production."""
    manifest = example_manifest("support_escalation").model_copy(update={"name": "support_triage"})
    Registry(home / "registry", create=not (home / "registry").exists()).add(
        "support_triage", support_escalation(delay_seconds).dump_component(), manifest, "first version",
        label="production")


class GuideServer:
    """``uvicorn service:app`` in a process of its own, serving the guide's app from ``folder`` on a free port
    of loopback, with ``env`` as its whole environment (plus the import path)."""

    def __init__(self, folder: Path, env: dict[str, str], *uvicorn_args: str) -> None:
        self.folder, self.port = folder, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        path = os.pathsep.join([str(folder), str(ROOT / "platform"), str(ROOT)])
        self.log = folder / f"uvicorn-{self.port}.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "service:app", "--host", "127.0.0.1", "--port", str(self.port),
                 *uvicorn_args], cwd=folder, env={**env, "PYTHONPATH": path}, stdout=out, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"uvicorn exited with {self.process.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/openapi.json", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError(f"uvicorn did not answer within {timeout} s:\n{self.output()}")

    def output(self) -> str:
        """What the server printed so far."""
        return self.log.read_text(encoding="utf-8", errors="replace")

    def terminate(self, timeout: float = 30) -> bool:
        """SIGTERM, as an orchestrator stops a pod, and wait for the process to exit. Whether the app's lifespan
        ended as a graceful shutdown ends it (uvicorn then exits by the signal it was given, as its default
        action would)."""
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout)
        return "Application shutdown complete." in self.output()

    def stop(self) -> None:
        """Stop the server if it still runs (SIGKILL after 10 s of SIGTERM)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> GuideServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
