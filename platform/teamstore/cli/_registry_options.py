"""What ``teamstore registry add`` is given, read into the pieces of a registration: the manifest, its
secret references and memory declaration, and a team's JSON from a file. A wrong value is a
:class:`~config_registry.errors.DefinitionInvalid` that names its field.

    from teamstore.cli._registry_options import build_manifest, parse_secrets

    manifest = build_manifest("support_triage", {"persist": ["researcher"],
                                                 "secrets": parse_secrets(["api_key=env:OPENAI_API_KEY"])})
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from config_registry.errors import DefinitionInvalid, validation_message

# pydantic and the registry's models are imported when `add` reads its options, not with the command line.
if TYPE_CHECKING:
    from config_registry import Manifest


def parse_secrets(values: list[str]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values:
        path, sep, reference = value.partition("=")
        if not sep or not path or not reference:
            raise DefinitionInvalid(  # the value is not quoted: given wrong, it may be the secret itself
                "a --secret is not PATH=env:VAR",
                field="secrets",
                hint="e.g. --secret participants.0.config.model_client.config.api_key=env:OPENAI_API_KEY",
            )
        path, reference = path.strip(), reference.strip()
        if pairs.setdefault(path, reference) != reference:  # else the last one would win unseen
            raise DefinitionInvalid(
                f"--secret {path} is given twice, with two references",
                field=f"secrets.{path}",
                hint="give each path once, with the variable the worker reads it from",
            )
    return pairs


def build_manifest(name: str, options: dict[str, Any]) -> Manifest:
    from pydantic import ValidationError

    from config_registry import Manifest

    try:
        return Manifest(name=name, **options)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "manifest"
        raise DefinitionInvalid(
            validation_message(error), field=field, hint="see 'teamstore registry add --help'"
        ) from exc


def parse_memory(value: str | None) -> dict[str, Any] | None:
    """``--memory``'s JSON object (the manifest's memory declaration), or ``None`` when not given."""
    from config_registry.registration import parse_json

    if value is None:
        return None
    try:
        data = parse_json(value, root="memory")
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise DefinitionInvalid(
            "--memory is not a JSON object", field="memory",
            hint='e.g. --memory \'{"participants": ["triage"], "writer": "triage", "facts": {"ticket_id": "str"}}\'',
        )
    return data


def read_component(path: Path) -> dict[str, Any]:
    from config_registry.registration import parse_json

    try:
        data = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON or not UTF-8 text
        raise DefinitionInvalid(
            f"cannot read {path}: {exc}" if not isinstance(exc, RecursionError)
            else f"cannot read {path}: its JSON is nested too deeply",
            field="file",
            hint="pass the JSON that team.dump_component() returns",
        ) from exc
    if not isinstance(data, dict):
        raise DefinitionInvalid(f"{path} does not hold a JSON object", field="file")
    return data
