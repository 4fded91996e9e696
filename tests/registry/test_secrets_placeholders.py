"""Values that stand where a credential would without being one: the dummy key a local model server (vLLM,
llama.cpp, Ollama, LM Studio, text-generation-inference) asks for because the OpenAI client insists on a key
is stored under a key's or a token's name, in a model client's config and in a tool's source; a real-looking
key that merely contains such a word, and any dummy under a password's name, are still refused."""

from __future__ import annotations

from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.openai import OpenAIChatCompletionClient

from config_registry import DefinitionInvalid, Registry
from config_registry.placeholders import DUMMY_KEYS
from config_registry.secrets import apply_references
from teamstore.context import BoundedChatCompletionContext
from tests.registry.conftest import dump, left_unchanged, stdio_component, triage_manifest

SERVER = "workbench.0.config.server_params"
SOURCE = "tools.0.config.source_code"
KEY_PATH = "model_client.config.api_key"
REAL_LOOKING = ("sk-ollama-8f3a9c2b7d1e4f5a6b7c", "ollama-8f3a9c2b7d1e", "EMPTY-hunter2", "lm-studio-Xk9pq2Lm")


def _local_agent(key: str) -> dict[str, Any]:
    """An agent whose client talks to a local OpenAI-compatible server, with ``key`` where dump_component()
    writes the mask (as someone who registers such a team writes it)."""
    client = OpenAIChatCompletionClient(model="gpt-4o-mini", base_url="http://localhost:8000/v1", api_key=key)
    agent = dump(AssistantAgent("researcher", model_client=client, model_context=BoundedChatCompletionContext(20)))
    agent["config"]["model_client"]["config"]["api_key"] = key
    return agent


def _component(env: dict[str, str] | None = None, source: str | None = None,
               fields: dict[str, Any] | None = None, args: list[str] | None = None) -> dict[str, Any]:
    return stdio_component(env, args, source, fields)


def _refused(component: dict[str, Any]) -> DefinitionInvalid:
    with pytest.raises(DefinitionInvalid) as caught:
        apply_references(component, {})
    assert "never stores secrets" in caught.value.message
    return caught.value


@pytest.mark.parametrize("key", ["EMPTY", "sk-no-key-required", "ollama", "lm-studio", "-"])
def test_a_local_servers_dummy_key_in_a_model_clients_config_is_stored_and_built_with(
    registry: Registry, key: str
) -> None:
    registry.add("researcher", _local_agent(key), triage_manifest(name="researcher", persist=[]), "local model")
    stored = registry.resolve("researcher").component
    assert stored["config"]["model_client"]["config"]["api_key"] == key
    built = registry.build("researcher", env={})
    assert built.participants["researcher"]._model_client._client.api_key == key  # type: ignore[attr-defined]


def test_the_mask_a_local_servers_key_is_dumped_as_is_refused_saying_to_write_the_dummy_key_instead() -> None:
    agent = _local_agent("EMPTY")
    agent["config"]["model_client"]["config"]["api_key"] = "**********"
    with pytest.raises(DefinitionInvalid) as caught:
        apply_references(agent, {})
    assert caught.value.field == f"config.{KEY_PATH}"
    assert '"EMPTY"' in (caught.value.hint or "") and "in place of the mask" in (caught.value.hint or "")


@pytest.mark.parametrize("key", sorted(DUMMY_KEYS | {"Empty", "OLLAMA", "Not-Needed", " none "}))
def test_every_dummy_key_is_stored_whatever_its_case_under_a_keys_or_a_tokens_name(key: str) -> None:
    fields = {"model_client": {"config": {"api_key": key}}, "headers": {"X-Api-Key": key}}
    env = {"OPENAI_API_KEY": key, "ANTHROPIC_AUTH_TOKEN": key}
    component = _component(env=env, fields=fields)
    assert apply_references(component, {}) == component


@pytest.mark.parametrize(
    "source",
    [
        'client = OpenAI(base_url="http://localhost:8080/v1", api_key="sk-no-key-required")\n',
        'os.environ["OPENAI_API_KEY"] = "EMPTY"\n',
        'OPENAI_API_KEY = "lm-studio"\n',
        'def ask(prompt: str, api_key: str = "not-needed") -> str:\n    return prompt\n',
        'settings = {"api_key": "ollama", "ANTHROPIC_AUTH_TOKEN": "ollama"}\n',
    ],
)
def test_a_local_servers_dummy_key_in_tool_source_is_stored(source: str) -> None:
    component = _component(source=source)
    assert apply_references(component, {}) == component


@pytest.mark.parametrize("key", REAL_LOOKING)
def test_a_real_looking_key_that_contains_a_dummys_word_is_still_refused(key: str) -> None:
    refused = _refused(_component(fields={"model_client": {"config": {"api_key": key}}}))
    assert refused.field == f"config.{KEY_PATH}"
    assert _refused(_component(env={"OPENAI_API_KEY": key})).field == f"config.{SERVER}.env.OPENAI_API_KEY"
    assert _refused(_component(source=f"OPENAI_API_KEY = {key!r}\n")).field == f"config.{SOURCE}"
    assert _refused(_component(source=f"client = OpenAI(api_key={key!r})\n")).field == f"config.{SOURCE}"


def test_a_real_looking_key_in_a_model_clients_config_is_refused_at_registration(registry: Registry) -> None:
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("researcher", _local_agent(REAL_LOOKING[0]), triage_manifest(name="researcher", persist=[]),
                     "local model")
    assert caught.value.field == f"config.{KEY_PATH}"


@pytest.mark.parametrize(
    ("component", "field"),
    [
        (_component(fields={"db_password": "not-needed"}), "config.db_password"),
        (_component(fields={"client_secret": "placeholder"}), "config.client_secret"),
        (_component(env={"PGPASSWORD": "dummy"}), f"config.{SERVER}.env.PGPASSWORD"),
        (_component(source='SMTP_PASSWORD = "lm-studio"\n'), f"config.{SOURCE}"),
        # an application's own secret key: Django's, a JWT's signing key, an encryption key, a session token
        (_component(env={"SECRET_KEY": "x"}), f"config.{SERVER}.env.SECRET_KEY"),
        (_component(source='SECRET_KEY = "dummy"\n'), f"config.{SOURCE}"),
        (_component(fields={"jwt_signing_key": "none"}), "config.jwt_signing_key"),
        (_component(env={"ENCRYPTION_KEY": "placeholder"}), f"config.{SERVER}.env.ENCRYPTION_KEY"),
        (_component(env={"AWS_SESSION_TOKEN": "x"}), f"config.{SERVER}.env.AWS_SESSION_TOKEN"),
        (_component(args=["--secret-key", "x"]), f"config.{SERVER}.args.1"),
        # ... written as one word
        (_component(env={"SECRETKEY": "x"}), f"config.{SERVER}.env.SECRETKEY"),
        (_component(source='JWT_SIGNINGKEY = "dummy"\n'), f"config.{SOURCE}"),
        (_component(env={"AWS_SESSIONTOKEN": "x"}), f"config.{SERVER}.env.AWS_SESSIONTOKEN"),
        # ... whatever word of its name says so, or a word its last one starts with
        (_component(env={"JWT_REFRESH_TOKEN": "x"}), f"config.{SERVER}.env.JWT_REFRESH_TOKEN"),
        (_component(env={"HMAC_SHARED_KEY": "dummy"}), f"config.{SERVER}.env.HMAC_SHARED_KEY"),
        (_component(env={"PRIVATE_SSH_KEY": "x"}), f"config.{SERVER}.env.PRIVATE_SSH_KEY"),
        (_component(env={"DJANGOSECRETKEY": "x"}), f"config.{SERVER}.env.DJANGOSECRETKEY"),
        (_component(env={"DJANGOSECRET_KEY": "x"}), f"config.{SERVER}.env.DJANGOSECRET_KEY"),
        (_component(args=["--jwtsigning-key", "x"]), f"config.{SERVER}.args.1"),
        # ... an access or API key too, after what an application signs its tokens or keeps its sessions with
        (_component(env={"JWT_ACCESS_KEY": "x"}), f"config.{SERVER}.env.JWT_ACCESS_KEY"),
        (_component(env={"SESSION_API_KEY": "dummy"}), f"config.{SERVER}.env.SESSION_API_KEY"),
        (_component(env={"COOKIES_API_KEY": "x"}), f"config.{SERVER}.env.COOKIES_API_KEY"),
        (_component(fields={"jwtAccessKey": "none"}), "config.jwtAccessKey"),
        # ... whatever words come between (a model service's name aside), and after an auth key's word too
        (_component(env={"JWT_API_ACCESS_KEY": "x"}), f"config.{SERVER}.env.JWT_API_ACCESS_KEY"),
        (_component(env={"JWT_PROD_API_KEY": "dummy"}), f"config.{SERVER}.env.JWT_PROD_API_KEY"),
        (_component(env={"JWT_AUTH_KEY": "x"}), f"config.{SERVER}.env.JWT_AUTH_KEY"),
        (_component(source='JWTACCESS_KEY = "none"\n'), f"config.{SOURCE}"),
        # ... and a session's token, whatever the service word before it
        (_component(env={"SESSION_AUTH_TOKEN": "x"}), f"config.{SERVER}.env.SESSION_AUTH_TOKEN"),
        (_component(args=["--session-access-token", "x"]), f"config.{SERVER}.args.1"),
        # ... and a secret key under any name but a model service's
        (_component(env={"DJANGO_SECRET_KEY": "x"}), f"config.{SERVER}.env.DJANGO_SECRET_KEY"),
        (_component(env={"STRIPE_SECRET_KEY": "x"}), f"config.{SERVER}.env.STRIPE_SECRET_KEY"),
        # ... and what an application encrypts or signs with, written as its name
        (_component(env={"FERNET_KEY": "x"}), f"config.{SERVER}.env.FERNET_KEY"),
        (_component(fields={"aes_key": "dummy"}), "config.aes_key"),
        (_component(env={"HMAC_KEY": "EMPTY"}), f"config.{SERVER}.env.HMAC_KEY"),
        (_component(env={"SIGNING_KEY": "none"}), f"config.{SERVER}.env.SIGNING_KEY"),
        (_component(env={"SECRET_KEY_BASE": "x"}), f"config.{SERVER}.env.SECRET_KEY_BASE"),
        (_component(env={"APP_KEY": "dummy"}), f"config.{SERVER}.env.APP_KEY"),
    ],
)
def test_a_dummy_under_a_passwords_or_a_secrets_name_is_still_refused(component: dict[str, Any], field: str) -> None:
    assert _refused(component).field == field


@pytest.mark.parametrize("name", ["APP_OPENAI_API_KEY", "PRIVATE_LLM_API_KEY", "VLLM_APP_API_KEY",
                                  "AWS_SECRET_ACCESS_KEY", "APP_OPENAI_KEY", "APP_HF_TOKEN", "FLASK_APP_OPENAI_KEY",
                                  "SESSION_LLM_KEY", "PRIVATE_GPT_KEY", "OPENAI_SECRET_KEY", "AZURE_OPENAI_SECRET_KEY",
                                  "JWT_ACCESS_TOKEN", "azureOpenAISecretKey", "OPEN_AI_SECRET_KEY",
                                  "HuggingFaceSecretKey", "X_AI_SECRET_KEY",
                                  # a signer's word only as a whole word, and a model service's name after it
                                  "DESIGNING_API_KEY", "DESIGNINGAPIKEY", "SESSION_OPENAI_API_KEY",
                                  "HUGGING_FACE_HUB_TOKEN", "ANTHROPIC_AUTH_TOKEN", "Ocp-Apim-Subscription-Key",
                                  # a local model server's name, split into words or not
                                  "LM_STUDIO_KEY", "LLAMA_CPP_TOKEN", "LOCALAI_KEY", "TGI_TOKEN", "SGLANG_KEY",
                                  "EMBEDDINGS_KEY", "INFERENCE_TOKEN",
                                  # a model service's name anywhere before the key or token
                                  "AZURE_OPENAI_AD_TOKEN", "VLLM_SERVER_KEY", "OPENAI_PROXY_KEY", "LLM_GATEWAY_KEY",
                                  "LLM_SERVER_TOKEN", "OLLAMA_PROXY_TOKEN",
                                  # ... and any key or token but an application's own, as configs were stored
                                  "GPT4ALL_KEY", "JAN_KEY", "KOBOLD_KEY", "TEI_TOKEN", "LOCAL_KEY", "LOCAL_TOKEN",
                                  "SERVER_KEY", "PROXY_KEY", "CLIENT_KEY", "BEARER_TOKEN", "GITHUB_TOKEN",
                                  "WEBHOOK_TOKEN"])
def test_a_dummy_under_a_model_servers_key_is_stored_whatever_the_words_before_what_the_key_is(name: str) -> None:
    # the word before "key" says what it is (a model's, an API's, an access key); a prefix naming the app does not
    component = _component(env={name: "EMPTY"})
    assert apply_references(component, {}) == component


def test_a_dummy_azure_ad_token_in_autogens_azure_client_config_is_stored() -> None:
    """Reviewed: a dummy was taken only under a name the words before the key or token said was a model server's,
    which refused AutoGen's own Azure client config written for a local server, and names stored before."""
    agent = _local_agent("EMPTY")
    # As AzureOpenAIChatCompletionClient dumps it (its dump needs the azure extra, which these tests go without).
    agent["config"]["model_client"] = {
        "provider": "autogen_ext.models.openai.AzureOpenAIChatCompletionClient", "component_type": "model",
        "config": {"model": "gpt-4o", "azure_deployment": "gpt-4o", "api_version": "2024-06-01",
                   "azure_endpoint": "http://localhost:8000", "azure_ad_token": "dummy"},
    }
    assert apply_references(agent, {}) == agent


def test_a_dummy_under_a_header_or_a_flag_for_a_token_is_stored() -> None:
    component = _component(fields={"headers": {"X-Token": "EMPTY"}}, args=["--github-token", "-"],
                           env={"GITHUB_TOKEN": "x", "AZURE_OPENAI_AD_TOKEN": "EMPTY"},
                           source='WEBHOOK_TOKEN = "placeholder"\n')
    assert apply_references(component, {}) == component


@pytest.mark.parametrize("name", ["JWT_TOKEN", "ENCRYPTION_API_KEY", "ENCRYPTIONAPIKEY", "HMAC_API_KEY",
                                  "SIGNING_SERVICE_API_KEY"])
def test_a_dummy_under_an_api_key_or_a_jwts_token_is_stored(name: str) -> None:
    """Reviewed: a token written as a JWT and an encryption service's API key were read as an application's own
    signing or encryption key, so a local server's dummy there was refused as a weak real key."""
    component = _component(env={name: "EMPTY"}, fields={name.lower(): "EMPTY"}, source=f'{name} = "EMPTY"\n')
    assert apply_references(component, {}) == component


@pytest.mark.parametrize("name", ["CIPHER_KEY", "SALT_KEY", "SIGNATURE_KEY", "PEPPER_KEY", "CRYPTO_KEY",
                                  "ENCRYPT_KEY", "DECRYPTION_KEY", "SIGNING_SECRET", "JWT_SECRET", "HMAC_KEY",
                                  "ENCRYPTION_KEY", "SECRET_KEY", "ENCRYPTION_PROD_KEY"])
def test_a_dummy_under_an_applications_own_cipher_salt_or_signing_key_is_refused(name: str) -> None:
    """Reviewed: a cipher's, a salt's or a signature's key and a password hash's pepper key took a dummy, which is
    a weak real key there, as it is under SECRET_KEY."""
    for dummy in ("EMPTY", "x", "placeholder"):
        assert _refused(_component(env={name: dummy})).field == f"config.{SERVER}.env.{name}"


@pytest.mark.parametrize("name", ["ENCRYPTIONKEY", "HMACKEY", "FERNETKEY", "AESKEY", "CIPHERKEY", "SALTKEY",
                                  "PEPPERKEY", "CRYPTOKEY", "DECRYPTIONKEY", "SIGNATUREKEY", "MASTERKEY", "JWTKEY",
                                  "SHAREDKEY", "CSRFKEY", "COOKIEKEY", "HMACKEYS",
                                  # an acronym before a lower-case key, and a number glued on
                                  "HMACkey", "AESkey", "ENCRYPTIONKEY2", "AESKEY256", "HMAC_KEY2"])
def test_an_applications_own_key_written_as_one_word_is_a_credentials_name_real_or_dummy(name: str) -> None:
    """Reviewed: a cipher's, a signer's or an application's own key written as one word (``ENCRYPTIONKEY``) was no
    credential's name at all, so a real key under it was stored in the registry, in an environment, a field, a
    flag and a tool's source alike; written apart (``ENCRYPTION_KEY``) it was refused."""
    for value in ("q7Rz9LmX2vPkAbC", "correct horse battery staple", "EMPTY"):
        assert _refused(_component(env={name: value})).field == f"config.{SERVER}.env.{name}"
        assert _refused(_component(fields={name: value})).field == f"config.{name}"
        assert _refused(_component(args=[f"--{name}", value])).field == f"config.{SERVER}.args.1"
        if name.isupper() or value == "q7Rz9LmX2vPkAbC":  # in code a mixed-case name's value must look like a key
            assert _refused(_component(source=f'{name} = "{value}"\n')).field == f"config.{SOURCE}"


@pytest.mark.parametrize("name", ["hmac_key", "fernet_key", "aes_key", "decryption_key", "hmacKey", "encryptionkey",
                                  "HMACkey", "APIkey", "api_key2"])
def test_a_cipher_or_signing_key_given_a_literal_in_a_tools_source_is_refused(name: str) -> None:
    """Reviewed: in a tool's source only a key after an API's, an access or a secret's word held a credential, so
    ``hmac_key = "..."`` was stored where ``HMAC_KEY = "..."`` was refused."""
    assert _refused(_component(source=f'{name} = "q7Rz9LmX2vPkAbC"\n')).field == f"config.{SOURCE}"


@pytest.mark.parametrize("name", ["RESULT_BUCKET_ACCESSKEY", "message_signingkey", "OBJECT_ACCESSKEY", "FIELD_PRIVATEKEY",
                                  "public_hmackey", "DB_PASSWORD_CMD2"])
def test_a_keys_compound_after_an_identifiers_word_is_still_a_credentials_name(name: str) -> None:
    """Reviewed: an identifier's word anywhere before a key's compound made it no credential's name, so a real key
    under ``RESULT_BUCKET_ACCESSKEY`` was stored, as a glued number made ``DB_PASSWORD_CMD2`` a command's name."""
    assert _refused(_component(env={name: "hunter2SECRET9f8eq7Rz"})).field == f"config.{SERVER}.env.{name}"


def test_a_word_that_merely_ends_in_key_or_a_key_named_by_what_it_is_kept_under_is_stored() -> None:
    """Reviewed: as one word an SSH key's and an app's key name public keys, paths, key ids (Proxmox's ``sshkeys``)
    and a public app id (push and speech SDKs' ``appkey``); in code a JWT's, a salt's or a signature's key is a JSON
    key's or a header's name as often as a key."""
    public = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq7Rz9LmX2vPkAbCdEf me@host"
    component = _component(
        env={"MONKEY": "q7Rz9LmX2vPkAbC", "WHISKEY": "islay", "TURKEY": "roast", "SSHKEY": "/home/agent/.ssh/id_ed25519",
             "UMENG_APPKEY": "5f9a8b7c6d5e4f3a2b1c0d9e", "HTMLParser": "lxml-4.9"},
        fields={"hotkey": "ctrl+k", "salt": "coarse", "jockey": "q7Rz9LmX2vPkAbC", "sshkeys": public,
                "appkey": "demo-app-2024",
                # reviewed: a number glued to a word that is no key's is part of it
                "token0": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "OAuth2": "authorization_code",
                "Auth0": "https://acme.us.auth0.com", "key1": "ctrl+shift", "isToken2022": "yes"},
        source='memory_key = "q7Rz9LmX2vPkAbC"\ncache_key = "q7Rz9LmX2vPkAbC"\nssh_key = "~/.ssh/id_ed25519"\n'
               'jwt_key = "access_token"\nsalt_key = "password_salt"\nsignature_key = "X-Hub-Signature-256"\n',
    )
    assert apply_references(component, {}) == component


def test_a_pepper_as_a_bare_word_is_an_ordinary_field_and_stored() -> None:
    """Reviewed: "pepper" was taken for a credential's last word, so a recipe's or a menu's field (``pepper``,
    ``salt_and_pepper``, ``PEPPER``) was refused as a secret; only a key after it (``PEPPER_KEY``) is one."""
    component = _component(env={"PEPPER": "cayenne"}, fields={"pepper": "black", "salt_and_pepper": "coarse"})
    assert apply_references(component, {}) == component


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "WEBHOOK_TOKEN", "LOCAL_KEY", "AZURE_OPENAI_AD_TOKEN"])
def test_a_real_looking_value_under_a_name_that_takes_a_dummy_is_still_refused(name: str) -> None:
    assert _refused(_component(env={name: "q7Rz9LmX2vPkAbC"})).field == f"config.{SERVER}.env.{name}"


@pytest.mark.parametrize(
    "line", ["OPENAI_API_KEY=EMPTY tool --api-key q7Rz9LmX2vPk", "DB_PASSWORD_FILE=/run/secrets/pg psql --password hunter2Xk"]
)
def test_a_secret_flag_in_a_command_line_that_sets_a_dummy_key_or_a_path_first_is_refused_in_source_and_env(
    line: str,
) -> None:
    source = f"import subprocess\nsubprocess.run({line!r}, shell=True)\n"
    assert _refused(_component(source=source)).field == f"config.{SOURCE}"
    assert _refused(_component(env={"STARTUP": line})).field == f"config.{SERVER}.env.STARTUP"


@pytest.mark.parametrize(
    "line",
    [
        "export OPENAI_API_KEY=EMPTY; tool --api-key q7Rz9LmX2vPkAbC",
        "cd /srv && OPENAI_API_KEY=EMPTY tool --api-key q7Rz9LmX2vPkAbC",
        "env OPENAI_API_KEY=EMPTY tool --api-key q7Rz9LmX2vPkAbC",
        "sudo OPENAI_API_KEY=EMPTY tool --api-key q7Rz9LmX2vPkAbC",
        "set -e; OPENAI_API_KEY=EMPTY tool --api-key q7Rz9LmX2vPkAbC",
        "$env:OPENAI_API_KEY='EMPTY'; tool --api-key q7Rz9LmX2vPkAbC",
        "cd /srv && OPENAI_API_KEY=EMPTY curl -H 'Authorization: Bearer q7Rz9LmX2vPkAbC' x",
        "cd /srv && DB_PASSWORD_FILE=/run/pw psql --password hunter2Xk",
        "(OPENAI_API_KEY=EMPTY tool --api-key q7Rz9LmX2vPkAbC)",
    ],
)
def test_a_secret_flag_after_a_dummy_key_set_anywhere_in_a_command_line_is_refused_in_source_env_and_args(
    line: str,
) -> None:
    source = f"import subprocess\nsubprocess.run({line!r}, shell=True)\n"
    assert _refused(_component(source=source)).field == f"config.{SOURCE}"
    assert _refused(_component(env={"STARTUP": line})).field == f"config.{SERVER}.env.STARTUP"
    assert _refused(_component(args=["-c", line])).field == f"config.{SERVER}.args.1"


def test_a_command_line_that_sets_a_dummy_key_first_is_stored_in_source_and_env() -> None:
    line = "OPENAI_API_KEY=EMPTY python client.py --model qwen2.5 --base-url http://localhost:8000/v1"
    component = _component(source=f"import subprocess\nsubprocess.run({line!r}, shell=True)\n", env={"STARTUP": line})
    assert apply_references(component, {}) == component


@pytest.mark.parametrize("key", ["EMPTY", "ollama", "sk-no-key-required"])
def test_a_dummy_key_in_a_header_line_is_stored_as_in_a_headers_mapping(key: str) -> None:
    line = f"X-Api-Key: {key}"
    component = _component(args=["--header", line], env={"API_KEY_HEADER": line}, fields={"headers": {"X-Api-Key": key}})
    assert apply_references(component, {}) == component


@pytest.mark.parametrize("line", ["X-Api-Key: q7Rz9LmX2vPk", "X-Db-Password: EMPTY"])
def test_a_key_or_a_dummy_under_a_passwords_name_in_a_header_line_is_still_refused(line: str) -> None:
    assert _refused(_component(args=["--header", line])).field == f"config.{SERVER}.args.1"
    assert _refused(_component(env={"API_KEY_HEADER": line})).field == f"config.{SERVER}.env.API_KEY_HEADER"


@pytest.mark.parametrize(
    "line",
    [
        "OPENAI_BASE_URL=http://localhost:8000/v1 app --api-key <your-key>",
        "RUST_LOG=info cargo run -- --api-key <KEY>",
        "OPENAI_API_KEY=<your key> app --api-key <your key>",
    ],
)
def test_an_example_placeholder_in_angle_brackets_is_left_out_in_source_env_and_args(line: str) -> None:
    # Documentation writes <your-key> where a shell would read a redirection; its '<' is no flag's value.
    component = _component(source=f"USAGE = {line!r}\n", env={"USAGE": line}, args=["-c", line])
    assert apply_references(component, {}) == component
    assert apply_references(_component(args=[line]), {}) == _component(args=[line])


def test_a_redirection_after_a_secret_flag_still_leaves_its_key_refused() -> None:
    line = "OPENAI_BASE_URL=http://localhost:8000/v1 app --api-key q7Rz9LmX2vPkAbC <input.txt"
    assert _refused(_component(env={"USAGE": line})).field == f"config.{SERVER}.env.USAGE"
