"""Secrets as references: the registry stores ``{"$secret": "env:VAR"}``, never a key and never the mask.

    from config_registry.secrets import apply_references, resolve_references

    stored = apply_references(component, {"participants.0.config.model_client.config.api_key": "env:OPENAI_API_KEY"})
    runnable = resolve_references(stored, {"OPENAI_API_KEY": "sk-..."})

Paths are dotted, relative to the root component's ``config``; list items are addressed by index.

Anywhere else, a credential is refused: this module walks a definition (and the text stored beside it) and
refuses what :mod:`config_registry.credentials` reads as a credential, by its name or in its value, and
what :mod:`config_registry.source` reads as one in a ``FunctionTool``'s source.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

from config_registry.credentials import (
    argument_name,
    command_line_credential,
    encoded_script_credential,
    environment_value_credential,
    flag_credential,
    holds_no_credential,
    kept_command_credential,
    refuses_secret_id,
    url_credential,
    value_credential,
)
from config_registry.errors import DefinitionInvalid, ScriptUnreadable, SecretUnavailable
from config_registry.names import holds_secret_command, is_secret_field
from config_registry.programs import program_passwords
from config_registry.shell import encoded_script_at, posix_script_at
from config_registry.source import source_credential
from config_registry.stores import names_secrets_id

MASK = "**********"
REFERENCE_KEY = "$secret"
# How a header or variable is written as a JSON object of its own: {"name": "X-Api-Key", "value": "..."}.
_PAIR_NAMES = ("name", "key", "header")
# A reference would stand for a FunctionTool's whole source: the tool reads its secret when it runs instead.
_SOURCE_HINT = 'read it from the environment when the tool runs (os.environ["VARIABLE"]) and set VARIABLE where the team runs'


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
    if isinstance(value, str) and value and value != MASK and is_secret_field(key) and not holds_no_credential(key, value):
        raise DefinitionInvalid(
            f"holds a plaintext secret (its name, {key!r}, means a credential); the registry never stores "
            "secrets",
            field=f"config.{path}",
            hint=f"remove the value from the definition and declare a reference: --secret {path}=env:VARIABLE"
            f"{_SECRET_ID_NOTE if names_secrets_id(key) else ''}",
        )


# Said to a secret's id refused: a single word may be a password, so only a path or a store's reference is stored.
_SECRET_ID_NOTE = ("; if it names where a secret store keeps the secret, give its path or reference (prod/db, an "
                   "ARN, projects/p/secrets/s, op://vault/item/field), or call the setting SECRET_NAME")


def _name_of(path: str, key: str, parent: Any) -> str | None:
    """The name a value goes by, ``None`` when the value is itself a name: its key; for the items of a list
    under a secret name (``"api_keys": [...]``, an ``auth`` pair), the list's; for the value of a
    ``{"name": "X-Api-Key", "value": ...}`` pair, the pair's name."""
    if isinstance(parent, list):
        owner = path.rsplit(".", 2)[-2] if path.count(".") else None
        return owner if owner is not None and is_secret_field(owner) else key
    if "value" in parent and key in _PAIR_NAMES:
        return None
    if key == "value":
        names = (parent.get(name) for name in _PAIR_NAMES)
        return next((name for name in names if isinstance(name, str) and is_secret_field(name)), key)
    return key


def _check_undeclared(path: str, key: str, value: Any, parent: Any, *, shell_runs: bool = False) -> None:
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
            hint=f"declare where the secret comes from: --secret {path}=env:OPENAI_API_KEY; or, for a local "
            "model server that checks no key, write the dummy key it documents in place of the mask "
            '(vLLM\'s "EMPTY", Ollama\'s "ollama")',
        )
    name = _name_of(path, key, parent)
    if name is not None:
        _check_plaintext(path, name, value)
    found = url_credential(value) if isinstance(value, str) else None
    if found is not None:
        raise DefinitionInvalid(
            f"is a URL with a credential in it ({found}); the registry never stores secrets",
            field=f"config.{path}",
            hint=f"take the whole URL from the environment: --secret {path}=env:VARIABLE",
        )
    if isinstance(value, str) and key == "source_code":
        found = source_credential(value)
        if found is not None:
            _refuse_plaintext(path, found, hint=_SOURCE_HINT)
        return
    found = _found_in_value(path, key, value, parent, shell_runs=shell_runs)
    if found is not None:
        # An argument is named by its variable or flag (``-e SECRET_ID=VALUE``, ``--secret-id VALUE``), a command
        # line by those in it (``sh -c "aws ... --secret-id VALUE"``): what says how to give a reference instead.
        named = argument_name(parent, int(key)) if isinstance(parent, list) else None
        secret_id = names_secrets_id(named or key) or (isinstance(value, str) and refuses_secret_id(value))
        _refuse_plaintext(path, found, secret_id=secret_id)


def _found_in_value(path: str, key: str, value: Any, parent: Any, *, shell_runs: bool) -> str | None:
    """What a value holds as a credential whatever its field, as an argument of a command line (``shell_runs``:
    the script a shell is given in ``args``, :func:`_shell_scripts`), or as a command line kept in an
    environment variable."""
    found = value_credential(value) if isinstance(value, str) else None
    if found is None and isinstance(parent, list):
        found = flag_credential(parent, int(key), script=shell_runs)
    if found is None and isinstance(value, str) and _is_argument(path, parent):
        found = command_line_credential(value)
    if found is None and isinstance(value, str) and _is_environment(path, parent):
        found = environment_value_credential(key, value)
    if found is None and isinstance(value, str) and holds_secret_command(key):  # "db_password_cmd": "..."
        found = kept_command_credential(key, value)
    return found


def _refuse_plaintext(path: str, found: str, hint: str | None = None, *, secret_id: bool = False) -> NoReturn:
    """``secret_id``: what is refused was given to a secret's id, ARN or ref, whose hint says how to name one."""
    raise DefinitionInvalid(
        f"holds a plaintext secret ({found}); the registry never stores secrets",
        field=f"config.{path}",
        hint=hint or f"take the value from the environment: --secret {path}=env:VARIABLE"
        f"{_SECRET_ID_NOTE if secret_id else ''}",
    )


def _is_environment(path: str, parent: Any) -> bool:
    """A value of an ``env`` mapping (an MCP stdio server's): the variables the program starts with."""
    return isinstance(parent, dict) and path.rsplit(".", 2)[-2:-1] == ["env"]


def _is_argument(path: str, parent: Any) -> bool:
    """An item of an ``args`` list (an MCP stdio server's), where one item may be a whole command line for a
    shell (``["-c", "tool --api-key VALUE serve"]``), or the ``command`` beside such a list, which may be a
    whole command line itself; other lists and fields hold prose that may mention a flag."""
    if isinstance(parent, dict):
        return path.rsplit(".", 1)[-1] == "command" and isinstance(parent.get("args"), list)
    return isinstance(parent, list) and path.rsplit(".", 2)[-2:-1] == ["args"]


def _shell_scripts(config: Any) -> set[str]:
    """The paths of the ``args`` items a POSIX shell the server's ``command`` starts is given as its script
    (``"command": "sh", "args": ["-c", SCRIPT]``): the only items a shell splits into words again, so the only
    ones where a variable set at the start is given its first word alone."""
    found = set()
    for path, key, value, parent in walk(config):
        command = parent.get("command") if isinstance(parent, dict) and key == "args" else None
        if isinstance(command, str) and isinstance(value, list):
            at = posix_script_at([command, *(item if isinstance(item, str) else "" for item in value)])
            found |= {f"{path}.{at - 1}"} if at is not None else set()
    return found


def _check_program_arguments(path: str, key: str, value: Any, parent: Any, secrets: Mapping[str, str]) -> None:
    """Refuse what an argument means only after the server's ``command`` (``"command": "mysql", "args":
    ["-uapp", "-pVALUE"]``), unless a reference is declared in its place."""
    command = parent.get("command") if isinstance(parent, dict) and key == "args" else None
    if not isinstance(command, str) or not isinstance(value, list):
        return
    words = [command, *(item if isinstance(item, str) else "" for item in value)]
    for index, what in program_passwords(words).items():
        if f"{path}.{index - 1}" not in secrets:
            _refuse_plaintext(f"{path}.{index - 1}", what)
    _check_encoded_script(path, words, secrets)


def _check_encoded_script(path: str, words: list[str], secrets: Mapping[str, str]) -> None:
    """Refuse a secret in the script PowerShell is given encoded as one of the ``args`` (``["-enc",
    "BASE64"]``), read as a command line once decoded, unless a reference is declared in its place."""
    at = encoded_script_at(words)
    if at is None or f"{path}.{at - 1}" in secrets:
        return
    with _naming(f"config.{path}.{at - 1}"):
        found = encoded_script_credential(words)
    if found is not None:
        _refuse_plaintext(f"{path}.{at - 1}", found)


def _check_key(path: str, key: str, parent: Any) -> None:
    """Refuse a credential as an object's key (``"metadata": {"ghp_...": "ci"}``): a key is stored as it is,
    and no reference can stand in for it. The error names the object, not the key."""
    owner = path[: -len(key) - 1]  # the key may hold dots itself
    with _naming(f"config.{owner}" if owner else "config"):
        found = (value_credential(key) or url_credential(key)) if isinstance(parent, dict) else None
    if found is not None:
        raise DefinitionInvalid(
            f"has a key that holds a plaintext secret ({found}); the registry never stores secrets",
            field=f"config.{owner}" if owner else "config",
            hint="remove it from the definition: a secret goes in a value, declared with --secret PATH=env:VARIABLE",
        )


def check_free_text(field: str, value: str) -> None:
    """Refuse a credential in text stored beside the definition (a commit message, a label move's
    reason, the manifest's description, owner and notes), where no reference can stand in for it.

    Raises:
        DefinitionInvalid: Naming ``field``.
    """
    with _naming(field):
        found = value_credential(value) or next(filter(None, map(url_credential, value.split())), None)
    if found is not None:
        raise DefinitionInvalid(
            f"holds a plaintext secret ({found}); the registry never stores secrets, and this text goes "
            "into the repository's history",
            field=field,
            hint="remove the secret from the text",
        )


def apply_references(component: Mapping[str, Any], secrets: Mapping[str, str]) -> dict[str, Any]:
    """Replace declared secret fields with references; refuse credentials and masks anywhere else.

    Args:
        component: The component JSON (a dumped team or agent).
        secrets: The manifest's ``secrets``: dotted path under ``config`` -> ``env:VAR``.

    Returns:
        A copy of ``component`` whose secret fields are ``{"$secret": reference}``.

    Raises:
        DefinitionInvalid: A plaintext secret (by its name or its shape) or a masked field at an undeclared
            path, or a declared path that does not exist.
    """
    result = copy.deepcopy(dict(component))
    found: set[str] = set()
    shell_scripts = _shell_scripts(result.get("config"))
    for path, key, value, parent in list(walk(result.get("config"))):
        _check_key(path, key, parent)
        if path in secrets:
            _check_one_value(path, value)
            # Whatever the definition holds there (the mask, a reference, or the key itself, as in a header
            # that dump_component() does not mask) is replaced, never written.
            found.add(path)
            _set(parent, key, {REFERENCE_KEY: secrets[path]})
        else:
            with _naming(f"config.{path}"):
                _check_undeclared(path, key, value, parent, shell_runs=path in shell_scripts)
                _check_program_arguments(path, key, value, parent, secrets)
    missing = sorted(set(secrets) - found)
    if missing:
        raise DefinitionInvalid(
            "the manifest declares a secret at a path the definition does not have",
            field=f"secrets.{missing[0]}",
            hint="give the dotted path under the component's 'config', as printed by 'teamstore registry show'",
        )
    return result


@contextlib.contextmanager
def _naming(field: str) -> Iterator[None]:
    """Name ``field`` in a :class:`ScriptUnreadable` raised where the script was read, which knows no field."""
    try:
        yield
    except ScriptUnreadable as exc:
        if exc.field is not None:
            raise
        raise ScriptUnreadable(exc.message, field=field, hint=exc.hint) from None


def _check_one_value(path: str, value: Any) -> None:
    """A reference stands for one string: at an object (a whole model client) or a list, the team would load
    with a string where AutoGen expects the object, and fail with a validation error far from the cause."""
    if not isinstance(value, dict | list) or is_reference(value):
        return
    inner = next((p for p, key, v, _ in walk(value) if isinstance(v, str) and is_secret_field(key)), None)
    raise DefinitionInvalid(
        f"holds {'an object' if isinstance(value, dict) else 'a list'}, not one value: a secret reference stands "
        "for one string read from the environment",
        field=f"secrets.{path}",
        hint="declare the string field inside it that holds the credential"
        + (f": --secret {path}.{inner}=env:VAR" if inner else ""),
    )


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
