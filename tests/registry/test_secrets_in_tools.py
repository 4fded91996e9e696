"""Secrets in what a tool runs: the password variables of command-line tools, command lines kept in an MCP
server's environment, and a FunctionTool's Python source, read as Python."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.tools import FunctionTool

from config_registry import DefinitionInvalid, Registry, ScriptUnreadable
from config_registry.secrets import apply_references
from teamstore.context import BoundedChatCompletionContext
from tests.conftest import git
from tests.registry.conftest import calling_client, dump, left_unchanged, triage_manifest

SERVER = "participants.0.config.workbench.1.config.server_params"
SOURCE = "participants.0.config.workbench.0.config.tools.0.config.source_code"
MANIFEST = {"name": "tooled", "persist": ["researcher"], "context_bound": 20, "allow_source_code_tools": True}


def _encoded(script: str) -> str:
    """``script`` as PowerShell's -EncodedCommand takes it."""
    return base64.b64encode(script.encode("utf-16-le")).decode()


def lookup(query: str) -> str:
    """The tool whose source each test replaces."""
    return query


def _team(command: str | None = None, args: list[str] | None = None, env: dict[str, str] | None = None,
          source: str | None = None) -> dict[str, Any]:
    """A one-agent team with a FunctionTool (its source replaced by ``source``) and, given a ``command``, an MCP
    stdio server started with ``args`` and ``env``."""
    agent = AssistantAgent("researcher", model_client=calling_client(), tools=[FunctionTool(lookup, description="look")],
                           model_context=BoundedChatCompletionContext(max_messages=20))
    team = dump(RoundRobinGroupChat([agent], termination_condition=MaxMessageTermination(2)))
    config = team["config"]["participants"][0]["config"]
    if source is not None:
        config["workbench"][0]["config"]["tools"][0]["config"]["source_code"] = source
    if command is None:
        return team
    params = {"type": "StdioServerParams", "command": command, "args": args or [], "env": env or {}}
    config["workbench"].append({"provider": "autogen_ext.tools.mcp.McpWorkbench", "component_type": "workbench",
                                "config": {"server_params": params}})
    return team


def _refused(registry: Registry, team: dict[str, Any]) -> DefinitionInvalid:
    """The error registering ``team`` raises; nothing committed, and the secret nowhere."""
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("tooled", team, triage_manifest(**MANIFEST), "tool")
    everything = git(registry.path, "log", "-p", "--all") + "".join(p.read_text() for p in registry.path.rglob("*.json"))
    assert "hunter2" not in f"{caught.value.message} {caught.value.hint} {everything}"
    assert "never stores secrets" in caught.value.message
    return caught.value


def _stored(registry: Registry, team: dict[str, Any]) -> dict[str, Any]:
    """The team as the registry stores it."""
    registry.add("tooled", team, triage_manifest(**MANIFEST), "tool")
    stored: dict[str, Any] = registry.resolve("tooled").component
    return stored


def _server_stored(team: dict[str, Any], secrets: dict[str, str] | None = None) -> Any:
    """The MCP server's parameters as registration stores them, before it loads the server (which needs the
    'mcp' package)."""
    return _server(apply_references(team, secrets or {}))


def _server(team: dict[str, Any]) -> Any:
    return team["config"]["participants"][0]["config"]["workbench"][1]["config"]["server_params"]


@pytest.mark.parametrize(
    ("env", "args", "field", "variable"),
    [
        ({"SSHPASS": "hunter2-SECRET"}, [], "env.SSHPASS", "SSHPASS"),  # sshpass -e
        ({"RCLONE_CONFIG_PASS": "hunter2-SECRET"}, [], "env.RCLONE_CONFIG_PASS", "RCLONE_CONFIG_PASS"),
        ({"RABBITMQ_DEFAULT_PASS": "hunter2-SECRET"}, [], "env.RABBITMQ_DEFAULT_PASS", "RABBITMQ_DEFAULT_PASS"),
        ({"SMTP_PASS": "hunter2-SECRET"}, [], "env.SMTP_PASS", "SMTP_PASS"),
        ({}, ["-c", "SSHPASS=hunter2-SECRET sshpass -e rsync -a /srv backup@host:/b"], "args.1", "SSHPASS"),
        ({}, ["run", "-e", "SSHPASS=hunter2-SECRET", "mcp/ssh"], "args.2", "SSHPASS"),
        ({"SETUP": "export SSHPASS=hunter2-SECRET"}, [], "env.SETUP", "SSHPASS"),
        # the peers the rules already knew
        ({"MYSQL_PWD": "hunter2-SECRET"}, [], "env.MYSQL_PWD", "MYSQL_PWD"),
        ({"REDISCLI_AUTH": "hunter2-SECRET"}, [], "env.REDISCLI_AUTH", "REDISCLI_AUTH"),
        ({}, ["-c", "ANSIBLE_VAULT_PASSWORD=hunter2-SECRET ansible-playbook site.yml"], "args.1",
         "ANSIBLE_VAULT_PASSWORD"),
        ({"AWS_SESSION_TOKEN": "hunter2-SECRET"}, [], "env.AWS_SESSION_TOKEN", "AWS_SESSION_TOKEN"),
    ],
)
def test_the_password_variables_of_command_line_tools_are_refused(
    registry: Registry, env: dict[str, str], args: list[str], field: str, variable: str
) -> None:
    refused = _refused(registry, _team("sh" if args[:1] == ["-c"] else "docker", args, env))
    assert refused.field == f"config.{SERVER}.{field}"
    assert f"{variable!r}" in refused.message
    assert f"--secret {SERVER}.{field}=env:" in (refused.hint or "")


def test_where_a_tool_reads_its_password_from_and_a_pass_that_is_no_password_are_stored() -> None:
    env = {"SSHPASS_FILE": "/run/secrets/ssh", "PGPASSFILE": "/run/secrets/pgpass", "GIT_ASKPASS": "/usr/bin/askpass",
           "FIRST_PASS": "fast", "NOTE": "sshpass reads SSHPASS=... from its environment",
           "RCLONE_CONFIG_PASS_COMMAND": "pass show rclone/config"}
    args = ["-c", "SSHPASS=$(cat /run/secrets/ssh) sshpass -e ssh backup@host; SSHPASS=${SSHPASS} sshpass -e true;"
                  " ffmpeg -i in.mp4 -pass 1 -f null /dev/null"]
    stored = _server_stored(_team("sh", args, env))
    assert stored["env"] == env and stored["args"] == args


@pytest.mark.parametrize(
    ("command", "args", "env", "field"),
    [
        ("sshpass", ["-p", "hunter2-SECRET", "ssh", "backup@host"], {}, "args.1"),
        ("/usr/bin/sshpass", ["-v", "-phunter2-SECRET", "rsync", "-a", "/srv", "backup@host:/b"], {}, "args.1"),
        ("sh", ["-c", "cd /srv && sshpass -p 'hunter2 SECRET' scp d.sql backup@host:"], {}, "args.1"),
        ("sshpass -p hunter2-SECRET ssh backup@host", [], {}, "command"),
        ("db-mcp", [], {"SYNC_CMD": "sshpass -p hunter2-SECRET rsync -a /srv backup@host:/b"}, "env.SYNC_CMD"),
    ],
)
def test_a_password_given_to_sshpass_on_its_command_line_is_refused(
    registry: Registry, command: str, args: list[str], env: dict[str, str], field: str
) -> None:
    refused = _refused(registry, _team(command, args, env))
    assert refused.field == f"config.{SERVER}.{field}"
    assert "plaintext secret (a password given to sshpass's '-p'" in refused.message


def test_sshpass_reading_its_password_elsewhere_and_ssh_s_port_are_stored() -> None:
    args = ["-c", "sshpass -e ssh -p 2222 backup@host; sshpass -f /run/secrets/ssh ssh -p2222 backup@host;"
                  " sshpass -p ${SSH_PASSWORD} ssh backup@host; sshpass -d 3 scp -P 2222 d.sql backup@host:"]
    assert _server_stored(_team("sh", args))["args"] == args


@pytest.mark.parametrize(
    ("env", "what"),
    [
        ({"CMD": "mysql -uroot -phunter2-SECRET db"}, "a password glued to the MySQL client's '-p'"),
        ({"INIT_COMMAND": "cd /srv && mysqldump -phunter2-SECRET crm > d.sql"}, "a password glued to"),
        ({"SETUP": "mysql -h db -uroot -phunter2-SECRET crm < schema.sql"}, "a password glued to"),
        ({"START_CMD": "tool --token hunter2-SECRET serve"}, "the value of the flag '--token'"),
        ({"HEALTHCHECK_SCRIPT": "psql 'host=db password=hunter2-SECRET' -c 'select 1'"},
         "a connection string's 'password'"),
    ],
)
def test_a_command_line_kept_in_an_mcp_servers_environment_is_read_as_one(
    registry: Registry, env: dict[str, str], what: str
) -> None:
    refused = _refused(registry, _team("db-mcp", [], {"LOG_LEVEL": "info", **env}))
    assert refused.field == f"config.{SERVER}.env.{next(iter(env))}"
    assert f"plaintext secret ({what}" in refused.message and "inside a command line" in refused.message


def test_environment_values_that_are_no_command_line_with_a_password_are_stored() -> None:
    env = {"MYSQL_OPTS": "-p3306", "PORT": "3306", "CMD": "redis-cli -p6379 ping", "ASK_CMD": "mysql -h db -uapp -p crm",
           "INIT_CMD": "mysql -uapp -p${MYSQL_PASSWORD} crm", "DOCKER_CMD": "docker run -p3306:3306 mysql:8",
           "NOTE": "password=hunter2 is what the docs say; run mysql -p to be asked"}
    assert _server_stored(_team("db-mcp", [], env))["env"] == env


def test_a_declared_reference_stands_in_for_a_command_line_in_the_environment() -> None:
    team = _team("db-mcp", [], {"CMD": "mysql -uroot -phunter2-SECRET db"})
    stored = _server_stored(team, {f"{SERVER}.env.CMD": "env:DB_INIT_CMD"})
    assert stored["env"] == {"CMD": {"$secret": "env:DB_INIT_CMD"}}


@pytest.mark.parametrize(
    "body",
    [
        'API_KEY=os.getenv("API_KEY")',
        'TOKEN=os.environ["TOKEN"]',
        'API_KEY = os.getenv("API_KEY")',
        'PGPASSWORD=os.environ.get("PGPASSWORD", "")',
        "DB_PASS=secrets_client.read('db')",
        'PASSWORD: str = os.environ["PASSWORD"]',
        'HELP = "set PGPASSWORD=... before psql, and TOKEN=<your token>"',
        # lower-case names given nothing, an example, what the code reads when it runs, or prose
        'password = ""',
        'api_key = "<your key>"',
        'db_token: str = "..."',
        'api_key = os.environ["API_KEY"]',
        'password = getpass.getpass()',
        "token = None",
        'self.secret = os.getenv("SECRET")',
        'connect(host="db", password=os.environ["PGPASSWORD"])',
        'options = {"key": "id", "auth": "basic", "session": "default", "cookie": "sid"}',
        'password = input("Enter your password: ")',
        'hint = dict(password="Ask the on-call engineer for it")',
        "def inner(password=None, *, token=''): return password",
        'subprocess.run(["pwsh", "-enc", "' + _encoded("$env:PGPASSWORD=$env:DB_PASSWORD; psql") + '"])',
    ],
)
def test_tool_source_reading_a_secret_from_the_environment_is_stored(registry: Registry, body: str) -> None:
    source = f"def lookup(query: str) -> str:\n    import os\n    {body}\n    return query\n"
    stored = _stored(registry, _team(source=source))
    assert stored["config"]["participants"][0]["config"]["workbench"][0]["config"]["tools"][0]["config"][
        "source_code"] == source


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ('API_KEY="q7Rz9LmX2vhunter2Pk4TnW8s"', "the value of the variable 'API_KEY'"),
        ("API_KEY='abc123hunter2'", "the value of the variable 'API_KEY'"),
        ("API_KEY = 'abc123hunter2'", "the value of the variable 'API_KEY'"),
        ('TOKEN: str = "abc123hunter2"', "the value of the variable 'TOKEN'"),
        ('os.environ["PGPASSWORD"] = "hunter2"', "the value of the variable 'PGPASSWORD'"),
        ('subprocess.run("PGPASSWORD=hunter2 psql -h db", shell=True)', "the value of the variable 'PGPASSWORD'"),
        ('subprocess.run("x", env={"SSHPASS": "hunter2"})', "the value of the variable 'SSHPASS'"),
        ('subprocess.run("x", env=dict(MYSQL_PWD="hunter2"))', "the value of the variable 'MYSQL_PWD'"),
        ('subprocess.run(["mysql", "-uroot", "-phunter2", "crm"])', "a password glued to the MySQL client's '-p'"),
        ('subprocess.run("mysql -uroot -phunter2 crm", shell=True)', "a password glued to the MySQL client's '-p'"),
        ("pass  # PGPASSWORD=hunter2 psql -h db", "the value of the variable 'PGPASSWORD'"),
        ('API_KEY = b"abc123hunter2"', "the value of the variable 'API_KEY'"),
        ('print(TOKEN := "abc123hunter2")', "the value of the variable 'TOKEN'"),
        ('subprocess.run(("sshpass", "-p", "hunter2", "ssh", "h"))', "a password given to sshpass's '-p'"),
        ('KEY = "sk-proj-hunter20123456789abcdefg"', "what looks like an API key"),
        # lower- and mixed-case names: assignments, keyword arguments, dict keys, attributes, defaults
        ('api_key = "abc123hunter2"', "the value of the variable 'api_key'"),
        ('password = "hunter2-real"', "the value of the variable 'password'"),
        ('db_token: str = "hunter2abc"', "the value of the variable 'db_token'"),
        ('conn = connect(host="db", password="hunter2-real")', "the value of the variable 'password'"),
        ('headers = {"api_key": "hunter2-real"}', "the value of the variable 'api_key'"),
        ('self.secret = "hunter2-real"', "the value of the variable 'secret'"),
        ('client.dbPassword = "hunter2-real"', "the value of the variable 'dbPassword'"),
        ("def inner(user, password='hunter2-real'): return user", "the value of the variable 'password'"),
        ("def inner(*, apiKey='hunter2-real'): return apiKey", "the value of the variable 'apiKey'"),
        # a command line kept under a secret's name, and PowerShell's encoded script
        ('password_command = "tool --token hunter2-real serve"', "the value of the flag '--token', inside"),
        ('password_command = "echo hunter2-real"', "a literal that a command kept under a secret's name prints"),
        ('subprocess.run(["powershell", "-enc", "' + _encoded("$env:PGPASSWORD='hunter2'; psql") + '"])',
         "the value of the variable 'PGPASSWORD', in PowerShell's -EncodedCommand"),
        ('subprocess.run("pwsh -enc ' + _encoded("$env:PGPASSWORD = 'hunter2'; psql") + '", shell=True)',
         "the value of the variable 'PGPASSWORD'"),
    ],
)
def test_tool_source_holding_a_secret_literal_is_refused(registry: Registry, body: str, what: str) -> None:
    source = f"def lookup(query: str) -> str:\n    import os, subprocess\n    {body}\n    return query\n"
    refused = _refused(registry, _team(source=source))
    assert refused.field == f"config.{SOURCE}"
    assert f"plaintext secret ({what}" in refused.message
    assert "os.environ" in (refused.hint or "")


def test_tool_source_running_an_encoded_powershell_script_that_does_not_decode_is_refused(registry: Registry) -> None:
    source = 'def lookup(query: str) -> str:\n    subprocess.run(["pwsh", "-enc", "hunter2!"])\n    return query\n'
    with left_unchanged(registry.path), pytest.raises(ScriptUnreadable) as caught:
        registry.add("tooled", _team(source=source), triage_manifest(**MANIFEST), "tool")
    assert caught.value.field == f"config.{SOURCE}"
    assert "-EncodedCommand" in caught.value.message and "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    "body",
    [
        # names whose last word says what a value is kept under or described by, not a credential
        'memory_key = "chat_history"',
        'chain = load(input_key="question", text_key="content", s3_key="reports/latest.csv")',
        'env_key = "OPENAI_API_KEY"',
        'password_selector = "#password"',
        'csrf_cookie = "csrftoken"',
        'password_policy = "strict"',
        'secret_type = "api_key"',
        'http_auth = "basic"',
        'schema = {"id": "INTEGER", "password_hash": "TEXT"}',
        'command = "UPDATE users SET password_hash=? WHERE id=?"',
        # a credential's name given a mask, a type, a word or a placeholder
        'rec = {}\n    rec["password"] = "[REDACTED]"\n    rec["api_key"] = "***"',
        'schema = {"username": "string", "password": "string"}',
        'labels = {"password": "Passwort", "invalid_token": "E401", "padding_token": "[PAD]"}',
        'separator_token = "|"',
        "def search(query, token='default'): return query",
        # a string as a dict key is data, not a name
        'answers = {"what is the admin password? It is Tr0ub4dor": "no"}',
    ],
)
def test_ordinary_tool_code_under_names_like_a_credentials_is_stored(body: str) -> None:
    source = f"def lookup(query: str) -> str:\n    {body}\n    return query\n"
    stored = apply_references(_team(source=source), {})
    assert stored["config"]["participants"][0]["config"]["workbench"][0]["config"]["tools"][0]["config"][
        "source_code"] == source


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ('LABELS = {"host=db user=app password=Tr0ub4dor": "primary"}', "a connection string's 'password'"),
        ('access_key = "Tr0ub4dor-AKIA"', "the value of the variable 'access_key'"),
        ('cfg = {"X-Api-Key": "Tr0ub4dor-9f8e"}', "the value of the variable 'X-Api-Key'"),
        ('auth_token = "Tr0ub4dor9f8e7d6c"', "the value of the variable 'auth_token'"),
    ],
)
def test_a_secret_in_tool_code_is_refused_without_repeating_what_is_no_name(body: str, what: str) -> None:
    source = f"def lookup(query: str) -> str:\n    {body}\n    return query\n"
    with pytest.raises(DefinitionInvalid) as caught:
        apply_references(_team(source=source), {})
    assert f"plaintext secret ({what})" in caught.value.message
    assert "Tr0ub4dor" not in str(caught.value)
