"""Secrets: never stored, never the mask; references resolved from the environment when a team is built."""

from __future__ import annotations

import json

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import TokenUsageTermination
from autogen_ext.models.openai import OpenAIChatCompletionClient

from config_registry import DefinitionInvalid, Registry, SecretUnavailable
from config_registry.secrets import apply_references
from teamstore import examples
from teamstore.context import BoundedChatCompletionContext
from tests.conftest import git
from tests.registry.conftest import dump, left_unchanged, triage_json, triage_manifest

KEY_PATH = "model_client.config.api_key"


def _openai_agent(key: str = "sk-live-123") -> AssistantAgent:
    client = OpenAIChatCompletionClient(model="gpt-4o-mini", api_key=key)
    return AssistantAgent("researcher", model_client=client, model_context=BoundedChatCompletionContext(20))


def _everything(registry: Registry) -> str:
    return git(registry.path, "log", "-p", "--all") + "".join(
        p.read_text() for p in registry.path.rglob("*.json")
    )


def test_dump_masks_the_key_and_undeclared_mask_is_refused(registry: Registry) -> None:
    component = dump(_openai_agent())
    assert component["config"]["model_client"]["config"]["api_key"] == "**********"
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(), "undeclared")
    assert caught.value.field == f"config.{KEY_PATH}"
    assert f"--secret {KEY_PATH}=env:OPENAI_API_KEY" in (caught.value.hint or "")


def test_declared_secret_is_stored_as_a_reference_and_resolved_at_build(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = triage_manifest(secrets={KEY_PATH: "env:OPENAI_API_KEY"})
    registry.add("support_triage", dump(_openai_agent()), manifest, "with reference")
    stored = registry.resolve("support_triage").component
    assert stored["config"]["model_client"]["config"]["api_key"] == {"$secret": "env:OPENAI_API_KEY"}
    text = _everything(registry)
    assert "sk-live-123" not in text
    assert "**********" not in text
    built = registry.build("support_triage", env={"OPENAI_API_KEY": "sk-from-env"})
    assert built.participants["researcher"]._model_client._client.api_key == "sk-from-env"  # type: ignore[attr-defined]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-os-environ")
    again = registry.build("support_triage")
    assert again.participants["researcher"]._model_client._client.api_key == "sk-os-environ"  # type: ignore[attr-defined]


def test_unset_secret_variable_fails_the_build_by_name(registry: Registry) -> None:
    manifest = triage_manifest(secrets={KEY_PATH: "env:TS_TEST_UNSET_KEY"})
    registry.add("support_triage", dump(_openai_agent()), manifest, "with reference")
    with pytest.raises(SecretUnavailable) as caught:
        registry.build("support_triage", env={})
    assert "TS_TEST_UNSET_KEY" in caught.value.message


def test_plaintext_secret_is_refused_unless_declared_and_then_never_stored(registry: Registry) -> None:
    component = dump(_openai_agent())
    component["config"]["model_client"]["config"]["api_key"] = "sk-pasted-into-json"
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(), "plaintext")
    assert caught.value.field == f"config.{KEY_PATH}"
    assert "plaintext" in caught.value.message
    registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:OPENAI_API_KEY"}), "declared")
    assert registry.resolve("support_triage").component["config"]["model_client"]["config"]["api_key"] == {
        "$secret": "env:OPENAI_API_KEY"
    }
    assert "sk-pasted-into-json" not in _everything(registry)


def test_other_secret_looking_fields_are_refused_in_plaintext(registry: Registry) -> None:
    component = dump(_openai_agent())
    component["config"]["model_client"]["config"]["azure_ad_token"] = "eyJ-token"
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "token")
    assert caught.value.field == "config.model_client.config.azure_ad_token"


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("openaiApiKey", "openaiApiKey"),
        ("clientSecret", "clientSecret"),
        ("passphrase", "passphrase"),
        ("env", "env.DB_PWD"),
        ("connection", "connection.AccountKey"),
    ],
)
def test_secret_fields_under_other_spellings_are_refused_in_plaintext(registry: Registry, key: str, path: str) -> None:
    component = dump(_openai_agent())
    value = {path.split(".")[1]: "hunter2-SECRET"} if "." in path else "hunter2-SECRET"
    component["config"]["model_client"]["config"][key] = value
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "spelling")
    assert caught.value.field == f"config.model_client.config.{path}"
    assert "plaintext" in caught.value.message


@pytest.mark.parametrize("header", ["Authorization", "x-api-key", "api-key", "Ocp-Apim-Subscription-Key", "Cookie"])
def test_secrets_in_http_headers_are_refused_in_plaintext(registry: Registry, header: str) -> None:
    component = dump(_openai_agent())
    component["config"]["model_client"]["config"]["default_headers"] = {header: "Bearer sk-live-SECRET", "X-Team": "a"}
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "headers")
    assert caught.value.field == f"config.model_client.config.default_headers.{header}"
    assert "sk-live-SECRET" not in _everything(registry)


@pytest.mark.parametrize(
    "header",
    ["clientsecret", "CLIENTSECRET", "secretkey", "x-secretkey", "DBPASSWORD", "mypassword", "x-accesstoken",
     "x-authtoken", "privatekey", "accesskey", "x-csrftoken", "XAPIKEY"],
)
def test_a_credential_whose_name_is_written_as_one_word_is_refused_in_a_header(registry: Registry, header: str) -> None:
    value = "q7Rz9LmX2vPk4TnW8sYb3HcJ"  # no shape gives it away: only the header's name does
    agent = AssistantAgent(
        "researcher",
        model_client=OpenAIChatCompletionClient(model="gpt-4o-mini", api_key="sk-live-123", default_headers={header: value}),
        model_context=BoundedChatCompletionContext(20),
    )
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", dump(agent), triage_manifest(secrets={KEY_PATH: "env:K"}), "one-word header")
    assert caught.value.field == f"config.model_client.config.default_headers.{header}"
    assert f"{header!r}" in caught.value.message and "credential" in caught.value.message
    assert value not in _everything(registry)


def test_declared_path_must_exist(registry: Registry) -> None:
    manifest = triage_manifest(secrets={KEY_PATH: "env:K", "model_client.config.nope": "env:X"})
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", dump(_openai_agent()), manifest, "typo")
    assert caught.value.field == "secrets.model_client.config.nope"


def test_a_secret_declared_at_an_object_is_refused_naming_the_field_inside_it(registry: Registry) -> None:
    manifest = triage_manifest(secrets={"model_client": "env:OPENAI_API_KEY"})
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", dump(_openai_agent()), manifest, "whole client")
    assert caught.value.field == "secrets.model_client"
    assert "holds an object, not one value" in caught.value.message
    assert caught.value.hint is not None and caught.value.hint.endswith(f"--secret {KEY_PATH}=env:VAR")


def test_openai_example_registers_with_its_manifest(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-store")
    manifest = examples.example_manifest("support_triage_openai")
    registry.add_from_factory("teamstore.examples:support_triage_openai", manifest, "openai variant")
    assert "sk-do-not-store" not in _everything(registry)
    built = registry.build("support_triage_openai")
    assert set(built.participants) == {"triage", "researcher", "critic"}


@pytest.mark.parametrize(
    ("url", "what"),
    [
        ("https://svc:hunter2-SECRET@proxy.example/v1", "password"),
        ("https://proxy.example/v1?api-version=2024-06-01&key=hunter2-SECRET", "'key'"),
        ("https://proxy.example/v1?access_token=hunter2-SECRET", "'access_token'"),
        ("https://ghp_hunter2-SECRET@proxy.example/v1", "user part"),
        ("https://fn.example/api/v1?code=hunter2-SECRET", "'code'"),
        ("https://bucket.example/v1?X-Amz-Date=20260101&X-Amz-Signature=hunter2-SECRET", "'X-Amz-Signature'"),
        ("https://proxy.example/v1#access_token=hunter2-SECRET", "'access_token'"),
    ],
)
def test_a_url_with_a_credential_in_it_is_refused(registry: Registry, url: str, what: str) -> None:
    agent = AssistantAgent(
        "researcher",
        model_client=OpenAIChatCompletionClient(model="gpt-4o-mini", api_key="sk-live-123", base_url=url),
        model_context=BoundedChatCompletionContext(20),
    )
    manifest = triage_manifest(secrets={KEY_PATH: "env:K"})
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", dump(agent), manifest, "proxy")
    assert caught.value.field == "config.model_client.config.base_url"
    assert what in caught.value.message
    assert "--secret model_client.config.base_url=env:" in (caught.value.hint or "")
    assert "hunter2-SECRET" not in _everything(registry)
    # Declared as a reference, the URL is taken from the environment and never stored.
    declared = triage_manifest(secrets={KEY_PATH: "env:K", "model_client.config.base_url": "env:PROXY_URL"})
    registry.add("support_triage", dump(agent), declared, "proxy from the environment")
    assert "hunter2-SECRET" not in _everything(registry)
    built = registry.build("support_triage", env={"K": "sk-env", "PROXY_URL": url})
    assert str(built.participants["researcher"]._model_client._client.base_url).startswith("https://")  # type: ignore[attr-defined]


def test_a_plain_url_is_stored(registry: Registry) -> None:
    agent = AssistantAgent(
        "researcher",
        model_client=OpenAIChatCompletionClient(
            model="gpt-4o-mini", api_key="sk-live-123", base_url="https://proxy.example/v1?api-version=2024-06-01"
        ),
        model_context=BoundedChatCompletionContext(20),
    )
    registry.add("support_triage", dump(agent), triage_manifest(secrets={KEY_PATH: "env:K"}), "plain proxy")
    stored = registry.resolve("support_triage").component
    assert stored["config"]["model_client"]["config"]["base_url"] == "https://proxy.example/v1?api-version=2024-06-01"


def _stdio_server(args: list[str]) -> dict[str, object]:
    return {"provider": "autogen_ext.tools.mcp.McpWorkbench", "component_type": "workbench",
            "config": {"server_params": {"type": "StdioServerParams", "command": "npx", "args": args}}}


@pytest.mark.parametrize(
    ("key", "value", "path", "what"),
    [
        ("default_headers", {"X-Gateway": "Bearer eyJhbGciOiJIUzI1NiJ9.e30.c2ln"}, "default_headers.X-Gateway",
         "authorization value"),
        ("default_query", {"q": "sk-proj-hunter2SECRET0123456789abcd"}, "default_query.q", "API key"),
        ("organization", "ghp_hunter2SECRET0123456789abcdefghijklm", "organization", "GitHub Token"),
        ("dsn", "Server=db.example;Database=crm;Password=hunter2-SECRET;", "dsn", "'Password'"),
    ],
)
def test_values_that_are_credentials_are_refused_whatever_the_field(
    registry: Registry, key: str, value: object, path: str, what: str
) -> None:
    component = dump(_openai_agent())
    component["config"]["model_client"]["config"][key] = value
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "value")
    assert caught.value.field == f"config.model_client.config.{path}"
    assert what in caught.value.message
    assert "hunter2" not in _everything(registry)


@pytest.mark.parametrize(
    ("args", "index"),
    [
        (["-y", "server-github", "--token", "hunter2-SECRET"], 3),
        (["-y", "server-search", "--api-key=hunter2-SECRET"], 2),
        (["run", "-i", "--rm", "-e", "BRAVE_API_KEY=hunter2-SECRET", "mcp/brave-search"], 4),  # docker's
        (["run", "--env=BRAVE_API_KEY=hunter2-SECRET", "mcp/brave-search"], 1),
        (["-y", "mcp-remote", "https://mcp.example/sse", "--header", "Authorization: Bearer hunter2-SECRET"], 4),
    ],
)
def test_a_secret_flag_in_an_mcp_server_command_line_is_refused(
    registry: Registry, args: list[str], index: int
) -> None:
    refused = _refused_mcp_args(registry, args)
    assert refused.field == f"config.workbench.0.config.server_params.args.{index}"
    assert "plaintext secret (the value of the" in refused.message
    assert f"--secret workbench.0.config.server_params.args.{index}=env:" in (refused.hint or "")


def _refused_mcp_args(registry: Registry, args: list[str]) -> DefinitionInvalid:
    """The error registering an agent whose MCP stdio server is started with ``args`` raises; nothing committed."""
    component = dump(_openai_agent())
    component["config"]["workbench"] = [_stdio_server(args)]
    manifest = triage_manifest(secrets={KEY_PATH: "env:K"}, allow_source_code_tools=True)
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, manifest, "mcp")
    return caught.value


@pytest.mark.parametrize(
    ("args", "index"),
    [
        (["-c", "tool --api-key hunter2-SECRET serve"], 1),
        (["run", "--rm", "mcp/tool", "sh", "-c", "tool --token=hunter2-SECRET && tool serve"], 5),
        (["-c", "BRAVE_API_KEY=hunter2-SECRET brave-search"], 1),
        (["-c", "mcp-remote https://mcp.example/sse --header 'Authorization: Bearer hunter2-SECRET'"], 1),
    ],
)
def test_a_secret_flag_inside_one_shell_string_of_an_mcp_server_is_refused(
    registry: Registry, args: list[str], index: int
) -> None:
    refused = _refused_mcp_args(registry, args)
    assert refused.field == f"config.workbench.0.config.server_params.args.{index}"
    assert "plaintext secret (the value of the" in refused.message
    assert "hunter2" not in str(refused)


@pytest.mark.parametrize(
    ("command", "what"),
    [
        ("postgres-mcp --dsn 'host=db user=app password=hunter2-SECRET'", "a connection string's 'password'"),
        ("db-mcp jdbc:postgresql://db/app?user=app&password=hunter2-SECRET", "the query parameter 'password'"),
        ("psql 'password=hunter2-SECRET' -c 'select 1'", "the value of the variable 'password'"),
        ("mysql --password=hunter2-SECRET -e 'select 1'", "the value of the flag '--password'"),
    ],
)
def test_a_connection_string_inside_one_shell_string_of_an_mcp_server_is_refused(
    registry: Registry, command: str, what: str
) -> None:
    refused = _refused_mcp_args(registry, ["-c", command])
    assert refused.field == "config.workbench.0.config.server_params.args.1"
    assert f"plaintext secret ({what}, inside a command line)" in refused.message
    assert "hunter2" not in str(refused)


def _refused_server(registry: Registry, command: str, args: list[str], env: dict[str, str] | None = None
                    ) -> DefinitionInvalid:
    """The error registering an agent whose MCP stdio server runs ``command`` with ``args`` and ``env`` raises."""
    server = _stdio_server(args)
    server["config"]["server_params"] |= {"command": command, "env": env or {}}  # type: ignore[index]
    component = dump(_openai_agent())
    component["config"]["workbench"] = [server]
    manifest = triage_manifest(secrets={KEY_PATH: "env:K"}, allow_source_code_tools=True)
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, manifest, "database tool")
    assert "hunter2" not in str(caught.value) and "hunter2" not in _everything(registry)
    return caught.value


@pytest.mark.parametrize(
    ("command", "args", "field"),
    [
        ("mysql", ["-h", "db", "-u", "app", "-phunter2-SECRET", "crm"], "args.4"),
        ("/usr/bin/mysqldump", ["-uapp", "-phunter2-SECRET", "crm"], "args.1"),
        ("docker", ["exec", "db", "mariadb-dump", "-phunter2-SECRET", "crm"], "args.3"),
        ("sh", ["-c", "mysql -h db -uapp -phunter2-SECRET crm < /srv/schema.sql"], "args.1"),
        ("sh", ["-c", "cd /srv && mysqladmin -phunter2-SECRET status"], "args.1"),
        ("mysql -h db -uapp -phunter2-SECRET crm", [], "command"),
        ("mysql", ["-u", "root", "-phunter2-SECRET"], "args.2"),
        ("sh", ["-c", "docker exec db mysql -phunter2-SECRET"], "args.1"),
        ("sudo", ["-u", "app", "mysqldump", "-phunter2-SECRET", "crm"], "args.3"),
        ("kubectl", ["exec", "-n", "db", "mysql-0", "--", "mysql", "-phunter2-SECRET"], "args.6"),
        ("C:\\Program Files\\MySQL\\bin\\mysql.exe", ["-uroot", "-phunter2-SECRET"], "args.1"),
        ("cmd", ["/c", "C:\\mysql\\bin\\mysql.exe -uroot -phunter2-SECRET crm"], "args.1"),
    ],
)
def test_a_password_glued_to_a_mysql_clients_p_is_refused(
    registry: Registry, command: str, args: list[str], field: str
) -> None:
    refused = _refused_server(registry, command, args)
    assert refused.field == f"config.workbench.0.config.server_params.{field}"
    assert "plaintext secret (a password glued to the MySQL client's '-p'" in refused.message


@pytest.mark.parametrize(
    ("command", "env", "field", "variable"),
    [
        ("db-mcp", {"LOG_LEVEL": "info", "SETUP": "PGPASSWORD=hunter2-SECRET"}, "env.SETUP", "PGPASSWORD"),
        ("db-mcp", {"SETUP": "MYSQL_PWD=hunter2-SECRET"}, "env.SETUP", "MYSQL_PWD"),
        ("db-mcp", {"SETUP": "export MYSQL_PWD='hunter2 SECRET'"}, "env.SETUP", "MYSQL_PWD"),
        ("PGPASSWORD=hunter2-SECRET psql -h db -U app", {}, "command", "PGPASSWORD"),
        ("env PGHOST=db MYSQL_PWD=hunter2-SECRET mysql -h db", {}, "command", "MYSQL_PWD"),
        ("db-mcp", {"SETUP": "set PGPASSWORD=hunter2-SECRET"}, "env.SETUP", "PGPASSWORD"),  # Windows' cmd
        ("set PGPASSWORD=hunter2-SECRET", {}, "command", "PGPASSWORD"),
        ("db-mcp", {"SETUP": "env -i PGPASSWORD=hunter2-SECRET psql"}, "env.SETUP", "PGPASSWORD"),
        ("db-mcp", {"SETUP": "env -u HOME PGPASSWORD=hunter2-SECRET psql"}, "env.SETUP", "PGPASSWORD"),
        ("db-mcp", {"SETUP": "cd /srv && PGPASSWORD=hunter2-SECRET psql -h db"}, "env.SETUP", "PGPASSWORD"),
        ("db-mcp", {"SETUP": "cd /srv\nMYSQL_PWD=hunter2-SECRET mysql"}, "env.SETUP", "MYSQL_PWD"),
    ],
)
def test_a_lone_database_password_variable_or_one_set_before_a_command_is_refused(
    registry: Registry, command: str, env: dict[str, str], field: str, variable: str
) -> None:
    refused = _refused_server(registry, command, [], env)
    assert refused.field == f"config.workbench.0.config.server_params.{field}"
    assert f"plaintext secret (the value of the variable {variable!r}" in refused.message


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("cmd", ["/c", "set PGPASSWORD=hunter2-SECRET&& psql -h db"]),
        ("cmd", ["/c", "set \"PGPASSWORD=hunter2-SECRET\" && psql -h db"]),
        ("pwsh", ["-Command", "$env:PGPASSWORD='hunter2-SECRET'; psql -h db"]),
        ("sh", ["-c", "cd /srv&&PGPASSWORD=hunter2-SECRET psql -h db"]),
    ],
)
def test_a_database_password_variable_set_by_windows_or_powershell_or_after_another_command_is_refused(
    registry: Registry, command: str, args: list[str]
) -> None:
    refused = _refused_server(registry, command, args)
    assert refused.field == "config.workbench.0.config.server_params.args.1"
    assert "plaintext secret (the value of the variable 'PGPASSWORD'" in refused.message


def test_a_database_password_variable_set_as_a_servers_whole_command_without_args_is_refused() -> None:
    server = _stdio_server([])
    del server["config"]["server_params"]["args"]  # type: ignore[index]
    server["config"]["server_params"]["command"] = "set PGPASSWORD=hunter2-SECRET"  # type: ignore[index]
    component = dump(_openai_agent())
    component["config"]["workbench"] = [server]
    with pytest.raises(DefinitionInvalid) as caught:
        apply_references(component, {KEY_PATH: "env:K"})
    assert caught.value.field == "config.workbench.0.config.server_params.command"
    assert "hunter2" not in str(caught.value)


def test_a_password_in_a_system_message_set_as_the_shell_sets_it_is_refused(registry: Registry) -> None:
    component = dump(_openai_agent())
    component["config"]["system_message"] = "PGPASSWORD=hunter2-SECRET"
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "v1")
    assert caught.value.field == "config.system_message"


@pytest.mark.parametrize(
    ("command", "args", "env"),
    [
        ("redis-cli", ["-h", "cache", "-p6379"], {}),  # -p is a port here
        ("sh", ["-c", "mysql -h db -e 'select 1' ; redis-cli -p6379 ping"], {}),
        ("mysql", ["-h", "db", "-u", "app", "-p", "crm"], {}),  # a bare -p asks for the password
        ("mysql", ["-uapp", "-p${MYSQL_PASSWORD}"], {}),
        ("sh", ["-c", "PGPASSFILE=/run/secrets/pgpass psql -h db"], {"PGPASSFILE": "/run/secrets/pgpass"}),
        ("PGPASSWORD=${DB_PASSWORD} psql -h db", [], {"HELP": "set PGPASSWORD in your env, or MYSQL_PWD"}),
        ("db-mcp", [], {"SETUP": "PGHOST=db PGUSER=app", "NOTE": "password=hunter2 is what the docs say"}),
        # -p is a port, or another option, in a command whose program is no MySQL client
        ("sh", ["-c", "mysql -h db -e 'select 1'; redis-cli -p6379 ping"], {}),
        ("sh", ["-c", "mysql -h db -e 'select 1'\nredis-cli -p6379 ping"], {}),
        ("sh", ["-c", "mysqldump crm|ssh -p2222 backup 'cat > d.sql'"], {}),
        ("sh", ["-c", "mysqladmin -h db ping&&psql -h db -p5432"], {}),
        ("sh", ["-c", "pg_isready -h mysql-replica -p5432"], {}),
        ("tar", ["-C", "/var/lib/mysql", "-pxf", "b.tar"], {}),
        ("docker", ["run", "--name", "mysql", "-p3306:3306", "mysql:8"], {}),
        ("mysql-mcp", ["-p8080"], {}),
        ("uvx", ["mysql_mcp_server", "-p8080"], {}),
        # the shell's working directories, and values written as examples
        ("db-mcp", [], {"SETUP": "PWD=/srv ./run.sh", "BACK": "OLDPWD=/srv cd -"}),
        ("db-mcp", [], {"NOTE": "TOKEN=<your token> goes in the header", "SETUP": "PGPASSWORD=..."}),
        ("sh", ["-c", "PGPASSWORD=$(cat /run/secrets/pg) psql -h db"], {"SETUP": "MYSQL_PWD=`cat /run/pw` mysql"}),
        ("db-mcp", [], {"NOTE": "Set PGPASSWORD=... in your shell", "HELP": "set PGPASSWORD in your env"}),
    ],
)
def test_database_commands_that_leave_the_password_out_are_stored(
    command: str, args: list[str], env: dict[str, str]
) -> None:
    server = _stdio_server(args)
    server["config"]["server_params"] |= {"command": command, "env": env}  # type: ignore[index]
    component = dump(_openai_agent())
    component["config"]["workbench"] = [server]
    component["config"]["description"] = "Set PGPASSWORD in your env before the team starts; psql reads it."
    stored = apply_references(component, {KEY_PATH: "env:K"})  # what registration stores, before it loads the server
    assert stored["config"]["workbench"][0]["config"]["server_params"] == server["config"]["server_params"]  # type: ignore[index]


def test_a_declared_reference_stands_in_for_a_mysql_password_argument() -> None:
    server = _stdio_server(["-uapp", "-phunter2-SECRET"])
    server["config"]["server_params"]["command"] = "mysql"  # type: ignore[index]
    component = dump(_openai_agent())
    component["config"]["workbench"] = [server]
    path = "workbench.0.config.server_params.args.1"
    stored = apply_references(component, {KEY_PATH: "env:K", path: "env:MYSQL_PASSWORD_ARGUMENT"})
    assert stored["config"]["workbench"][0]["config"]["server_params"]["args"][1] == {
        "$secret": "env:MYSQL_PASSWORD_ARGUMENT"}


@pytest.mark.parametrize(
    "args",
    [
        ["-y", "server-github", "--token", "${GITHUB_TOKEN}"],
        ["-y", "server-github", "--token", "$GITHUB_TOKEN"],
        ["-y", "server-search", "--api-key=${SEARCH_API_KEY}"],
        ["-c", "tool --api-key \"${SEARCH_API_KEY}\" serve"],
        ["-y", "server-github", "--token", "<your token>"],  # an example of what goes there
    ],
)
def test_a_secret_flag_whose_value_the_server_expands_from_its_environment_is_stored(args: list[str]) -> None:
    component = dump(_openai_agent())
    component["config"]["workbench"] = [_stdio_server(args)]
    stored = apply_references(component, {KEY_PATH: "env:K"})  # what registration stores, before it loads the server
    assert stored["config"]["workbench"][0]["config"]["server_params"]["args"] == args


def test_prose_in_a_list_that_is_no_command_line_is_not_read_as_flags() -> None:
    component = dump(_openai_agent())
    component["config"]["model_client"]["config"]["stop"] = ["use --token counts to size a reply"]
    stored = apply_references(component, {KEY_PATH: "env:K"})
    assert stored["config"]["model_client"]["config"]["stop"] == ["use --token counts to size a reply"]


def test_words_that_resemble_credentials_are_stored(registry: Registry) -> None:
    agent = AssistantAgent(
        "researcher",
        model_client=OpenAIChatCompletionClient(model="gpt-4o-mini", api_key="sk-live-123"),
        model_context=BoundedChatCompletionContext(20),
        description="Basic information, token limitations",
        system_message="Recommend sk-learn-compatible-pipelines; quote the Bearer of bad news; use --token counts. "
        "Ask for the login as: user=NAME; password=THEIRS. Clone ssh://git@git.example/org/repo.git",
    )
    registry.add("support_triage", dump(agent), triage_manifest(secrets={KEY_PATH: "env:K"}), "from ssh://git@git.example/a")
    assert "sk-learn-compatible" in registry.resolve("support_triage").component["config"]["system_message"]


@pytest.mark.parametrize(("key", "items"), [("auth", ["svc", "hunter2-SECRET"]), ("api_keys", ["hunter2-SECRET"])])
def test_the_items_of_a_list_under_a_secret_name_are_refused(registry: Registry, key: str, items: list[str]) -> None:
    component = dump(_openai_agent())
    component["config"]["model_client"]["config"][key] = items
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "list")
    assert caught.value.field == f"config.model_client.config.{key}.0"
    assert "plaintext" in caught.value.message


def test_token_limits_are_settings_not_secrets(registry: Registry) -> None:
    team = triage_json()
    team["config"]["termination_condition"] = TokenUsageTermination(max_total_token=500, max_prompt_token=400, max_completion_token=100).dump_component().model_dump(
        mode="json"
    )
    registry.add("support_triage", team, triage_manifest(), "token limit")


def test_a_credential_in_text_stored_beside_the_definition_is_refused(registry: Registry) -> None:
    key = "sk-proj-hunter2SECRET0123456789abcd"
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", triage_json(), triage_manifest(), f"rotate to {key}")
    assert caught.value.field == "message"
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", triage_json(), triage_manifest(notes=f"proxy https://svc:{key}@proxy.example"), "v1")
    assert caught.value.field == "manifest.notes"
    version = registry.add("support_triage", triage_json(), triage_manifest(notes="ask #support-platform"), "v1")
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.label("support_triage", version, "production", reason=f"works with Bearer {key}")
    assert caught.value.field == "reason"
    assert "hunter2" not in _everything(registry)


@pytest.mark.parametrize(
    "key", ["ghp_16C7e42F292c6912E7710c838347Ae178B4a", "https://svc:hunter2@proxy.example", "Bearer hunter2-0123456789"]
)
def test_a_credential_as_an_objects_key_is_refused_without_naming_it(registry: Registry, key: str) -> None:
    component = dump(_openai_agent())
    component["config"]["metadata"] = {key: "ci", "team": "support"}  # AssistantAgent's free-form metadata
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "metadata")
    assert caught.value.field == "config.metadata"
    assert "key" in caught.value.message
    assert key not in f"{caught.value.message} {caught.value.hint}"
    component["config"]["metadata"] = {"ticket_prefix": "ghp", "team": "support"}
    registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "metadata")


@pytest.mark.parametrize("prefix", ["ghp_16C7e42F292c6912E7710c838347Ae178B4a", "AKIAIOSFODNN7EXAMPLE"])
def test_a_credential_given_as_an_allowed_provider_is_refused(registry: Registry, prefix: str) -> None:
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", triage_json(), triage_manifest(allowed_providers=["mycompany.", prefix]), "v1")
    assert caught.value.field == "manifest.allowed_providers.1"
    registry.add("support_triage", triage_json(), triage_manifest(allowed_providers=["mycompany.agents."]), "v1")


def test_a_credential_given_as_who_moved_a_label_or_authored_a_version_is_refused(registry: Registry) -> None:
    token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    version = registry.add("support_triage", triage_json(), triage_manifest(), "v1")
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.label("support_triage", version, "production", reason="release", who=f"ci {token}")
    assert caught.value.field == "who"
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", dump(examples.support_triage_v2_prompt()), triage_manifest(), "v2",
                     author=f"{token} <ci@example.com>")
    assert caught.value.field == "author"
    assert token not in _everything(registry)


def test_a_reference_added_by_hand_is_not_resolved(registry: Registry) -> None:
    registry.add("support_triage", dump(_openai_agent()), triage_manifest(secrets={KEY_PATH: "env:K"}), "v1")
    path = registry.path / "teams" / "support_triage" / "component.json"
    component = json.loads(path.read_text())
    component["config"]["system_message"] = {"$secret": "env:WORKER_DB_PASSWORD"}
    path.write_text(json.dumps(component))
    git(registry.path, "commit", "-qam", "a reference nobody declared")
    with pytest.raises(DefinitionInvalid) as caught:
        registry.build("support_triage", env={"K": "sk-env", "WORKER_DB_PASSWORD": "hunter2"})
    assert caught.value.field == "config.system_message"


def test_a_command_line_that_leaves_the_secret_to_the_servers_environment_is_stored() -> None:
    component = dump(_openai_agent())
    component["config"]["workbench"] = [_stdio_server([
        "-y", "mcp-remote", "https://mcp.example/sse", "--header", "Authorization: Bearer ${AUTH_TOKEN}",
        "-e", "BRAVE_API_KEY", "LOG_LEVEL=debug",
    ])]
    manifest = triage_manifest(secrets={KEY_PATH: "env:K"}, allow_source_code_tools=True)
    stored = apply_references(component, manifest.secrets)  # what registration stores, before it loads the server
    assert stored["config"]["workbench"][0]["config"]["server_params"]["args"][4] == "Authorization: Bearer ${AUTH_TOKEN}"


@pytest.mark.parametrize("path", ["/v1/search?api_key=hunter2-SECRET", "/hooks/run?sig=hunter2-SECRET", "/cb#access_token=hunter2"])
def test_a_key_in_the_query_of_a_path_given_without_its_host_is_refused(path: str) -> None:
    tool = {"provider": "autogen_ext.tools.http.HttpTool", "component_type": "tool",
            "config": {"name": "search", "scheme": "https", "host": "api.example.com", "port": 443, "path": path}}
    component = {**dump(_openai_agent()), "config": {**dump(_openai_agent())["config"], "tools": [tool]}}
    with pytest.raises(DefinitionInvalid) as caught:  # before the tool is loaded
        apply_references(component, {KEY_PATH: "env:K"})
    assert caught.value.field == "config.tools.0.config.path"
    assert "query parameter" in caught.value.message
    tool["config"]["path"] = "/v1/search?q={query}&limit=5"
    apply_references(component, {KEY_PATH: "env:K"})


@pytest.mark.parametrize("variable", ["ghp_16C7e42F292c6912E7710c838347Ae178B4a", "AKIAIOSFODNN7EXAMPLE"])
def test_a_reference_whose_variable_is_the_secret_itself_is_refused(registry: Registry, variable: str) -> None:
    # `--secret PATH=env:$GITHUB_TOKEN`: the shell put the token where the variable's name goes.
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", dump(_openai_agent()), triage_manifest(secrets={KEY_PATH: f"env:{variable}"}), "v1")
    assert caught.value.field == f"secrets.{KEY_PATH}"
    assert variable not in f"{caught.value.message} {caught.value.hint}"
    registry.add("support_triage", dump(_openai_agent()), triage_manifest(secrets={KEY_PATH: "env:GITHUB_TOKEN"}), "v1")


def test_a_bearer_token_quoted_in_a_prompt_or_a_message_is_refused(registry: Registry) -> None:
    token = "9f8e7d6c5b4a3210fedcba98hunter2"
    component = dump(_openai_agent())
    component["config"]["system_message"] = f"Call the orders API with the header Authorization: Bearer {token}."
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "v1")
    assert caught.value.field == "config.system_message" and "bearer token" in caught.value.message
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", dump(_openai_agent()), triage_manifest(secrets={KEY_PATH: "env:K"}),
                     f"gateway now takes Bearer {token}")
    assert caught.value.field == "message"
    assert "hunter2" not in _everything(registry)


# --- credentials by name and by shape, wherever they sit ------------------------------------------------
FUNCTIONS_KEY = "q1W2e3R4t5Y6u7I8o9P0aSdFgHjKlZxCvBnM1234567890abcdEFGH=="  # an Azure Functions key's shape
CLOUDFLARE_KEY = "c2547eb745079dac9320b638f5e225cf483cc"  # a Cloudflare global API key's shape (37 hex)


def _headers_agent(headers: dict[str, str]) -> dict[str, object]:
    component = dump(_openai_agent())
    component["config"]["model_client"]["config"]["default_headers"] = headers
    return component


@pytest.mark.parametrize(("header", "value"), [("x-functions-key", FUNCTIONS_KEY), ("X-Auth-Key", CLOUDFLARE_KEY)])
def test_a_key_in_a_header_named_for_it_is_refused_and_taken_from_the_environment_instead(
    registry: Registry, header: str, value: str
) -> None:
    component = _headers_agent({header: value, "X-Auth-Email": "ops@example.com"})
    path = f"model_client.config.default_headers.{header}"
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "gateway")
    assert caught.value.field == f"config.{path}"
    assert f"{header!r}" in caught.value.message and "credential" in caught.value.message
    assert f"--secret {path}=env:" in (caught.value.hint or "")
    assert value not in _everything(registry)
    declared = triage_manifest(secrets={KEY_PATH: "env:K", path: "env:GATEWAY_KEY"})
    registry.add("support_triage", component, declared, "gateway key from the environment")
    assert value not in _everything(registry)
    built = registry.build("support_triage", env={"K": "sk-env", "GATEWAY_KEY": value})
    client = built.participants["researcher"]._model_client._client  # type: ignore[attr-defined]
    assert client.default_headers[header] == value and client.default_headers["X-Auth-Email"] == "ops@example.com"


def _sse_workbench(headers: object) -> dict[str, object]:
    return {"provider": "autogen_ext.tools.mcp.McpWorkbench", "component_type": "workbench",
            "config": {"server_params": {"type": "SseServerParams", "url": "https://mcp.example/sse",
                                         "headers": headers}}}


JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJzdXBwb3J0LWJvdCJ9.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


@pytest.mark.parametrize(
    ("key", "value", "path", "what"),
    [
        ("default_headers", {"X-FUNCTIONS-KEY": FUNCTIONS_KEY}, "default_headers.X-FUNCTIONS-KEY", "credential"),
        ("default_headers", {"x-Auth-KEY": CLOUDFLARE_KEY}, "default_headers.x-Auth-KEY", "credential"),
        ("default_headers", {"XApiKey": "hunter2-SECRET"}, "default_headers.XApiKey", "credential"),
        ("default_headers", {"X-Amz-Security-Token": "hunter2-SECRET"}, "default_headers.X-Amz-Security-Token",
         "credential"),
        ("default_headers", {"X-Hub-Signature-256": "sha256=hunter2"}, "default_headers.X-Hub-Signature-256",
         "credential"),
        ("default_headers", {"X-Session": "hunter2-SECRET"}, "default_headers.X-Session", "credential"),
        ("default_headers", {"X-Upstream": "Bearer 9f8e7d6c5b4a3210fedcba98"}, "default_headers.X-Upstream",
         "authorization value"),
        ("default_headers", {"X-Forward": {"X-Functions-Key": FUNCTIONS_KEY}},
         "default_headers.X-Forward.X-Functions-Key", "credential"),
        ("headers", [{"name": "X-Functions-Key", "value": FUNCTIONS_KEY}], "headers.0.value", "'X-Functions-Key'"),
        ("organization", "AKIA4J7XQ2VWZ5PLMN3B", "organization", "AWS Access Key"),
        ("aws", {"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"}, "aws.aws_secret_access_key",
         "credential"),
        ("organization", "gho_hunter2SECRET0123456789abcdefghijklm", "organization", "GitHub Token"),
        ("organization", "glpat-hunter2SECRET0123456789", "organization", "GitLab Token"),
        ("default_query", {"state": JWT}, "default_query.state", "JSON Web Token"),
        ("tls_material", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n", "tls_material",
         "Private Key"),
        ("webhook_secret_b64", "aHVudGVyMi1TRUNSRVQtYmxvYg==", "webhook_secret_b64", "credential"),
        ("default_query", {"k": "sk_live_hunter2SECRET0123456789ab"}, "default_query.k", "Stripe"),
        ("default_query", {"k": "xoxb-123456789012-hunter2SECRET"}, "default_query.k", "Slack"),
    ],
)
def test_credentials_are_refused_by_their_name_or_their_shape_wherever_they_sit(
    registry: Registry, key: str, value: object, path: str, what: str
) -> None:
    component = dump(_openai_agent())
    component["config"]["model_client"]["config"][key] = value
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "credential")
    assert caught.value.field == f"config.model_client.config.{path}"
    assert what in caught.value.message and "plaintext" in caught.value.message
    assert f"--secret model_client.config.{path}=env:" in (caught.value.hint or "")
    assert "hunter2" not in _everything(registry) and FUNCTIONS_KEY not in _everything(registry)


def test_a_key_in_the_headers_of_an_mcp_server_is_refused(registry: Registry) -> None:
    component = dump(_openai_agent())
    component["config"]["workbench"] = [_sse_workbench({"Accept": "text/event-stream", "X-Functions-Key": FUNCTIONS_KEY})]
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "mcp over sse")
    assert caught.value.field == "config.workbench.0.config.server_params.headers.X-Functions-Key"


def test_settings_names_and_urls_that_hold_no_credential_are_stored(registry: Registry) -> None:
    agent = AssistantAgent(
        "researcher",
        model_client=OpenAIChatCompletionClient(
            model="gpt-4o-mini-2024-07-18", api_key="sk-live-123", max_tokens=1000, stop=["</s>", "<|im_end|>"],
            base_url="https://my-resource.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-06-01",
            default_headers={"User-Agent": "teamstore/0.1", "X-Request-Source": "support-bot",
                             "X-Auth-Email": "ops@example.com", "Accept": "application/json",
                             "X-Model": "meta-llama/Llama-3.1-8B-Instruct"},
        ),
        model_context=BoundedChatCompletionContext(20),
        description="Checks when the customer's API key or session token expires; knows token limits.",
        system_message="Quote ticket ZX-81 and the model claude-3-5-sonnet-20241022; never ask for a password.",
    )
    component = dump(agent)
    # Names that merely resemble credentials, where a definition keeps free-form settings.
    component["config"]["model_client"]["config"]["default_headers"] |= {
        "token_limit": "4096", "max_total_token": "8000", "eos_token": "</s>", "cache_key": "router-faq",
        "public_key": "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n",
        "session_id": "support-desk", "fallback_url": "http://203.0.113.7:8000/v1",
        "key_id": "kid-2026-01", "tokenizer": "cl100k_base", "keep_first": "2", "AccessKeyId": "AKID-PUBLIC",
        "access_token_url": "https://login.example/oauth/token",
    }
    registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "no credentials")
    stored = registry.resolve("support_triage").component["config"]["model_client"]["config"]
    assert stored["default_headers"]["X-Auth-Email"] == "ops@example.com"
    assert stored["default_headers"]["eos_token"] == "</s>" and stored["max_tokens"] == 1000


@pytest.mark.parametrize(
    ("variable", "value", "what"),
    [
        ("PG_DSN", "host=db.internal user=app password=hunter2 dbname=teamstore", "connection string's 'password'"),
        ("PG_DSN", "host = db.internal password = 'hunter2 with spaces' sslmode=require",
         "connection string's 'password'"),
        ("dsn", "host=db user=app sslpassword=hunter2 sslmode=verify-full", "connection string's 'sslpassword'"),
        ("connection_string", "Driver={ODBC Driver 18};Server=db;Pwd={hunter2;x};", "connection string's 'Pwd'"),
        ("DB_URL", "jdbc:postgresql://db:5432/app?user=app&password=hunter2", "query parameter 'password'"),
        ("DB_URL", "jdbc:mysql://app:hunter2@db:3306/app", "password in its user part"),
        ("DB_URL", "jdbc:sqlserver://db:1433;databaseName=app;user=sa;password=hunter2",
         "connection property 'password'"),
        ("DB_URL", "jdbc:sqlserver://db;user=sa;password={hunter2;x}", "connection property 'password'"),
        ("DB_URL", "jdbc:oracle:thin:app/hunter2@db:1521:orcl", "password in its user part"),
        ("MONGO_URL", "mongodb+srv://app:hunter2@cluster0.example.net/app", "password in its user part"),
        ("REDIS_URL", "redis://:hunter2@cache:6379/0", "password in its user part"),
        ("BROKER_URL", "amqp://app:hunter2@mq.internal/vhost", "password in its user part"),
        ("PG_URL", "postgresql://db/app?sslmode=require&sslpassword=hunter2", "query parameter 'sslpassword'"),
        ("HOOK_URL", "https://hooks.example/run?secret=hunter2", "query parameter 'secret'"),
        ("FEED_URL", "wss://feed.example/stream?token=hunter2", "query parameter 'token'"),
        ("SEARCH_URL", "https://search.example/v1?q=x&api_key=hunter2", "query parameter 'api_key'"),
        # A path parameter before the query or the fragment: no JDBC properties, the URL is read whole.
        ("API_URL", "https://api.example.com/v1;jsessionid=abc123?api_key=hunter2", "query parameter 'api_key'"),
        ("API_URL", "https://api.example.com/v1;v=2#access_token=hunter2", "query parameter 'access_token'"),
    ],
)
def test_a_database_password_in_any_common_connection_string_form_is_refused_whatever_the_variable(
    registry: Registry, variable: str, value: str, what: str
) -> None:
    component = dump(_openai_agent())
    component["config"]["workbench"] = [_stdio_server(["-y", "db-mcp"])]
    component["config"]["workbench"][0]["config"]["server_params"]["env"] = {"LOG_LEVEL": "info", variable: value}
    manifest = triage_manifest(secrets={KEY_PATH: "env:K"}, allow_source_code_tools=True)
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, manifest, "database tool")
    assert caught.value.field == f"config.workbench.0.config.server_params.env.{variable}"
    assert what in caught.value.message and "never stores secrets" in caught.value.message
    assert f"--secret workbench.0.config.server_params.env.{variable}=env:" in (caught.value.hint or "")
    assert "hunter2" not in str(caught.value) and "hunter2" not in _everything(registry)


def test_a_connection_string_in_a_components_own_config_is_refused(registry: Registry) -> None:
    # A custom memory or tool keeps its DSN under a name that is no credential word.
    component = dump(_openai_agent())
    component["config"]["model_client"]["config"]["dsn"] = "host=db user=app password=hunter2 dbname=x"
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "dsn")
    assert caught.value.field == "config.model_client.config.dsn"
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    "value",
    [
        "host=db.internal port=5432 user=app dbname=teamstore sslmode=require",
        "host=db user=app password=${PGPASSWORD} dbname=x",
        "jdbc:postgresql://db:5432/app?user=app&ssl=true",
        "jdbc:sqlserver://db:1433;databaseName=app;encrypt=true",
        "Server=db;Database=app;Trusted_Connection=yes;",
        "postgresql://db/app?sslmode=require",
        "https://example.com/docs;version=2",
        "mode=fast retries=3 token_limit=4096",
        "key=value",
    ],
)
def test_a_connection_string_or_setting_without_a_password_is_stored(value: str) -> None:
    component = dump(_openai_agent())
    component["config"]["workbench"] = [_stdio_server(["-y", "db-mcp"])]
    component["config"]["workbench"][0]["config"]["server_params"]["env"] = {"DB": value}
    stored = apply_references(component, {KEY_PATH: "env:K"})
    assert stored["config"]["workbench"][0]["config"]["server_params"]["env"] == {"DB": value}


def test_prose_that_mentions_a_password_setting_is_stored(registry: Registry) -> None:
    prose = ("Never type password=hunter2 into the chat; ask the user to reset it. "
             "The password= field stays blank when the user signs in with SSO.")
    agent = AssistantAgent(
        "researcher",
        model_client=OpenAIChatCompletionClient(model="gpt-4o-mini", api_key="sk-live-123"),
        model_context=BoundedChatCompletionContext(20),
        system_message=prose,
    )
    registry.add("support_triage", dump(agent), triage_manifest(secrets={KEY_PATH: "env:K"}), "prose")
    assert registry.resolve("support_triage").component["config"]["system_message"] == prose


@pytest.mark.parametrize("args", [["-File", "sync.ps1", "-Password:hunter2Xk9"], ["-File", "s.ps1", "-ApiKey:q7Rz9LmX2vPkAbC"]])
def test_a_secret_given_to_a_powershell_parameter_after_a_colon_is_refused(registry: Registry, args: list[str]) -> None:
    # PowerShell's "-Param:value" was read as no flag at all: the password was stored.
    refused = _refused_server(registry, "pwsh", args)
    assert refused.field == "config.workbench.0.config.server_params.args.2"
    assert "plaintext secret (the value of the flag" in refused.message
