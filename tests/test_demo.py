"""`teamstore demo`, the main job, runs offline on the embedded default and shows what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_demo_runs_end_to_end_offline(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AWS_", "TEAMSTORE_"))}
    env.update(TEAMSTORE_HOME=str(tmp_path / "home"), OPENAI_API_KEY="")
    proc = subprocess.run([sys.executable, "-m", "teamstore", "demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr
    assert "context came back" in out
    assert "resume: resumed" in out and "resume: definition_changed" in out
    assert "quarantined: alice/" in out
    assert "after the restore the researcher knows alice's first message again" in out
    assert "receipt er-" in out and ": completed" in out
    assert "sessions left for bob: 0" in out
    assert (tmp_path / "home" / "teamstore.db").exists()
    assert any((tmp_path / "home" / "transcripts").rglob("*.jsonl.gz"))
