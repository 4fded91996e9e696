"""A secret pasted into any credential position of a definition never reaches the registry: not its files,
not its history, not an object git keeps unreferenced. (Secrets resolved from the environment at run time
are followed through every sink by the main job.)"""

from __future__ import annotations

from typing import Any

import pytest

from config_registry import DefinitionInvalid, Manifest, Registry
from tests.canary.canaries import CanaryBook, Kind
from tests.canary.conftest import MakeDeployment
from tests.canary.policy import judge, report, scan
from tests.canary.teams import CLIENT, gateway_desk

pytestmark = pytest.mark.otlp

# Header names a gateway reads a key from, and the value a careless author pastes there.
PASTED_HEADERS = {
    "x-functions-key": "{}",          # Azure Functions
    "X-Auth-Key": "{}",               # API gateways, Cloudflare
    "api-key": "{}",                  # Azure OpenAI
    "x-api-key": "{}",                # Anthropic, AWS API Gateway
    "Ocp-Apim-Subscription-Key": "{}",  # Azure API Management
    "Authorization": "Bearer {}",
}


def _component(book: CanaryBook, position: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The gateway desk with a canary pasted at ``position``, and the secrets its manifest declares."""
    if position == "api_key":
        component = gateway_desk(headers={}).dump_component().model_dump()
        component["config"]["model_client"]["config"]["api_key"] = book.plant(Kind.SECRET, "pasted as api_key")
        return component, {}
    value = book.plant(Kind.SECRET, f"pasted as default_headers[{position!r}]", shape=PASTED_HEADERS[position])
    component = gateway_desk(headers={position: value}).dump_component().model_dump()
    return component, {f"{CLIENT}.api_key": "env:GATEWAY_API_KEY"}


def test_a_secret_pasted_in_any_credential_position_never_reaches_the_registry(
    make_deployment: MakeDeployment, book: CanaryBook
) -> None:
    deployment = make_deployment("sqlite+local")
    registry = Registry(deployment.registry, create=True)
    refused = []
    for number, position in enumerate(["api_key", *PASTED_HEADERS]):
        component, secrets = _component(book, position)
        manifest = Manifest(name=f"gateway_{number}", persist=["desk"], context_bound=20, secrets=secrets)
        try:
            registry.add(f"gateway_{number}", component, manifest, f"gateway desk {number}")
        except DefinitionInvalid:
            refused.append(position)  # what should happen: nothing is written
    leaks = judge(scan(deployment.sinks(), book))
    assert not leaks, report(leaks) + f"\n(refused: {refused})"
