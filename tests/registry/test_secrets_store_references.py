"""A secret store's reference under a credential's name (``OPENAI_API_KEY=op://dev/openai/credential``, as
1Password's ``op run`` and ECS's ``valueFrom`` take it) is stored when every part of it reads as a name, judged more
strictly than under a secret's id (``DB_SECRET_ARN``), whose judgement is unchanged; a secret put in any part of
it is refused, in a field, an environment, a command line, a flag and a tool's source alike."""

from __future__ import annotations

from typing import Any

import pytest

from config_registry import DefinitionInvalid
from config_registry.secrets import apply_references
from tests.registry.conftest import stdio_component

_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:"

# C: what people give a runner under a credential's name.
ORDINARY_REFERENCES = [
    "op://dev/openai/credential", "op://Private/OpenAI/api-key", f"{_ARN}prod/openai-AbCdEf:OPENAI_API_KEY::",
    f"{_ARN}prod/openai-AbCdEf", "projects/my-project/secrets/openai-key/versions/latest",
    "https://my-vault.vault.azure.net/secrets/OpenAIApiKey",
    # a name's acronyms and .NET's "--", a region's and a location's number, a Google project's number
    "https://crm-kv.vault.azure.net/secrets/AzureOpenAI--ApiKey", "op://Private/GitHub/clientID",
    "projects/123456789012/locations/us-central1/secrets/OPENAI__API_KEY/versions/3",
    "arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:prod/SQLPassword-gONVpo::AWSCURRENT:",
]

# A: a secret put in any part of a reference, under a credential's name.
SECRETS_IN_A_PART = [
    # a 1Password vault, item or field, its ids' shape too (under a credential's name a random key's as much)
    "op://dev/Xk9qR7vLm2PzW4tBn8Yc/credential", "op://Xk9qR7vLm2PzW4tBn8Yc/db/password",
    "op://dev/hunter2SECRET9f8e/password", "op://vault/item/hunter2SECRET9f8e",
    "op://dev/openai/xk9qr7vlm2pzw4tbn8yc3df6hj", "op://nerlnqbfzdm5q5g6ydsgdqgdw4/openai/credential",
    "op://dev/nerlnqbfzdm5q5g6ydsgdqgdw4/credential",
    # a random key's letters in camel case's look: alternating case, runs of capitals no name's acronym
    "op://dev/hUnTeRsEcReTvAlUe/password", "op://dev/TADxaASBMujr/credential", "op://dev/FBABcqPQCWcu/credential",
    # an ARN's secret name, judged a path's segment at a time, and as a whole for a known key's shape
    f"{_ARN}prod/app-AbCdEf/wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Xk9qR7vLm",
    f"{_ARN}ZmDfcTF7_60GrrY167zsiPd67pEvs0aGOv2oasOM1Pg=", f"{_ARN}hunter2!Xk9q@pw", f"{_ARN}MFxFkM_=R5Kjp@1v-AbCdEf",
    f"{_ARN}wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY-AbCdEf",
    f"{_ARN}prod/openai-Pa55wd",  # where AWS's six random characters go, a password's look
    # a version's id after an ARN: none is exempt (32 hex digits are an Azure OpenAI key's shape, a UUID Heroku's)
    f"{_ARN}prod/openai-AbCdEf:::3f9a1c2e7b6d4e0fa8c1b2d3e4f5a6b7",
    f"{_ARN}prod/openai-AbCdEf:::3fa85f64-5717-4562-b3fc-2c963f66afa6",
    f"{_ARN}prod/openai-AbCdEf:::Xk9qR7vL-m2Pz-W4tB-n8Yc-Q3dF6hJ1kL5s",
    # a Google project, a Key Vault's name and its version
    "projects/Xk9qR7vLm2PzW4tBn8Yc/secrets/openai/versions/latest",
    "https://xk9qr7vlm2pzw4tbn8yc.vault.azure.net/secrets/openai",
    "https://myvault.vault.azure.net/secrets/openai/9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    # a bare path is no store's reference: under a credential's name it may be a user and password pair
    "prod/openai",
    # a number no store writes where one goes: a Google version or project number of any length, any script's digits
    "projects/my-project/secrets/db/versions/49823749823749823749823749823749873294",
    "projects/98237498237498237498237498237498234/secrets/openai",
    "projects/my-project/secrets/openai/versions/\u0663\u0664\u0665\u0666\u0667\u0668\u0669\u0660\u0661\u0662",
    "arn:aws:secretsmanager:us-east-1:\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669\u0660\u0661\u0662"
    ":secret:prod/openai-AbCdEf",
    "op://dev/openai\u0661\u0662/credential", "op://dev/openai/key-\u0661\u0662\u0663",
]

# B: what a secret's id took before a reference was taken under a credential's name, taken still.
SECRET_ID_REFERENCES = {
    "REDSHIFT_SECRET_ARN": f"{_ARN}redshift!default-namespace-admin-gONVpo",
    "EVENTS_SECRET_ARN": f"{_ARN}events!connection/MyConnectionName/0c3fa3cc-8cef-4a61-9b5c-2f3a7c1d9e0a-AbCdEf",
    "DB_SECRET_ARN": "arn:aws:secretsmanager:eu-west-2:123456789012:secret:"
                     "rds-db-credentials/cluster-HOPH722GCFSMMPROYVUROAKCXM/admin-elwhMg",
    "CRM_SECRET_ARN": f"{_ARN}MyProductionDatabaseCredentials-AbCdEf",
    "DB_SECRET_REF": "op://dev/PostgresProductionDatabase/password",
    "EUSC_SECRET_ARN": "arn:aws-eusc:secretsmanager:eusc-de-east-1:123456789012:secret:prod/db-AbCdEf",
}


def _contexts(value: str) -> list[dict[str, Any]]:
    """A credential's name given ``value`` in each place a definition holds one: an MCP server's environment, a
    field, a variable set before a command in a shell's script, a flag and a tool's source."""
    source = f"def ask(query: str) -> str:\n    OPENAI_API_KEY = {value!r}\n    api_key = {value!r}\n    return query\n"
    return [
        stdio_component(env={"OPENAI_API_KEY": value}),
        stdio_component(fields={"api_key": value}),
        stdio_component(args=["-c", f"OPENAI_API_KEY={value} tool serve"], command="sh"),
        stdio_component(args=["--api-key", value]),
        stdio_component(source=source),
    ]


@pytest.mark.parametrize("value", ORDINARY_REFERENCES)
def test_a_stores_reference_whose_parts_read_as_names_is_stored_under_a_credentials_name(value: str) -> None:
    for component in _contexts(value):
        assert apply_references(component, {}) == component


@pytest.mark.parametrize("value", SECRETS_IN_A_PART)
def test_a_secret_in_any_part_of_a_stores_reference_under_a_credentials_name_is_refused_unechoed(value: str) -> None:
    for component in _contexts(value):
        with pytest.raises(DefinitionInvalid) as caught:
            apply_references(component, {})
        assert "never stores secrets" in caught.value.message
        assert value not in f"{caught.value.message} {caught.value.hint}"


@pytest.mark.parametrize(("name", "value"), SECRET_ID_REFERENCES.items())
def test_what_a_secrets_id_took_is_stored_still(name: str, value: str) -> None:
    component = stdio_component(env={name: value}, args=["--secret-id", value], fields={name.lower(): value})
    assert apply_references(component, {}) == component


@pytest.mark.parametrize("component", [
    stdio_component(env={"OPENAI_API_KEY": "op://Private/OAuth/clientID"}),
    stdio_component(fields={"api_key": "op://Private/OAuth/clientID"}),
    stdio_component(args=["--api-key", "op://Private/OAuth/clientID"]),
])
def test_a_stores_reference_refused_under_a_credentials_name_says_why(component: dict[str, Any]) -> None:
    """A refusal said only "a plaintext secret", where the reference's owner needs to know which parts it takes."""
    with pytest.raises(DefinitionInvalid) as caught:
        apply_references(component, {})
    assert "taken under a credential's name only when every part of it reads as a name" in (caught.value.hint or "")
    assert "--secret" in (caught.value.hint or "")
    other = stdio_component(env={"OPENAI_API_KEY": "hunter2SECRET9f8e"})
    with pytest.raises(DefinitionInvalid) as caught:
        apply_references(other, {})
    assert "secret store's reference" not in (caught.value.hint or "")

