"""Bad settings are typed errors naming the variable, never pydantic's ValidationError or a traceback; a database
URL is printed without its password."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from teamstore.cli import app
from teamstore.db.engine import create_engine, redact_url
from teamstore.erasure.settings import ErasureSettings
from teamstore.errors import ConfigurationError
from teamstore.people import OPERATOR_VARIABLE
from teamstore.settings import Settings


@pytest.mark.parametrize(
    ("variable", "value", "names"),
    [
        ("TEAMSTORE_STATE_TTL_DAYS", "-1", "TEAMSTORE_STATE_TTL_DAYS='-1'"),
        ("TEAMSTORE_SESSION_LEASE", "bogus", "TEAMSTORE_SESSION_LEASE='bogus'"),
        ("TEAMSTORE_DB_POOL_SIZE", "x", "TEAMSTORE_DB_POOL_SIZE='x'"),
        # Numbers past what a date or a database column holds: refused here, not as an OverflowError
        # traceback at the first save or sweep.
        ("TEAMSTORE_STATE_TTL_DAYS", "inf", "TEAMSTORE_STATE_TTL_DAYS='inf'"),
        ("TEAMSTORE_STATE_TTL_DAYS", "1e9", "TEAMSTORE_STATE_TTL_DAYS='1e9'"),
        ("TEAMSTORE_LEASE_TTL_SECONDS", "1e12", "TEAMSTORE_LEASE_TTL_SECONDS='1e12'"),
        ("TEAMSTORE_LEASE_TIMEOUT_SECONDS", "inf", "TEAMSTORE_LEASE_TIMEOUT_SECONDS='inf'"),
        ("TEAMSTORE_LEDGER_RETENTION_DAYS", "999999999999", "TEAMSTORE_LEDGER_RETENTION_DAYS='999999999999'"),
        ("TEAMSTORE_STATE_MAX_BYTES", str(2**31), "TEAMSTORE_STATE_MAX_BYTES"),
        ("TEAMSTORE_TASK_MAX_BYTES", "0", "TEAMSTORE_TASK_MAX_BYTES='0'"),
        # The per-user session bound: 0 is no "unbounded" (no other cap reads it so), and a count past
        # the upper bound would make every new session of a large user slow.
        ("TEAMSTORE_MAX_SESSIONS_PER_USER", "0", "TEAMSTORE_MAX_SESSIONS_PER_USER='0'"),
        ("TEAMSTORE_MAX_SESSIONS_PER_USER", "100001", "TEAMSTORE_MAX_SESSIONS_PER_USER='100001'"),
        ("TEAMSTORE_MAX_SESSIONS_PER_USER", "1.5", "TEAMSTORE_MAX_SESSIONS_PER_USER='1.5'"),
    ],
)
def test_a_bad_setting_is_a_configuration_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, names: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as info:
        Settings()
    assert names in info.value.message and info.value.hint


@pytest.mark.parametrize("value", ["abc", "1e12", "99999999999"])
def test_a_bad_erasure_setting_is_a_configuration_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("TEAMSTORE_ERASURE_DUE_DAYS", value)
    with pytest.raises(ConfigurationError, match=f"TEAMSTORE_ERASURE_DUE_DAYS='{value}'"):
        ErasureSettings()


@pytest.mark.parametrize("value", ["0", "-1", "0.5", "abc", "1e9", "inf", "nan"])
def test_a_bad_export_lease_is_a_configuration_error_naming_the_variable_and_what_it_takes(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("TEAMSTORE_EXPORT_LEASE_SECONDS", value)
    with pytest.raises(ConfigurationError) as info:
        Settings()
    assert f"TEAMSTORE_EXPORT_LEASE_SECONDS='{value}': takes a number of seconds from 1 to 86400" in info.value.message
    assert info.value.hint


def test_an_export_lease_set_is_read_and_an_empty_one_is_the_default_as_every_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEAMSTORE_EXPORT_LEASE_SECONDS", "600")
    assert Settings().export_lease_seconds == 600
    monkeypatch.setenv("TEAMSTORE_EXPORT_LEASE_SECONDS", "")  # an unset "$LEASE" in a template
    assert Settings().export_lease_seconds == 120


def test_a_mistyped_setting_given_in_code_is_refused_with_the_name_it_may_mean(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigurationError, match="Settings has no setting 'sate_ttl_days'") as refused:
        Settings(sate_ttl_days=1)
    assert refused.value.hint == "did you mean 'state_ttl_days'?"
    with pytest.raises(ConfigurationError, match="no setting 'hash_keys'"):
        ErasureSettings(hash_keys="k")
    monkeypatch.setenv("TEAMSTORE_SATE_TTL_DAYS", "1")  # the environment's other variables are not teamstore's
    assert Settings(state_ttl_days=2).state_ttl_days == 2


def test_a_database_url_that_does_not_parse_is_a_configuration_error_that_hides_it() -> None:
    with pytest.raises(ConfigurationError) as info:
        create_engine("app:s3cret-pw@db.internal/teamstore")  # the scheme forgotten
    assert "s3cret-pw" not in info.value.message and "TEAMSTORE_DATABASE_URL" in (info.value.hint or "")
    for url in ("garbage", "postgresql://app:s3cret-pw@db.internal:notaport/teamstore"):  # ValueError: the port
        with pytest.raises(ConfigurationError) as info:
            create_engine(url)
        assert "is not a URL" in info.value.message and "s3cret-pw" not in str(info.value)
        assert info.value.__suppress_context__


@pytest.mark.parametrize(("url", "driver"), [
    ("postgresql+asyncpg://app:s3cret-pw@db.internal/teamstore", "'asyncpg': teamstore connects to Postgres"),
    ("postgresql+pg8000://app:s3cret-pw@db.internal/teamstore", "'pg8000': teamstore connects to Postgres"),
    ("sqlite+pysqlite:///teamstore.db", "'pysqlite': teamstore connects to SQLite"),
])
def test_a_database_url_naming_another_driver_is_a_configuration_error_saying_which_scheme_to_write(
    url: str, driver: str
) -> None:
    # A URL copied from another service's settings: SQLAlchemy failed on the missing package (or on a sync
    # driver) with a traceback and no fix.
    with pytest.raises(ConfigurationError) as info:
        create_engine(url)
    assert f"the database URL names the driver {driver}" in info.value.message, info.value.message
    assert "s3cret-pw" not in str(info.value) and "TEAMSTORE_DATABASE_URL" in (info.value.hint or "")
    assert url.partition("+")[0] + "://" in (info.value.hint or "")


@pytest.mark.parametrize("variable", ["TEAMSTORE_HOME", "TEAMSTORE_REGISTRY_PATH", "TEAMSTORE_KEY_FILE",
                                      "TEAMSTORE_PRICES_PATH", "TEAMSTORE_DATABASE_URL", "TEAMSTORE_KMS_KEY_ID",
                                      "TEAMSTORE_STATE_TTL_DAYS", "TEAMSTORE_AUTO_MIGRATE"])
def test_an_empty_variable_is_an_unset_one(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    # A deploy script's `TEAMSTORE_KEY_FILE=$UNSET` put the key file, the registry's git repository or the
    # whole home in the working directory (Path("") is "."), or failed to parse.
    monkeypatch.delenv(variable, raising=False)
    unset = Settings()
    monkeypatch.setenv(variable, "")
    assert Settings() == unset
    monkeypatch.setenv("TEAMSTORE_ERASURE_DUE_DAYS", "")
    assert ErasureSettings().due_days == 30


def test_the_command_line_reports_a_bad_setting_without_a_traceback(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AWS_", "TEAMSTORE_"))}
    env.update(TEAMSTORE_HOME=str(tmp_path / "home"), TEAMSTORE_STATE_TTL_DAYS="-1")
    proc = subprocess.run([sys.executable, "-m", "teamstore", "sessions", "list"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "error: TEAMSTORE_STATE_TTL_DAYS" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "sqlite:///:memory:", "sqlite+aiosqlite:///:memory:"])
def test_an_in_memory_sqlite_database_is_refused_as_one_that_keeps_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str
) -> None:
    monkeypatch.setenv("TEAMSTORE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", url)
    result = CliRunner().invoke(app, ["db", "upgrade"])  # it reported the upgrade done, of nothing kept
    assert result.exit_code == 1
    assert "error: TEAMSTORE_DATABASE_URL: an in-memory SQLite database keeps nothing" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret-pw@db.internal/teamstore", "postgresql://app:***@db.internal/teamstore"),
        ("postgresql://app@db.internal/teamstore?password=s3cret-pw&sslmode=require",
         "postgresql://app@db.internal/teamstore?password=***&sslmode=require"),
        ("postgresql://app@db.internal/teamstore?sslmode=require&sslpassword=s3cret-pw",
         "postgresql://app@db.internal/teamstore?sslmode=require&sslpassword=***"),
        ("sqlite:///.teamstore/teamstore.db", "sqlite:///.teamstore/teamstore.db"),
    ],
)
def test_a_database_url_is_printed_without_its_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.postgres
def test_the_db_commands_hide_a_password_given_in_the_query(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # libpq reads ?password= as the password: the server's trust authentication ignores it here.
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", f"{postgres_url}?password=s3cret-pw")
    for args in (["db", "upgrade"], ["db", "current"], ["db", "lease-mode"]):
        out = CliRunner().invoke(app, [*args, "--json"])
        assert out.exit_code == 0, out.output
        assert "s3cret-pw" not in out.output
        assert json.loads(out.stdout)["database"].endswith("?password=***")


def _settings_table() -> dict[str, str]:
    """The README's settings table: each variable it names -> the default shown for it (``A`` / ``B`` rows
    give each of two variables its own)."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    shown: dict[str, str] = {}
    for row in table.splitlines():
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        names, defaults = re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]), cells[1].split(" / ")
        for name, default in zip(names, defaults if len(defaults) == len(names) else [cells[1]] * len(names),
                                 strict=True):
            shown[name] = default
    return shown


def _declared_defaults() -> dict[str, object]:
    declared: dict[str, object] = {OPERATOR_VARIABLE: None}
    for model in (Settings, ErasureSettings):
        prefix = str(model.model_config.get("env_prefix", ""))
        for field, info in model.model_fields.items():
            declared[f"{prefix}{field}".upper()] = info.default
    return declared


def test_the_readme_settings_table_names_every_variable_with_the_default_the_code_uses() -> None:
    # The table is where a bad setting's error sends the reader ("see the settings table in the README"):
    # every variable teamstore reads has a row there, and a fixed default is shown as the code has it.
    shown = _settings_table()
    for variable, default in _declared_defaults().items():
        assert variable in shown, f"{variable} has no row in README.md's settings table"
        if isinstance(default, bool) or not isinstance(default, int | float | str):
            continue  # unset or a path: said in words ("$TEAMSTORE_HOME/registry", "on for SQLite only")
        if isinstance(default, int | float):
            default = int(default) if float(default).is_integer() else default
        assert shown[variable] == f"`{default}`", f"{variable}: README shows {shown[variable]}, the code {default}"


def test_stream_usage_hosts_keep_an_ipv6_host_in_brackets_and_one_written_bare_is_refused_saying_how_to_write_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEAMSTORE_STREAM_USAGE_URLS", "[::1]:8000, [::1:8000], http://[FD00::5]/v1, LLM.internal.")
    assert Settings().stream_usage_hosts == {"[::1]:8000", "[::1:8000]", "[fd00::5]", "llm.internal"}
    for bare in ("::1", "fd00::5:8000", "http://::1/v1"):
        monkeypatch.setenv("TEAMSTORE_STREAM_USAGE_URLS", bare)
        with pytest.raises(ConfigurationError, match="TEAMSTORE_STREAM_USAGE_URLS") as refused:
            Settings()
        assert "[fd00::5]:8000" in str(refused.value) + str(refused.value.hint)
