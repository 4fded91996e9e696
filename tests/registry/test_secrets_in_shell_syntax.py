"""A secret in an MCP server's command line is refused however the shell syntax around it is written, and
a value that only names where the secret lives (a variable, a file, a secret store) is stored."""

from __future__ import annotations

import base64
import shlex

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.openai import OpenAIChatCompletionClient

from config_registry import DefinitionInvalid, Registry, ScriptUnreadable
from config_registry.secrets import apply_references, check_free_text
from tests.registry.conftest import dump, left_unchanged, triage_manifest

KEY_PATH = "model_client.config.api_key"
SERVER = "config.workbench.0.config.server_params"


def _encoded(script: str) -> str:
    """``script`` as PowerShell's -EncodedCommand takes it: base64 of its UTF-16LE text."""
    return base64.b64encode(script.encode("utf-16-le")).decode()


def _shells(depth: int, innermost: str) -> str:
    """``sh -c`` running ``sh -c`` running ..., ``depth`` shells, the last running ``innermost``."""
    for _ in range(depth):
        innermost = f"sh -c {shlex.quote(innermost)}"
    return innermost


def _nested(depth: int, innermost: str) -> str:
    """A command whose ``$(...)`` runs a command whose ``$(...)`` runs ..., ``depth`` deep, ``innermost`` last."""
    return "echo " + "".join(f"$(echo {n} " for n in range(depth - 1)) + f"$({innermost})" + ")" * (depth - 1)


def _agent_with_server(command: str, args: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    agent = AssistantAgent("researcher", model_client=OpenAIChatCompletionClient(model="gpt-4o-mini", api_key="sk-1"))
    component = dump(agent)
    component["config"]["workbench"] = [{
        "provider": "autogen_ext.tools.mcp.McpWorkbench", "component_type": "workbench",
        "config": {"server_params": {"type": "StdioServerParams", "command": command, "args": args, "env": env or {}}},
    }]
    return component


@pytest.mark.parametrize(
    ("command", "args", "field", "what"),
    [
        # a backslash at a line's end continues the command
        ("sh", ["-c", "mysql -h db -u app \\\n  -phunter2-SECRET app"], "args.1", "glued to the MySQL"),
        ("sh", ["-c", "PGHOST=db \\\nPGPASSWORD=hunter2-SECRET psql"], "args.1", "variable 'PGPASSWORD'"),
        ("cmd", ["/c", "mysql.exe -u app \\\n-phunter2-SECRET --socket=C:\\mysql\\run"], "args.1", "glued to the MySQL"),
        ("sh", ["-c", "mysql -u app \\\n-phunter2-SECRET 'unclosed"], "args.1", "glued to the MySQL"),
        # a shell run by a shell
        ("bash -lc 'mysql -uapp -phunter2-SECRET app'", [], "command", "glued to the MySQL"),
        ("sh", ["-c", "bash -lc 'mysql -uapp -phunter2-SECRET app'"], "args.1", "glued to the MySQL"),
        ("sh", ["-c", "sh -c 'export PGPASSWORD=hunter2-SECRET; psql'"], "args.1", "variable 'PGPASSWORD'"),
        ("sh", ["-c", "kubectl exec -n db mysql-0 -- sh -c 'mysql -phunter2-SECRET'"], "args.1", "glued to the MySQL"),
        ("sh", ["-c", "bash -c \"sh -c 'tool --api-key hunter2-SECRET serve'\""], "args.1", "flag '--api-key'"),
        ("sh", ["-c", "cmd /c set PGPASSWORD=hunter2-SECRET"], "args.1", "variable 'PGPASSWORD'"),
        ("sh", ["-c", "env -S 'mysql -uapp -phunter2-SECRET' crm"], "args.1", "glued to the MySQL"),
        ("sh", ["-c", "pwsh -NoProfile -c \"$env:PGPASSWORD='hunter2-SECRET'; psql\""], "args.1",
         "variable 'PGPASSWORD'"),
        # a subshell or a group of commands
        ("sh", ["-c", "echo $(PGPASSWORD=hunter2-SECRET psql -tc 'select 1')"], "args.1", "variable 'PGPASSWORD'"),
        ("sh", ["-c", "X=`mysql -phunter2-SECRET -e 'select 1'` tool"], "args.1", "glued to the MySQL"),
        ("sh", ["-c", "(PGPASSWORD=hunter2-SECRET psql -h db)"], "args.1", "variable 'PGPASSWORD'"),
        ("sh", ["-c", "{ PGPASSWORD=hunter2-SECRET psql; }"], "args.1", "variable 'PGPASSWORD'"),
        # a program run by a wrapper or in a container
        ("sh", ["-c", "timeout 30 mysql -phunter2-SECRET"], "args.1", "glued to the MySQL"),
        ("timeout", ["-s", "KILL", "30", "mysql", "-phunter2-SECRET"], "args.4", "glued to the MySQL"),
        ("nice", ["-n", "5", "stdbuf", "-oL", "setsid", "mysql", "-phunter2-SECRET"], "args.6", "glued to the MySQL"),
        ("sh", ["-c", "echo crm | xargs -n 1 mysqldump -phunter2-SECRET"], "args.1", "glued to the MySQL"),
        ("docker", ["run", "--rm", "-p", "3306:3306", "mysql:8", "mysql", "-uapp", "-phunter2-SECRET"], "args.7",
         "glued to the MySQL"),
        ("sh", ["-c", "docker compose exec db mysql -phunter2-SECRET"], "args.1", "glued to the MySQL"),
        ("docker-compose", ["-f", "dev.yml", "exec", "-T", "db", "mysql", "-phunter2-SECRET"], "args.6",
         "glued to the MySQL"),
        ("podman", ["run", "--rm", "mysql:8", "mysql", "-phunter2-SECRET"], "args.4", "glued to the MySQL"),
        # PowerShell's spacing around '='
        ("pwsh", ["-Command", "$env:PGPASSWORD = 'hunter2-SECRET'; psql"], "args.1", "variable 'PGPASSWORD'"),
        ("db-mcp", [], "env.SETUP", "variable 'OPENAI_API_KEY'"),
        # a value that only starts with a substitution, or whose default is a literal
        ("sh", ["-c", "PGPASSWORD=$(cat /run/secrets/pg)hunter2-SECRET psql"], "args.1", "variable 'PGPASSWORD'"),
        ("sh", ["-c", "PGPASSWORD=`cat /x`hunter2-SECRET psql"], "args.1", "variable 'PGPASSWORD'"),
        ("sh", ["-c", "PGPASSWORD=${DB_PASSWORD:-hunter2-SECRET} psql"], "args.1", "variable 'PGPASSWORD'"),
        ("mysql", ["-uapp", "-p${MYSQL_PASSWORD:=hunter2-SECRET}"], "args.1", "glued to the MySQL"),
        ("sh", ["-c", "PGPASSWORD=(hunter2-SECRET) psql"], "args.1", "variable 'PGPASSWORD'"),
        # busybox's shells
        ("sh", ["-c", "busybox sh -c 'export PGPASSWORD=hunter2-SECRET; psql'"], "args.1", "variable 'PGPASSWORD'"),
        ("busybox ash -c 'mysql -uapp -phunter2-SECRET app'", [], "command", "glued to the MySQL"),
        # PowerShell's -EncodedCommand, decoded, under each name PowerShell accepts for it
        ("pwsh", ["-NoProfile", "-EncodedCommand", _encoded("$env:PGPASSWORD='hunter2-SECRET'; psql")], "args.2",
         "variable 'PGPASSWORD', in PowerShell's -EncodedCommand"),
        ("powershell.exe", ["-enc", _encoded("mysql -uapp -phunter2-SECRET app")], "args.1", "glued to the MySQL"),
        ("powershell", ["-e", _encoded("tool --api-key hunter2-SECRET serve")], "args.1", "flag '--api-key'"),
        ("sh", ["-c", "pwsh -NoLogo -ec " + _encoded('$env:PGPASSWORD = "hunter2-SECRET"; psql')], "args.1",
         "variable 'PGPASSWORD'"),
        (f"powershell -EncodedCom {_encoded('mysql -phunter2-SECRET')}", [], "command", "glued to the MySQL"),
        # after PowerShell's options that take a value, and run by cmd /c in the same argument list
        ("pwsh", ["-ExecutionPolicy", "Bypass", "-enc", _encoded("$env:PGPASSWORD='hunter2-SECRET'; psql")],
         "args.3", "variable 'PGPASSWORD'"),
        ("cmd", ["/c", "powershell", "-NoProfile", "-enc", _encoded("$env:PGPASSWORD='hunter2-SECRET'; psql -h db")],
         "args.4", "variable 'PGPASSWORD'"),
        # four shells deep is read
        ("sh", ["-c", _nested(4, "PGPASSWORD=hunter2-SECRET psql")], "args.1", "variable 'PGPASSWORD'"),
        (_shells(4, "mysql -phunter2-SECRET"), [], "command", "glued to the MySQL"),
    ],
)
def test_a_secret_inside_shell_syntax_is_refused_naming_its_field_and_rule(
    registry: Registry, command: str, args: list[str], field: str, what: str
) -> None:
    env = {"SETUP": '$env:OPENAI_API_KEY = "hunter2SECRET0"'} if field == "env.SETUP" else {}
    component = _agent_with_server(command, args, env)
    manifest = triage_manifest(secrets={KEY_PATH: "env:K"}, allow_source_code_tools=True)
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, manifest, "database tool")
    assert caught.value.field == f"{SERVER}.{field}"
    assert "holds a plaintext secret" in caught.value.message and what in caught.value.message
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("command", "args", "env"),
    [
        # Windows' and PowerShell's references, and what a shell does when the variable is unset
        ("cmd", ["/c", "set PGPASSWORD=%DB_PASSWORD%&& psql -h db"], {}),
        ("cmd", ["/v:on", "/c", "set PGPASSWORD=!DB_PASSWORD!&& psql -h db"], {}),
        ("pwsh", ["-Command", "$env:PGPASSWORD=$env:DB_PASSWORD; psql -h db"], {}),
        ("pwsh", ["-Command", "$env:PGPASSWORD = (Get-Content C:\\secrets\\pg.txt); psql -h db"], {}),
        ("pwsh", ["-Command", "$env:PGPASSWORD=(Get-Secret -Name pg -AsPlainText); psql"], {}),
        ("sh", ["-c", "PGPASSWORD=${DB_PASSWORD:?} psql -h db"], {"SETUP": "PGPASSWORD=${DB_PASSWORD:-} psql"}),
        ("mysql", ["-uapp", "-p${MYSQL_PASSWORD:?set MYSQL_PASSWORD}"], {}),
        ("sh", ["-c", "mysql -p${MYSQL_PASSWORD:?} app"], {"SETUP": "PGPASSWORD=${DB_PASSWORD:-$FALLBACK}"}),
        ("sh", ["-c", "PGPASSWORD=$(cat /run/secrets/pg) psql -h db"], {}),
        # Docker secrets' "_FILE" variables name a file
        ("sh", ["-c", "export PGPASSWORD_FILE=/run/secrets/pg; psql -h db"], {}),
        ("docker", ["run", "-e", "POSTGRES_PASSWORD_FILE=/run/secrets/pg", "postgres:16"], {}),
        ("db-mcp", [], {"POSTGRES_PASSWORD_FILE": "/run/secrets/pg"}),
        # options that only look like a secret's
        ("docker", ["run", "--rm", "-p3306:3306", "mysql:8"], {}),
        ("sh", ["-c", "timeout 30 docker compose exec db mysql -uapp -p app"], {}),
        # busybox's shells and PowerShell's encoded script, read as any other
        ("busybox", ["sh", "-c", "PGPASSWORD=${DB_PASSWORD:?} psql -h db"], {}),
        ("pwsh", ["-NoProfile", "-enc", _encoded("$env:PGPASSWORD=$env:DB_PASSWORD; psql -h db")], {}),
        # a script file's own parameters after -File, which PowerShell does not read as its options
        ("pwsh", ["-NoProfile", "-File", "deploy.ps1", "-e", "prod"], {}),
        ("powershell", ["-ExecutionPolicy", "Bypass", "-f", "deploy.ps1", "-enc", "utf8"], {}),
        ("pwsh", ["deploy.ps1", "-e", "prod"], {}),
        ("sh", ["-c", "pwsh -File deploy.ps1 -e prod"], {}),
        ("sh", ["-c", _nested(4, "echo hi")], {}),
    ],
)
def test_a_value_that_names_where_the_secret_lives_is_stored(command: str, args: list[str], env: dict[str, str]) -> None:
    component = _agent_with_server(command, args, env)
    component["config"]["description"] = "Runs mysql -p${MYSQL_PASSWORD:?} with PGPASSWORD=${DB_PASSWORD:?} set."
    stored = apply_references(component, {KEY_PATH: "env:K"})  # what registration stores, before it loads the server
    assert stored["config"]["workbench"][0]["config"]["server_params"] == {
        "type": "StdioServerParams", "command": command, "args": args, "env": env}
    assert stored["config"]["description"] == component["config"]["description"]


def test_a_file_variable_given_a_secret_rather_than_a_path_is_refused() -> None:
    component = _agent_with_server("db-mcp", [], {"POSTGRES_PASSWORD_FILE": "hunter2-SECRET"})
    with pytest.raises(DefinitionInvalid) as caught:
        apply_references(component, {KEY_PATH: "env:K"})
    assert caught.value.field == f"{SERVER}.env.POSTGRES_PASSWORD_FILE"
    assert "hunter2" not in str(caught.value)


def test_a_password_set_between_two_lines_of_prose_with_apostrophes_is_refused(registry: Registry) -> None:
    component = _agent_with_server("db-mcp", [])
    del component["config"]["workbench"]
    component["config"]["system_message"] = "Don't ask for it.\nPGPASSWORD=hunter2-SECRET psql -h db\nIt's set."
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(secrets={KEY_PATH: "env:K"}), "prose")
    assert caught.value.field == "config.system_message"
    assert "variable 'PGPASSWORD'" in caught.value.message and "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("command", "args", "field"),
    [
        ("pwsh", ["-NoProfile", "-EncodedCommand", "hunter2-SECRET"], "args.2"),  # not base64
        ("powershell", ["-e", base64.b64encode(b"hunter2").decode()], "args.1"),  # an odd number of bytes
        ("powershell", ["-enc", base64.b64encode(b"\x00\xd8").decode()], "args.1"),  # half a surrogate pair
        ("sh", ["-c", "pwsh -ec hunter2-SECRET"], "args.1"),
        ("powershell -encodedcommand hunter2-SECRET", [], "command"),
        # not ASCII, which base64 cannot be
        ("pwsh", ["-enc", "hunter2-SECRET\u00e9"], "args.1"),
        ("sh", ["-c", "pwsh -enc hunter2-SECRET\u00e9"], "args.1"),
        ("cmd", ["/c", "powershell", "-enc", "hunter2-SECRET\u00e9"], "args.3"),
    ],
)
def test_an_encoded_powershell_script_that_does_not_decode_is_refused_unread(
    registry: Registry, command: str, args: list[str], field: str
) -> None:
    component = _agent_with_server(command, args)
    manifest = triage_manifest(secrets={KEY_PATH: "env:K"}, allow_source_code_tools=True)
    with left_unchanged(registry.path), pytest.raises(ScriptUnreadable) as caught:
        registry.add("support_triage", component, manifest, "encoded")
    assert caught.value.field == f"{SERVER}.{field}"
    assert "-EncodedCommand that is not base64 of UTF-16LE text" in caught.value.message
    assert "-Command" in (caught.value.hint or "")
    assert "hunter2" not in str(caught.value) and base64.b64encode(b"hunter2").decode() not in str(caught.value)


@pytest.mark.parametrize(
    ("command", "args", "field"),
    [
        ("sh", ["-c", _nested(5, "echo hi")], "args.1"),
        (_shells(5, "echo hi"), [], "command"),
    ],
)
def test_a_script_nested_past_four_shells_is_refused_unread(command: str, args: list[str], field: str) -> None:
    with pytest.raises(ScriptUnreadable) as caught:
        apply_references(_agent_with_server(command, args), {KEY_PATH: "env:K"})
    assert caught.value.field == f"{SERVER}.{field}"
    assert "nested more than 4 shells deep" in caught.value.message
    assert "run the innermost script directly" in (caught.value.hint or "")


def test_an_unreadable_script_in_text_stored_beside_the_definition_names_that_text() -> None:
    with pytest.raises(ScriptUnreadable) as caught:
        check_free_text("message", "Deploy the CRM sync.\n\nPGPASSWORD=${DB_PASSWORD:?} pwsh -enc hunter2-SECRET")
    assert caught.value.field == "message" and "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    "source",
    [
        'import subprocess\nsubprocess.run(["pwsh", "-enc", "hunter2-SECRET\u00e9"])\n',
        'import subprocess\nsubprocess.run("pwsh -enc hunter2-SECRET\u00e9", shell=True)\n',
    ],
)
def test_an_encoded_script_that_is_not_ascii_in_tool_source_is_refused_unread_naming_the_source(source: str) -> None:
    component = _agent_with_server("db-mcp", [])
    component["config"]["tools"] = [{"provider": "autogen_core.tools.FunctionTool", "config": {"source_code": source}}]
    with pytest.raises(ScriptUnreadable) as caught:
        apply_references(component, {KEY_PATH: "env:K"})
    assert caught.value.field == "config.tools.0.config.source_code" and "hunter2" not in str(caught.value)


def test_an_encoded_script_that_is_not_ascii_in_a_commit_message_is_refused_unread() -> None:
    with pytest.raises(ScriptUnreadable) as caught:
        check_free_text("message", "PGPASSWORD=${DB_PASSWORD:?} pwsh -enc hunter2-SECRET\u00e9")
    assert caught.value.field == "message" and "hunter2" not in str(caught.value)


def test_an_encoded_script_run_by_cmd_in_tool_source_is_read() -> None:
    script = _encoded("$env:PGPASSWORD='hunter2-SECRET'; psql -h db")
    component = _agent_with_server("db-mcp", [])
    source = f'import subprocess\nsubprocess.run(["cmd", "/c", "powershell", "-enc", "{script}"])\n'
    component["config"]["tools"] = [{"provider": "autogen_core.tools.FunctionTool", "config": {"source_code": source}}]
    with pytest.raises(DefinitionInvalid, match="variable 'PGPASSWORD'") as caught:
        apply_references(component, {KEY_PATH: "env:K"})
    assert "hunter2" not in str(caught.value)


def test_an_unreadable_script_in_an_objects_key_names_the_object() -> None:
    component = _agent_with_server("db-mcp", [])
    component["config"]["metadata"] = {"PGPASSWORD=${DB_PASSWORD:?} pwsh -enc hunter2-SECRET": "setup"}
    with pytest.raises(ScriptUnreadable) as caught:
        apply_references(component, {KEY_PATH: "env:K"})
    assert caught.value.field == "config.metadata" and "hunter2" not in str(caught.value)
