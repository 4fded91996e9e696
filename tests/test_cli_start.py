"""The command line starts without the heavy packages its commands use: they are imported when a command
runs, and only those it needs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from teamstore.audit.cost import DIMENSIONS
from teamstore.cli.cost import GROUPINGS
from teamstore.db.migrate import head_revision, shipped_head

HEAVY = ("asyncio", "sqlalchemy", "alembic", "autogen_core", "autogen_agentchat", "boto3", "opentelemetry", "pydantic",
         "pyarrow", "psycopg", "git")


def _imported_after(code: str, home: Path) -> list[str]:
    probe = f"import sys\n{code}\nprint(__import__('json').dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120,
                          env={"TEAMSTORE_HOME": str(home), "PATH": ""})
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_command_line_and_its_help_import_no_database_runtime_or_exporter(tmp_path: Path) -> None:
    code = ("from teamstore.cli import app\nimport typer.testing\n"
            "result = typer.testing.CliRunner().invoke(app, ['--help'])\nassert result.exit_code == 0, result.output")
    modules = _imported_after(code, tmp_path)
    assert [m for m in modules if m.split(".")[0] in HEAVY] == []


def test_a_cost_query_imports_the_database_layer_but_not_autogen_boto3_or_opentelemetry(tmp_path: Path) -> None:
    code = ("from teamstore.cli import app\nimport typer.testing\nrunner = typer.testing.CliRunner()\n"
            "assert runner.invoke(app, ['db', 'upgrade']).exit_code == 0\n"
            "import sys\nfor name in [m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako')]:\n"
            "    del sys.modules[name]\n"
            # an empty ledger: the query runs and matches nothing (exit 3), with what it imported
            "result = runner.invoke(app, ['cost', '--format', 'json'])\nassert result.exit_code == 3, result.output")
    modules = _imported_after(code, tmp_path)
    assert "sqlalchemy" in modules
    assert [m for m in modules if m.split(".")[0] in ("autogen_core", "autogen_agentchat", "boto3", "opentelemetry",
                                                         "pyarrow", "alembic")] == []


def test_the_cost_commands_help_names_every_grouping_the_ledger_query_knows() -> None:
    assert tuple(DIMENSIONS) == GROUPINGS


def test_the_newest_migration_read_without_alembic_is_alembics_head() -> None:
    assert shipped_head() == head_revision()
