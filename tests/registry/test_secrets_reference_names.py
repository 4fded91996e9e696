"""A name whose last word says its value names, locates or describes a credential (``PASSWORD_PROMPT``,
``TOKEN_URL``, ``SECRET_NAME``) is a reference, read alike in a field, an environment, a command line and a
tool's source: its value is stored unless its shape gives a secret away. A ``SECRET_URL`` is no reference, nor
is a credential's ``_HEADER`` given more than a header's name. A command kept under a secret's name
(``DB_PASSWORD_COMMAND``) is read as a command line, and a path given for a credentials file is stored."""

from __future__ import annotations

from typing import Any

import pytest

from config_registry import DefinitionInvalid
from config_registry.secrets import apply_references
from tests.registry.conftest import stdio_component

SERVER = "workbench.0.config.server_params"
SOURCE = "tools.0.config.source_code"
REFERENCES = {
    "PASSWORD_PROMPT": "Enter your password",
    "TOKEN_URL": "https://auth.example.com/oauth/token",
    "PASSWORD_RESET_URL": "https://crm.example.com/reset",
    "SECRET_NAME": "prod/db",
    "VAULT_SECRET_PATH": "secret/data/crm",
    "API_KEY_HEADER": "X-Api-Key",
    "API_KEY_ENV": "OPENAI_API_KEY",
    "PASSWORD_LABEL": "Database password",
    "PASSWORD_FIELD": "#password",
    "DB_PASSWORD_COMMAND": "pass show db/crm",
    "GOOGLE_APPLICATION_CREDENTIALS": "/run/secrets/gcp.json",
}


def _component(env: dict[str, str] | None = None, args: list[str] | None = None, source: str | None = None,
               fields: dict[str, Any] | None = None) -> dict[str, Any]:
    return stdio_component(env, args, source, fields, command="sh")


def _refused(component: dict[str, Any]) -> DefinitionInvalid:
    with pytest.raises(DefinitionInvalid) as caught:
        apply_references(component, {})
    assert "hunter2" not in f"{caught.value.message} {caught.value.hint}"
    assert "never stores secrets" in caught.value.message
    return caught.value


def test_references_named_for_a_secret_are_stored_as_fields_and_environment_variables() -> None:
    component = _component(env=REFERENCES, fields={name.lower(): value for name, value in REFERENCES.items()})
    assert apply_references(component, {}) == component


def test_references_named_for_a_secret_are_stored_in_a_command_line() -> None:
    args = ["-c", "PASSWORD_PROMPT='Enter your password' GOOGLE_APPLICATION_CREDENTIALS=/run/secrets/gcp.json "
                  "tool --password-file /run/secrets/pw --secret-name prod/db --token-url https://auth.example.com"
                  " && DB_PASSWORD_COMMAND='pass show db/crm' sync"]
    component = _component(args=args)
    assert apply_references(component, {}) == component


def test_references_named_for_a_secret_are_stored_in_tool_source() -> None:
    body = "".join(f"    {name} = {value!r}\n" for name, value in REFERENCES.items())
    source = f"def lookup(query: str) -> str:\n{body}    connect(secret_name='prod/db', token_url=TOKEN_URL)\n"
    component = _component(source=source)
    assert apply_references(component, {}) == component


@pytest.mark.parametrize(
    ("env", "args", "what"),
    [
        ({"DB_PASSWORD_COMMAND": "mysql -uroot -phunter2-SECRET crm"}, [], "glued to the MySQL client's '-p'"),
        ({"SECRET_SCRIPT": "tool --token hunter2-SECRET serve"}, [], "the value of the flag '--token'"),
        ({}, ["-c", "PASSWORD_CMD='tool --token hunter2-SECRET' sync"], "the value of the flag '--token'"),
        ({}, ["-c", "export DB_PASSWORD_COMMAND='sshpass -p hunter2-SECRET ssh h'"], "sshpass's '-p'"),
    ],
)
def test_a_command_line_kept_under_a_secrets_name_is_read_as_one(
    env: dict[str, str], args: list[str], what: str
) -> None:
    refused = _refused(_component(env=env, args=args))
    assert refused.field == f"config.{SERVER}." + (f"env.{next(iter(env))}" if env else "args.1")
    assert f"{what}, inside a command line)" in refused.message


def test_a_command_line_kept_under_a_secrets_name_in_tool_source_is_read_as_one() -> None:
    refused = _refused(_component(source='PASSWORD_COMMAND = "tool --api-key hunter2-SECRET serve"\n'))
    assert refused.field == f"config.{SOURCE}"
    assert "the value of the flag '--api-key', inside a command line" in refused.message


@pytest.mark.parametrize(
    ("env", "args", "what"),
    [
        ({"GOOGLE_APPLICATION_CREDENTIALS": "hunter2-SECRET"}, [], "'GOOGLE_APPLICATION_CREDENTIALS'"),
        ({"TOKEN_URL": "https://app:hunter2-SECRET@auth.example.com/token"}, [], "a URL with a credential"),
        ({"PASSWORD_PROMPT": "Bearer hunter2SECRET0123456789"}, [], "authorization value"),
        ({"SECRET_NAME": "sk-proj-hunter2SECRET0123456789"}, [], "API key"),
        ({}, ["-c", "tool --password-file hunter2-SECRET"], "the value of the flag '--password-file'"),
        ({}, ["-c", "GOOGLE_APPLICATION_CREDENTIALS=hunter2-SECRET tool"], "'GOOGLE_APPLICATION_CREDENTIALS'"),
    ],
)
def test_a_secret_given_to_a_reference_by_mistake_is_still_refused(
    env: dict[str, str], args: list[str], what: str
) -> None:
    refused = _refused(_component(env=env, args=args))
    assert refused.field == f"config.{SERVER}." + (f"env.{next(iter(env))}" if env else "args.1")
    assert what in refused.message
    assert "--secret" in (refused.hint or "")


WEBHOOK = "https://outlook.office.com/webhook/a1b2/IncomingWebhook/hunter2SECRET9f8e7d6c/c3d4"


@pytest.mark.parametrize(
    ("env", "fields"),
    [
        ({"CALENDAR_SECRET_URL": "https://calendar.google.com/calendar/ical/x%40example.com/"
                                 "private-hunter2SECRET9f8e7d6c5b4a3928/basic.ics"}, {}),
        ({"TEAMS_WEBHOOK_SECRET_URL": WEBHOOK}, {}),
        ({}, {"webhook_secret_url": "https://discord.com/api/webhooks/123/hunter2SECRETabcdef"}),
        ({"WEBHOOK_SECRET_HEADER": "X-Webhook-Secret: hunter2SECRET9f8e"}, {}),
        ({"PASSWORD_HEADER": "Basic aHVudGVyMjpwYXNz"}, {}),
        ({"API_KEY_HEADER": "hunter2SECRET9f8e"}, {}),
    ],
)
def test_a_url_that_secret_says_is_one_and_a_credentials_header_value_are_refused(
    env: dict[str, str], fields: dict[str, str]
) -> None:
    refused = _refused(_component(env=env, fields=fields))
    name = next(iter(env or fields))
    assert refused.field == (f"config.{SERVER}.env.{name}" if env else f"config.{name}")
    assert f"its name, {name!r}, means a credential" in refused.message


def test_a_header_named_for_a_credential_is_stored_given_the_headers_name_or_a_line_leaving_it_out() -> None:
    env = {"API_KEY_HEADER": "X-Api-Key", "WEBHOOK_SECRET_HEADER": "X-Webhook-Secret: ${WEBHOOK_SECRET}",
           "AUTH_HEADER": "Authorization", "SIGNATURE_HEADER": "X-Hub-Signature-256"}
    args = ["-c", "tool --api-key-header X-Api-Key --token-url https://auth.example.com/token"]
    component = _component(env=env, args=args, fields={"api_key_header": "X-Api-Key"})
    assert apply_references(component, {}) == component


@pytest.mark.parametrize(
    ("env", "args", "fields", "field", "what"),
    [
        ({}, [], {"db_password_cmd": "sshpass -p hunter2 ssh host"}, "db_password_cmd", "sshpass's '-p'"),
        ({}, [], {"secret_script": "mysql -uroot -phunter2 crm"}, "secret_script", "glued to the MySQL"),
        ({}, [], {"password_command": "echo hunter2"}, "password_command", "prints"),
        ({}, ["--password-command", "echo hunter2"], {}, f"{SERVER}.args.1", "prints"),
        ({}, ["--password-command=echo hunter2"], {}, f"{SERVER}.args.0", "prints"),
        ({}, ["-c", "tool --password-command 'mysql -uroot -phunter2 crm'"], {}, f"{SERVER}.args.1", "glued"),
        ({}, ["-c", "tool --secret-cmd 'echo -n hunter2'"], {}, f"{SERVER}.args.1", "prints"),
        ({"RCLONE_PASSWORD_COMMAND": "echo hunter2"}, [], {}, f"{SERVER}.env.RCLONE_PASSWORD_COMMAND", "prints"),
        ({"RCLONE_PASSWORD_COMMAND": "printf %s hunter2&3"}, [], {}, f"{SERVER}.env.RCLONE_PASSWORD_COMMAND",
         "prints"),
    ],
)
def test_a_command_kept_under_a_secrets_name_in_a_field_flag_or_variable_is_read_as_one(
    env: dict[str, str], args: list[str], fields: dict[str, str], field: str, what: str
) -> None:
    refused = _refused(_component(env=env, args=args, fields=fields))
    assert refused.field == f"config.{field}"
    assert what in refused.message


def test_a_command_kept_under_a_secrets_name_that_prints_no_literal_is_stored() -> None:
    env = {"RCLONE_PASSWORD_COMMAND": "echo $RCLONE_PW > /dev/null", "DB_PASSWORD_CMD": "printf '%s' \"$PW\"",
           "INIT_COMMAND": "echo starting", "PASSWORD_COMMAND": "pass show db/crm"}
    args = ["--password-command", "cat /run/secrets/pw", "--command", "echo ready"]
    fields = {"password_command": "echo ${DB_PASSWORD:?}", "secret_script": "vault kv get -field=pw secret/db"}
    source = 'password_command = "printf %s \\"$(pass show db)\\""\n'
    component = _component(env=env, args=args, fields=fields, source=source)
    assert apply_references(component, {}) == component


RELATIVE_PATHS = {
    "GOOGLE_APPLICATION_CREDENTIALS": "secrets/gcp.json",
    "DB_PASSWORD_FILE": "./run/pw",
    "POSTGRES_PASSWORD_FILE": "./run/secrets/pg",
    "SMTP_PASSWORD_FILE": "smtp-password.txt",
    "AWS_SHARED_CREDENTIALS_FILE": "../config/aws-credentials",
    "MYSQL_PASSWORD_FILE": ".pgpass",
    "API_KEY_FILE": "certs/Prod-2024.PEM",
}


def test_a_relative_path_given_for_a_credentials_file_is_stored() -> None:
    source = "".join(f"{name} = {value!r}\n" for name, value in RELATIVE_PATHS.items())
    args = ["--password-file", "secrets/pw.txt", "--secret-file=./run/secret", "--client-credentials-file", "gcp.json"]
    fields = {"db_password_file": "pw.txt", "google_application_credentials": "config/gcp-service-account.json"}
    component = _component(env=RELATIVE_PATHS, args=args, source=source, fields=fields)
    assert apply_references(component, {}) == component


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FIREBASE_CREDENTIALS", "./firebase.json"),
        ("GOOGLE_CREDENTIALS", "./sa.json"),
        ("DB_CREDENTIALS", "../creds/sa.json"),
        ("DB_PASSWORD_FILE", "./Secrets/pw"),
        ("DB_PASSWORD_FILE", "./run/pg14"),
        ("DB_PASSWORD_FILE", "../secrets/POSTGRES_PASSWORD"),
        ("DB_PASSWORD_FILE", "./secrets/db.password"),
        ("DB_PASSWORD_FILE", "./secrets/db_password_v2"),
        ("DB_PASSWORD_FILE", "../.secrets/pw"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "./keys/my-project-3f2a1b.json"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "./gcp-sa-key-v1.json"),
    ],
)
def test_a_path_from_the_current_or_the_parent_folder_is_stored_under_a_file_or_a_credentials_name(
    name: str, value: str
) -> None:
    component = _component(env={name: value}, args=[f"--{name.lower().replace('_', '-')}", value])
    assert apply_references(component, {}) == component


@pytest.mark.parametrize("value", ["keys/my-project-3f2a1b.json", "k8s/sa.json", "secrets/v2/sa.json"])
def test_a_bare_relative_path_whose_words_do_not_look_random_is_stored(value: str) -> None:
    component = _component(env={"GOOGLE_APPLICATION_CREDENTIALS": value, "DB_PASSWORD_FILE": value})
    assert apply_references(component, {}) == component


@pytest.mark.parametrize("value", ["gcp.json", "gcp.JSON", "gcp.Json", "/run/secrets/gcp.json", "~/.config/gcp.json"])
def test_googles_credentials_take_a_json_path_whatever_the_case_of_its_extension(value: str) -> None:
    component = _component(env={"GOOGLE_APPLICATION_CREDENTIALS": value})
    assert apply_references(component, {}) == component


@pytest.mark.parametrize(
    "value",
    ["hunter2-Xk9!pq", "hunter2SECRET9/pq", "keys/hunter2Xk9pqLm.txt", "hunter2.Xk9", "run/pw;hunter2", "hunter2 pw.txt",
     # a password or a key with a dot or a slash in it: no known extension, a digit in a word, a capital inside one
     "Pa55.word", "P4ss.w0rd", "sDX5/J.iNCBk", "correct/horse/battery/staple", "s3cr3t/x", "my.password", "hunter/2",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "Hunter.Pass", "Summer2024.txt"],
)
def test_a_secret_under_a_file_name_is_refused_though_it_has_a_slash_or_a_dot(value: str) -> None:
    assert _refused(_component(env={"DB_PASSWORD_FILE": value})).field == f"config.{SERVER}.env.DB_PASSWORD_FILE"
    assert _refused(_component(fields={"db_password_file": value})).field == "config.db_password_file"
    assert _refused(_component(source=f"DB_PASSWORD_FILE = {value!r}\n")).field == f"config.{SOURCE}"
    assert _refused(_component(args=["--password-file", value])).field == f"config.{SERVER}.args.1"
    if " " not in value and ";" not in value and "!" not in value:  # one shell word as it is
        script = f"DB_PASSWORD_FILE={value} psql"
        assert _refused(_component(args=["-c", script])).field == f"config.{SERVER}.args.1"
        assert _refused(_component(fields={"dsn": f"host=db user=app password_file={value}"})).field == "config.dsn"


@pytest.mark.parametrize(
    "given",
    [
        {"env": {"DB_CREDENTIALS": "scott/tiger"}},
        {"env": {"ORACLE_CREDENTIALS": "app_user/Welcome"}},
        {"env": {"GOOGLE_APPLICATION_CREDENTIALS": "scott/tiger"}},
        {"fields": {"credentials": "scott/tiger"}},
        {"args": ["--credentials", "scott/tiger"]},
        {"args": ["--db-credentials=admin/admin"]},
        {"source": 'DB_CREDENTIALS = "scott/tiger"\n'},
    ],
)
def test_a_user_and_password_pair_under_a_credentials_name_is_refused_though_it_reads_as_a_path(
    given: dict[str, Any],
) -> None:
    _refused(_component(**given))


def test_a_credentials_name_takes_an_absolute_path() -> None:
    env = {"DB_CREDENTIALS": "/run/secrets/db", "AWS_CREDENTIALS": "~/.aws/credentials"}
    component = _component(env=env, args=["--credentials", "/run/secrets/db"])
    assert apply_references(component, {}) == component


@pytest.mark.parametrize(
    "script",
    [
        "DB_PASSWORD_FILE=/run/secrets/pg psql -h db",
        "GOOGLE_APPLICATION_CREDENTIALS=secrets/gcp.json gcloud auth application-default print-access-token",
        "OPENAI_API_KEY=EMPTY python client.py",
    ],
)
def test_a_path_or_a_dummy_key_given_to_a_variable_set_before_a_command_in_one_argument_is_stored(script: str) -> None:
    component = _component(args=["-c", script])
    assert apply_references(component, {}) == component


@pytest.mark.parametrize(
    "script",
    [
        "DB_PASSWORD_FILE=hunter2-Xk9!pq psql -h db",
        "DB_PASSWORD_FILE='/run/pw hunter2' psql",
        "DB_PASSWORD_FILE=/run/pw;hunter2 psql",
        "OPENAI_API_KEY=sk-ollama-hunter2SECRET0123 python client.py",
    ],
)
def test_a_secret_given_to_a_variable_set_before_a_command_in_one_argument_is_still_refused(script: str) -> None:
    assert _refused(_component(args=["-c", script])).field == f"config.{SERVER}.args.1"


@pytest.mark.parametrize(
    ("args", "index"),
    [
        (["run", "-e", "API_KEYS=none q7Rz9LmX2vPkAbC", "image"], 2),
        (["run", "--env", "OPENAI_API_KEY=EMPTY q7Rz9LmX2vPk", "image"], 2),
        (["run", "--env=OPENAI_API_KEY=none q7Rz9LmX2vPk", "image"], 1),
        (["run", "-e", "DB_PASSWORD_FILE=/run/pw hunter2", "image"], 2),
        (["-c", "env 'API_KEYS=none q7Rz9LmX2vPkAbC' tool"], 1),
        (["-c", "env \"DB_PASSWORD_FILE=/run/pw hunter2\" psql"], 1),
    ],
)
def test_a_variables_whole_value_is_judged_whole_where_no_command_follows_it(args: list[str], index: int) -> None:
    # Docker's -e value and a word the shell keeps whole are the variable's whole value: a dummy key or a
    # path at its start says nothing of the secret after it.
    assert _refused(_component(args=args)).field == f"config.{SERVER}.args.{index}"


@pytest.mark.parametrize(
    ("command", "args", "index"),
    [
        ("env", ["OPENAI_API_KEY=EMPTY q7Rz9LmX2vPkAbC", "server"], 0),
        ("env", ["DB_PASSWORD_FILE=/run/pw hunter2Xk", "server"], 0),
        ("env", ["OPENAI_API_KEY=EMPTY\nq7Rz9LmX2vPkAbC", "server"], 0),
        ("systemd-run", ["-E", "OPENAI_API_KEY=EMPTY q7Rz9LmX2vPkAbC", "server"], 1),
        ("server", ["-c", "OPENAI_API_KEY=EMPTY q7Rz9LmX2vPkAbC"], 1),
    ],
)
def test_a_variable_set_in_an_argument_no_shell_splits_is_judged_by_its_whole_value(
    command: str, args: list[str], index: int
) -> None:
    component = _component(args=args)
    component["config"]["workbench"][0]["config"]["server_params"]["command"] = command
    assert _refused(component).field == f"config.{SERVER}.args.{index}"


@pytest.mark.parametrize("command", ["sh", "bash", "zsh", "dash", "ash", "/bin/sh", "busybox"])
def test_a_dummy_key_set_before_a_command_in_a_shells_script_is_judged_by_its_first_word(command: str) -> None:
    args = ["sh", "-c", "OPENAI_API_KEY=EMPTY python client.py"] if command == "busybox" else [
        "-lc", "OPENAI_API_KEY=EMPTY python client.py"]
    component = _component(args=args)
    component["config"]["workbench"][0]["config"]["server_params"]["command"] = command
    assert apply_references(component, {}) == component


STORED_SECRETS_NAMED = {
    "SECRET_ID": "prod/db",
    "AWS_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/crm-db-AbCdEf",
    "ECS_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds!db-5f1e-AbCdEf:password::",
    "DB_SECRET_REF": "projects/acme/secrets/crm-db/versions/latest",
    "REGIONAL_SECRET_REF": "projects/acme/locations/us-central1/secrets/crm-db",
    "KV_SECRET_REF": "https://crm-kv.vault.azure.net/secrets/db-password",
    "OP_SECRET_REF": "op://Prod/crm-db/password",
    "SECRETS_REFERENCE": "crm/db-password",
    "AWS_EXAMPLE_SECRET_ID": "prod/AppBeta/MySql",
    "VERSIONED_SECRET_ID": "kv/prod/db-2",
    "NUMBERED_SECRET_ID": "app1/prod/db-v2",
    # the parts of a reference a person names, read as a path's words are
    "STAGED_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:crm-db-AbCdEf::AWSPREVIOUS:",
    "VERSIONED_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:crm-db-AbCdEf:password::"
                            "6a1f0c2e-93b4-4b7a-8f0e-2d1c9e8b7a65",
    "NAMED_SECRET_REF": "projects/acme/secrets/OPENAI_API_KEY/versions/3",
    "SECTION_SECRET_REF": "op://Prod/crm-db/admin/api-key",
    "OP_ID_SECRET_REF": "op://ktt5umd4nq3ylqomnyvtkyv6xu/crm-db/nerlnqbfzdm5q5g6ydsgdqgdw4",  # 1Password's ids
    # reviewed: Parameter Store's names begin with a slash, and ECS's valueFrom takes a parameter's ARN
    "PARAMETER_SECRET_ID": "/prod/crm/db-password",
    "SSM_SECRET_ARN": "arn:aws:ssm:eu-west-1:123456789012:parameter/prod/crm/db-password",
    "GOV_SSM_SECRET_ARN": "arn:aws-us-gov:ssm:us-gov-west-1:123456789012:parameter/prod/db",
    "CN_SECRET_ARN": "arn:aws-cn:secretsmanager:cn-northwest-1:123456789012:secret:prod/crm-db-AbCdEf",
    "EU_SSM_SECRET_ARN": "arn:aws:ssm:ap-southeast-2:123456789012:parameter/prod/db",
    "EUSC_SECRET_ARN": "arn:aws-eusc:secretsmanager:eusc-de-east-1:123456789012:secret:prod/crm-db-AbCdEf",
    "ISO_SSM_SECRET_ARN": "arn:aws-iso-b:ssm:us-isob-east-1:123456789012:parameter/prod/db",
}


def test_a_secret_stores_name_for_a_secret_is_stored_in_fields_variables_flags_and_command_lines() -> None:
    # AWS's `--secret-id`, a Kubernetes secretRef, Google's resource name: where the secret is, not the secret.
    component = _component(
        env={**STORED_SECRETS_NAMED, "STARTUP": "LOG=1 app --secret-id prod/db"},
        fields={name.lower(): value for name, value in STORED_SECRETS_NAMED.items()},
        args=["-c", "aws secretsmanager get-secret-value --secret-id prod/crm-db --query SecretString "
                    "--secret-arn=arn:aws:secretsmanager:us-east-1:123456789012:secret:x-AbCdEf"],
    )
    assert apply_references(component, {}) == component
    source = "def lookup(query: str) -> str:\n    return fetch(secret_id='prod/db', secret_ref='crm/db-password')\n"
    assert apply_references(_component(source=source), {}) == _component(source=source)


_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/app-AbCdEf"
_KEY_VAULT = "https://crm-kv.vault.azure.net/secrets/"


@pytest.mark.parametrize("value", [
    # Azure Key Vault secrets as .NET names them ("--" for a configuration section) and as people do
    *(_KEY_VAULT + name for name in (
        "ConnectionStrings--DefaultConnection", "AzureOpenAI--ApiKey", "AzureOpenAIKey", "OpenAIApiKey", "CosmosDBKey",
        "SQLPassword", "JWTSigningKey", "x509-cert", "k8s-token", "gpt-4o-key", "db-password-20240115")),
    # Google Secret Manager secrets
    "projects/acme/secrets/gpt-4o-key/versions/latest", "projects/acme/secrets/db_password_20240115/versions/3",
    *(f"projects/acme/secrets/{name}/versions/latest" for name in (
        "api-key-v10", "m2m-client-secret", "e2e-token", "OPENAI__API_KEY", "OAuthClientSecret")),
    # JSON keys and a custom stage after an AWS ARN, and a version's id that is any ClientRequestToken
    f"{_ARN}:clientID::", f"{_ARN}:OpenAIApiKey::", f"{_ARN}:AWSSecretAccessKey::", f"{_ARN}:m2m_secret::",
    f"{_ARN}::2024-rotation:", f"{_ARN}:password::release-2024-01-15-rotation-0001",
    f"{_ARN}::AWSCURRENT:EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE",
    # 1Password fields
    "op://Private/OpenAI/OpenAIKey", "op://Private/OAuth/clientID", "op://Private/GitHub/2fa", "op://Private/DB/x",
    # reviewed: names numbered as people number them, and a version's id in the shape AWS's tools give it
    "https://crm-kv.vault.azure.net/secrets/sqlserver1-password", "https://crm-kv.vault.azure.net/secrets/openaikey1",
    "projects/acme/secrets/postgres2-password/versions/latest", "op://Private/DB/password2", "op://Private/DB/postgres01",
    f"{_ARN}:replica1::", f"{_ARN}:password::EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE",
])
def test_a_secret_stores_name_people_give_a_secret_is_stored_under_a_secret_ids_name_and_flag(value: str) -> None:
    """Reviewed: the names these stores allow were refused as "a plaintext secret" for not being written as a
    path's words are; only a part that looks like a secret's value is refused."""
    component = _component(env={"DB_SECRET_REF": value}, args=["--secret-id", value], fields={"secret_id": value})
    assert apply_references(component, {}) == component


@pytest.mark.parametrize("value", [
    "6a1f0c2e-93b4-4b7a-8f0e-2d1c9e8b7a65",  # HashiCorp Vault's AppRole secret_id: a credential
    "hunter2SECRET9f8e", "hUnTeRsEcReTvAlUe", "sk-proj-hunter2SECRET0123456789", "prod/db hunter2SECRET",
    # passwords that read as a word or a name: a single word is never taken for a secret's name
    "P@ssw0rd", "letmein", "changeme", "Spring-2024", "s3cr3t", "correct-horse-battery-staple", "kifXo2-hoqbys-Cavhuq",
    # a reference's shape with a secret beside it
    "op://a/b/c hunter2SECRET9f8e", "op://v/i/f --password=hunter2Xk", "P@ss/w0rd", "x/hunter2SECRET9f8e",
    # passwords and random keys with a slash: a path's words are named as people name a secret
    "hunter/2", "Spring/2024", "sDX5/J.iNCBk", "P4ss/w0rd", "Pa55/word", "s3cr3t/x", "abc123/xyz789",
    "HC8AjO/SMyWVeCSo", "ecXHJ/UQMRxi", "wBP/GYefTgKbhJmg",
    # a secret where a reference's part a person names goes: a 1Password field, a JSON key, a stage, a version's id,
    # a Google or an Azure secret's name
    "op://vault/item/hunter2SECRET9f8e", "op://Prod/crm-db/admin/hunter2q7Rz9LmX", "op://Prod/crm-db/P4ss",
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:crm-db-AbCdEf:hunter2SECRET9f8e::",
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:crm-db-AbCdEf::hunter2SECRET9f8e:",
    "arn:aws:secretsmanager:eu-west-1:123456789012:secret:crm-db-AbCdEf:password::hunter2SECRET9f8e",
    "projects/acme/secrets/hunter2SECRET9f8e/versions/latest", "https://crm-kv.vault.azure.net/secrets/hunter2SECRET9f8e",
    # ... a random key or a known key's shape there, whatever its characters
    "op://Private/OpenAI/q7Rz9LmX2vPkAbCdEfGh", f"{_ARN}:ZmF1eGtleXRoYXRpc3JhbmRvbTEy::",
    f"{_ARN}:AKIAIOSFODNN7EXAMPLE::", "https://crm-kv.vault.azure.net/secrets/s3cr3t-Pa55w0rd",
    # ... and where a version's id goes: a ClientRequestToken's length, a random key's look (openssl rand -hex 32)
    f"{_ARN}:password::q7Rz9LmX2vPkAbCdEfGh3JkL5MnP8QrS", f"{_ARN}:jwt::{'9f8e7d6c5b4a' * 5}3f2a",
    # ... and a password in its commonest shape, or a random key, a number after it: not a server's name
    "op://Private/DB/Password123", f"{_ARN}:Summer2024::", "https://crm-kv.vault.azure.net/secrets/Welcome1",
    "projects/acme/secrets/xKmQpLvNrTbWzYhG12/versions/latest", f"{_ARN}:{'xkmqplvnrtbwzyhgcdfjs'}1234::",
    # ... or in a Parameter Store parameter's name or path, with a slash before it or an ARN's prefix
    "/hunter2SECRET9f8e", "/prod/hunter2SECRET9f8e", "/letmein", "//prod/db", "/prod/db/", "/Spring/2024",
    *(f"arn:aws:ssm:eu-west-1:123456789012:parameter/{name}" for name in (
        "hunter2SECRET9f8e", "prod/P4ss", "prod/sk-proj-hunter2SECRET0123456789", "", "/prod", "prod/AKIAIOSFODNN7EXAMPLE",
        # reviewed: one word, as a plain path's, may be a password
        "trustno1", "Summer-2024", "correct-horse-battery-staple")),
    # reviewed: a secret where an ARN's partition, region or account goes, which were not judged
    f"arn:aws:ssm:{'9f8e7d6c5b4a' * 5}3f2a:123456789012:parameter/prod/db",
    f"arn:aws:secretsmanager:{'9f8e7d6c5b4a' * 5}3f2a:123456789012:secret:prod/db-AbCdEf",
    "arn:aws-correct-horse-battery-staple:ssm:eu-west-1:123456789012:parameter/prod/db",
    "arn:aws:ssm:one-two-three-4:123456789012:parameter/prod/db",
    "arn:aws:ssm:eu-west-1:\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19\uff10\uff11\uff12:parameter/prod/db",
])
def test_a_secret_given_under_a_secret_id_is_refused(value: str) -> None:
    for env, args in (({"VAULT_SECRET_ID": value}, None), (None, ["-c", f"app --secret-id '{value}' serve"])):
        refused = _refused(_component(env=env, args=args))
        assert value not in f"{refused.message} {refused.hint}"
    refused = _refused(_component(fields={"secret_id": value}))
    assert "give its path or reference (prod/db, an ARN" in (refused.hint or "")


@pytest.mark.parametrize("args", [
    ["secretsmanager", "get-secret-value", "--secret-id", "crm-db-password"],
    ["secretsmanager", "get-secret-value", "--secret-id=crm-db-password"],
    ["run", "-e", "SECRET_ID=crm-db-password", "img"],  # a variable an argument sets: judged by its name
    ["run", "--env=SECRET_ID=crm-db-password", "img"],
])
def test_a_secret_id_flag_given_a_single_word_is_refused_saying_how_to_give_the_secret_s_path(
    args: list[str]
) -> None:
    """A field's and a variable's refusal said so; an argument's, named by its index, did not."""
    refused = _refused(stdio_component(None, args, None, None, command="aws"))
    assert "give its path or reference (prod/db, an ARN" in (refused.hint or "")
    assert "crm-db-password" not in f"{refused.message} {refused.hint}"
    other = _refused(stdio_component(None, ["--password", "crm-db-password"], None, None, command="psql"))
    assert "give its path or reference" not in (other.hint or "")  # a password's flag names no secret store


@pytest.mark.parametrize(("env", "args"), [
    (None, ["-c", "aws secretsmanager get-secret-value --secret-id crm-db-password --query SecretString"]),
    (None, ["-c", "cd /srv && SECRET_ID=crm-db-password app serve"]),
    (None, ["-c", "bash -lc 'app --secret-arn=crm-db-password'"]),
    ({"STARTUP": "LOG=1 app --secret-id crm-db-password"}, None),
])
def test_a_secret_id_given_a_single_word_in_a_shell_script_is_refused_saying_how_to_give_the_secret_s_path(
    env: dict[str, str] | None, args: list[str] | None
) -> None:
    """A flag's refusal said so; the same flag inside a script a shell runs, refused as the whole script, did not."""
    refused = _refused(_component(env=env, args=args))
    assert "give its path or reference (prod/db, an ARN" in (refused.hint or "")
    assert "crm-db-password" not in f"{refused.message} {refused.hint}"


def test_a_script_refused_for_a_password_flag_beside_a_stored_secret_id_says_nothing_of_secret_ids() -> None:
    refused = _refused(_component(args=["-c", "app --secret-id prod/crm-db --password hunter2Xk9"]))
    assert "give its path or reference" not in (refused.hint or "")


@pytest.mark.parametrize("value", [
    "op://vault/item/hunter2SECRET9f8e", "op://Prod/crm-db/P4ss", f"{_ARN}:hunter2SECRET9f8e::",
    "projects/acme/secrets/hunter2SECRET9f8e/versions/latest", _KEY_VAULT + "hunter2SECRET9f8e",
    "op://a/b/c hunter2SECRET9f8e", "prod/openai",  # a path alone is a reference only under a secret's id
])
def test_a_secret_in_a_stores_reference_under_a_credentials_name_is_refused_unechoed(value: str) -> None:
    for env, fields in (({"OPENAI_API_KEY": value}, None), (None, {"db_password": value})):
        refused = _refused(_component(env=env, fields=fields))
        assert value not in f"{refused.message} {refused.hint}"


@pytest.mark.parametrize("version", ["6a1f0c2e93b44b7a8f0e2d1c9e8b7a65", "6A1F0C2E93B44B7A8F0E2D1C9E8B7A65"])
def test_a_version_id_after_an_arn_written_as_a_uuids_hex_digits_is_stored_under_a_secrets_id(version: str) -> None:
    """Reviewed: a ClientRequestToken made with uuid4().hex (the UUID without its dashes) was refused as a random
    word, where the dashed UUID was taken."""
    value = f"{_ARN}:password::{version}"
    component = _component(env={"DB_SECRET_ARN": value}, args=["--secret-id", value], fields={"secret_arn": value})
    assert apply_references(component, {}) == component


@pytest.mark.parametrize("version", ["6a1f0c2e93b44b7a8f0e2d1c9e8b7a65", "6A1F0C2E93B44B7A8F0E2D1C9E8B7A65"])
def test_32_hex_digits_after_an_arn_under_a_credentials_name_are_refused_as_an_azure_key(version: str) -> None:
    """Reviewed: the hex digits alone were taken as a version's id under any name, and they are an Azure OpenAI or
    Cognitive Services key's very shape: under a credential's name they may be that key."""
    value = f"{_ARN}:password::{version}"
    for env, fields in (({"OPENAI_API_KEY": value}, None), ({"AZURE_OPENAI_API_KEY": value}, None),
                        (None, {"api_key": value})):
        refused = _refused(_component(env=env, fields=fields))
        assert version not in f"{refused.message} {refused.hint}"


@pytest.mark.parametrize("version", [
    "6a1f0c2e93b44b7a8f0e2d1c9e8b7a6", "6a1f0c2e93b44b7a8f0e2d1c9e8b7a65f", "6a1F0c2e93b44b7a8f0e2d1c9e8b7a65",
    "6a1f0c2e93b44b7a8f0e2d1c9e8b7a6g", "q7Rz9LmX2vPkAbCdEfGh3JkL5MnP8QrS",
])
def test_a_random_word_where_a_version_id_goes_is_still_refused_though_it_is_nearly_a_uuids_hex(version: str) -> None:
    for env in ({"DB_SECRET_ARN": f"{_ARN}:password::{version}"}, {"OPENAI_API_KEY": f"{_ARN}:password::{version}"}):
        refused = _refused(_component(env=env))
        assert version not in f"{refused.message} {refused.hint}"
