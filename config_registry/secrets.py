"""Secrets as references: the registry stores ``{"$secret": "env:VAR"}``, never a key and never the mask.

    from config_registry.secrets import apply_references, resolve_references

    stored = apply_references(component, {"participants.0.config.model_client.config.api_key": "env:OPENAI_API_KEY"})
    runnable = resolve_references(stored, {"OPENAI_API_KEY": "sk-..."})

Paths are dotted, relative to the root component's ``config``; list items are addressed by index.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from config_registry.errors import DefinitionInvalid, SecretUnavailable

MASK = "**********"
REFERENCE_KEY = "$secret"
# Config keys (``api_key``, ``azure_ad_token``), HTTP header names (``Authorization``, ``x-api-key``,
# Azure's ``api-key``, ``Ocp-Apim-Subscription-Key``), environment variables (``DB_PWD``) and connection
# string parts (``AccountKey``) whose values are secrets; camelCase names are split first.
_SECRET_FIELD = re.compile(
    r"(^|[_-])(api[_-]?keys?|passwords?|passwd|pwd|passphrase|secrets?|secret[_-]key|token|access[_-]token|"
    r"credential|credentials|access[_-]key|private[_-]key|account[_-]key|auth|authorization|bearer|"
    r"subscription[_-]key|cookie)$",
    re.IGNORECASE,
)
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Query parameter names that carry a credential in signed and keyed URLs: Azure SAS ``sig``, Azure
# Functions ``code``, S3's ``X-Amz-Signature``, Google's ``key``.
_SECRET_QUERY = re.compile(r"key|code|sig|(.*[_-])?signature", re.IGNORECASE)
# Values that are a credential whatever the field is called: an HTTP authorization value, and the shapes
# of well-known providers' keys (OpenAI and Anthropic ``sk-``, GitHub, Slack, AWS access key ids, Google,
# Hugging Face) wherever they appear in a string.
_AUTHORIZATION_VALUE = re.compile(r"(bearer|basic|token)\s+\S{8,}", re.IGNORECASE)
_KEY_SHAPE = re.compile(
    r"(?<![A-Za-z0-9_-])(sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|"
    r"xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}|hf_[A-Za-z0-9]{30,})"
)
_CONNECTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9 _.-]{0,40}")
# A command-line flag in an argument list (an MCP stdio server's ``args``): ``--api-key=VALUE`` or
# ``--token`` followed by the value.
_FLAG = re.compile(r"-{1,2}([A-Za-z][A-Za-z0-9_-]*)(?:=(.*))?", re.DOTALL)
# A value that is one URL and nothing else (a tool's source code quoting a URL is not one).
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://\S+\Z")


def is_secret_field(key: str) -> bool:
    """True for config keys that hold secrets (``api_key``, ``azure_ad_token``, ``password``, ``openaiApiKey`` ...)."""
    return bool(_SECRET_FIELD.search(_CAMEL_BOUNDARY.sub("_", key)))


def url_credential(value: str) -> str | None:
    """What makes a URL hold a credential: a user part (``https://u:pw@host``, or a token alone as in
    ``https://ghp_...@github.com``) or a query or fragment parameter with a secret-looking name
    (``?api_key=``, ``?sig=``, ``#access_token=``); ``None`` for any other string.

    A ``base_url`` or ``endpoint`` is not a secret-looking field, but a proxy URL with a password in it is
    a secret all the same.
    """
    value = value.strip()
    if not _URL.match(value):
        return None
    try:
        parts = urlsplit(value)
        password, username = parts.password, parts.username
    except ValueError:  # not a URL after all (an invalid port, say)
        return None
    if password:
        return "a password in its user part"
    if username and parts.scheme.lower() in {"http", "https", "ws", "wss"}:  # ssh://git@host is no secret
        return "a user part, where URLs carry tokens"
    for name, _value in parse_qsl(parts.query, keep_blank_values=False) + parse_qsl(parts.fragment):
        if _SECRET_QUERY.fullmatch(name) or is_secret_field(name):
            return f"the query parameter {name!r}"
    return None


def value_credential(value: str) -> str | None:
    """What makes a string a credential whatever its field is called: an authorization value
    (``Bearer ...``), a well-known key shape (``sk-...``, ``ghp_...``, ``AKIA...``) anywhere in it, or a
    secret part of a connection string (``...;Password=...;``); ``None`` for any other string."""
    authorization = _AUTHORIZATION_VALUE.fullmatch(value.strip())
    if authorization and _looks_random(value.split()[-1]):
        return "an HTTP authorization value"
    # Random keys have digits; 'sk-learn-compatible-...' in a prompt is a word.
    if any(not key.startswith("sk-") or any(c.isdigit() for c in key) for key in _KEY_SHAPE.findall(value)):
        return "what looks like an API key"
    pairs = [part.partition("=") for part in value.split(";") if part.strip()] if ";" in value else []
    # A connection string is name=value pairs and nothing else; a prompt that explains one is prose.
    if pairs and all(equals and _CONNECTION_NAME.fullmatch(name.strip()) for name, equals, _ in pairs):
        for name, _, secret in pairs:
            if secret.strip() and is_secret_field(name.strip()):
                return f"a connection string's {name.strip()!r}"
    return None


def _looks_random(text: str) -> bool:
    """A token rather than a word: a digit or a base64/url-safe symbol in it, or 24+ characters
    ('Basic information' and 'sk-learn-compatible' are words)."""
    return len(text) >= 24 or (len(text) >= 8 and any(c.isdigit() or c in "+/=_." for c in text))


def flag_credential(items: list[Any], index: int) -> str | None:
    """Whether item ``index`` of an argument list is a secret flag's value: ``--api-key=VALUE`` itself, or
    the item after a bare ``--token``; ``None`` otherwise."""
    item = items[index]
    if not isinstance(item, str) or not item:
        return None
    match = _FLAG.fullmatch(item)
    if match and match.group(2) and is_secret_field(match.group(1)):
        return f"the value of the flag '--{match.group(1)}'"
    previous = _FLAG.fullmatch(items[index - 1]) if index and isinstance(items[index - 1], str) else None
    if previous and previous.group(2) is None and is_secret_field(previous.group(1)) and not _FLAG.fullmatch(item):
        return f"the value of the flag '--{previous.group(1)}'"
    return None


def is_reference(value: Any) -> bool:
    """True for a stored secret reference ``{"$secret": "env:VAR"}``."""
    return isinstance(value, dict) and set(value) == {REFERENCE_KEY} and isinstance(value[REFERENCE_KEY], str)


def walk(node: Any, path: str = "") -> Iterator[tuple[str, str, Any, Any]]:
    """Yield ``(path, key, value, parent)`` for every dict entry and list item, depth first.

    Args:
        node: A JSON value.
        path: The dotted path of ``node``.

    Yields:
        The dotted path of each child, its key (or index as a string), its value and its container.
    """
    items: list[tuple[str, Any]]
    if isinstance(node, dict):
        items = [(str(k), v) for k, v in node.items()]
    elif isinstance(node, list):
        items = [(str(i), v) for i, v in enumerate(node)]
    else:
        return
    for key, value in items:
        child = f"{path}.{key}" if path else key
        yield child, key, value, node
        if not is_reference(value):
            yield from walk(value, child)


def _set(parent: Any, key: str, value: Any) -> None:
    if isinstance(parent, list):
        parent[int(key)] = value
    else:
        parent[key] = value


def _check_plaintext(path: str, key: str, value: Any) -> None:
    if isinstance(value, str) and value and value != MASK and is_secret_field(key):
        raise DefinitionInvalid(
            "holds a plaintext secret; the registry never stores secrets",
            field=f"config.{path}",
            hint=f"remove the value from the definition and declare a reference: --secret {path}=env:VARIABLE",
        )


def _check_undeclared(path: str, key: str, value: Any, parent: Any) -> None:
    if is_reference(value):
        raise DefinitionInvalid(
            f"is a secret reference {value[REFERENCE_KEY]!r} the manifest does not declare",
            field=f"config.{path}",
            hint=f"declare it: --secret {path}={value[REFERENCE_KEY]}",
        )
    if value == MASK:
        raise DefinitionInvalid(
            "holds the masked secret '**********' that dump_component() writes in place of a key; "
            "stored as is, the team would build with the literal key '**********'",
            field=f"config.{path}",
            hint=f"declare where the secret comes from: --secret {path}=env:OPENAI_API_KEY",
        )
    # The items of a list under a secret name (``"api_keys": [...]``, an ``auth`` pair) are secrets too.
    owner = path.rsplit(".", 2)[-2] if isinstance(parent, list) and path.count(".") else None
    _check_plaintext(path, owner if owner is not None and is_secret_field(owner) else key, value)
    found = url_credential(value) if isinstance(value, str) else None
    if found is not None:
        raise DefinitionInvalid(
            f"is a URL with a credential in it ({found}); the registry never stores secrets",
            field=f"config.{path}",
            hint=f"take the whole URL from the environment: --secret {path}=env:VARIABLE",
        )
    found = value_credential(value) if isinstance(value, str) else None
    if found is None and isinstance(parent, list):
        found = flag_credential(parent, int(key))
    if found is not None:
        raise DefinitionInvalid(
            f"holds a plaintext secret ({found}); the registry never stores secrets",
            field=f"config.{path}",
            hint=f"take the value from the environment: --secret {path}=env:VARIABLE",
        )


def check_free_text(field: str, value: str) -> None:
    """Refuse a credential in text stored beside the definition (a commit message, a label move's
    reason, the manifest's description, owner and notes), where no reference can stand in for it.

    Raises:
        DefinitionInvalid: Naming ``field``.
    """
    found = value_credential(value) or next(filter(None, map(url_credential, value.split())), None)
    if found is not None:
        raise DefinitionInvalid(
            f"holds a plaintext secret ({found}); the registry never stores secrets, and this text goes "
            "into the repository's history",
            field=field,
            hint="remove the secret from the text",
        )


def apply_references(component: Mapping[str, Any], secrets: Mapping[str, str]) -> dict[str, Any]:
    """Replace declared secret fields with references; refuse plaintext secrets and undeclared masks.

    Args:
        component: The component JSON (a dumped team or agent).
        secrets: The manifest's ``secrets``: dotted path under ``config`` -> ``env:VAR``.

    Returns:
        A copy of ``component`` whose secret fields are ``{"$secret": reference}``.

    Raises:
        DefinitionInvalid: A plaintext secret, a masked field without a declared reference, or a declared
            path that does not exist.
    """
    result = copy.deepcopy(dict(component))
    found: set[str] = set()
    for path, key, value, parent in list(walk(result.get("config"))):
        if path in secrets:
            found.add(path)
            if not is_reference(value):
                _check_plaintext(path, key, value)
            _set(parent, key, {REFERENCE_KEY: secrets[path]})
        else:
            _check_undeclared(path, key, value, parent)
    missing = sorted(set(secrets) - found)
    if missing:
        raise DefinitionInvalid(
            "the manifest declares a secret at a path the definition does not have",
            field=f"secrets.{missing[0]}",
            hint="give the dotted path under the component's 'config', as printed by 'teamstore registry show'",
        )
    return result


def _replace_references(node: Any, replace: Any) -> Any:
    if is_reference(node):
        return replace(node[REFERENCE_KEY])
    if isinstance(node, dict):
        return {k: _replace_references(v, replace) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_references(v, replace) for v in node]
    return node


def mask_references(component: Mapping[str, Any]) -> dict[str, Any]:
    """A copy with every reference replaced by the mask, for loading without the secret (validation).

    Args:
        component: Stored component JSON.

    Returns:
        The JSON ``dump_component()`` would have produced.
    """
    result: dict[str, Any] = _replace_references(dict(component), lambda _ref: MASK)
    return result


def resolve_references(component: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """A copy with every reference replaced by its value from ``env``.

    Args:
        component: Stored component JSON.
        env: Where ``env:VAR`` references are looked up (usually ``os.environ``).

    Returns:
        Runnable component JSON; never write it anywhere.

    Raises:
        SecretUnavailable: A referenced variable is unset or empty.
    """

    def lookup(reference: str) -> str:
        variable = reference.removeprefix("env:")
        value = env.get(variable)
        if not value:
            raise SecretUnavailable(
                f"the team needs the secret {reference!r} but environment variable {variable} is not set",
                hint=f"export {variable}=... before building the team",
            )
        return value

    result: dict[str, Any] = _replace_references(dict(component), lookup)
    return result


def references(component: Mapping[str, Any]) -> dict[str, str]:
    """Every secret reference in stored component JSON: dotted path under ``config`` -> reference."""
    return {
        path: value[REFERENCE_KEY]
        for path, _k, value, _p in walk(component.get("config"))
        if is_reference(value)
    }
