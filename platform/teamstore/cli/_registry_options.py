"""What ``teamstore registry add`` is given, read into the pieces of a registration: the manifest, its
secret references and memory declaration, its label, and a team's JSON from a file or its factory's dump.
A wrong value is a :class:`~config_registry.errors.DefinitionInvalid` that names its field.

    from teamstore.cli._registry_options import build_manifest, parse_secrets

    manifest = build_manifest("support_triage", {"persist": ["researcher"],
                                                 "secrets": parse_secrets(["api_key=env:OPENAI_API_KEY"])})
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config_registry.errors import DefinitionInvalid, FactoryInvalid, validation_message

# pydantic, AutoGen and the registry's models are imported when `add` reads its options, not with the command
# line.
if TYPE_CHECKING:
    from autogen_core import ComponentModel

    from config_registry import Manifest


MAX_FILE_BYTES = 8 * 1024 * 1024
"""The most bytes ``registry add --file`` reads (8 MiB). The limit on a definition, 1 MiB, is on its JSON as the
registry stores it (:data:`~config_registry.registration.MAX_DEFINITION_BYTES`), as for ``Registry.add``, and is
checked once the file is parsed: a file indented wider than the registry's two spaces, or writing characters as
``\\u`` escapes, holds more bytes than is stored. A file past this bound is refused unread."""


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
    example = 'e.g. --memory \'{"participants": ["triage"], "writer": "triage", "facts": {"ticket_id": "str"}}\''
    try:
        data = parse_json(value, root="memory")
    except (ValueError, RecursionError) as exc:  # say where it went wrong: a trailing comma, the shell's quoting
        problem = "is nested too deeply" if isinstance(exc, RecursionError) else f"is not JSON: {exc}"
        raise DefinitionInvalid(f"--memory {problem}", field="memory", hint=example) from exc
    if not isinstance(data, dict):
        raise DefinitionInvalid("--memory is not a JSON object", field="memory", hint=example)
    return data


def read_component(path: Path) -> dict[str, Any]:
    """The JSON object in the ``--file`` at ``path``, read only up to the registry's size limit.

    Raises:
        DefinitionInvalid: Naming ``file``: it cannot be read, is over :data:`MAX_FILE_BYTES`, is not UTF-8
            JSON, or holds no object. (Its definition over the registry's limit is refused when it is added.)
    """
    from config_registry.registration import parse_json

    try:  # utf-8-sig: a byte order mark, as some Windows editors write, is read past (RFC 8259 allows it)
        data = parse_json(_read_bounded(path).decode("utf-8-sig"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON or not UTF-8 text
        raise DefinitionInvalid(
            f"cannot read {path}: {exc}" if not isinstance(exc, RecursionError)
            else f"cannot read {path}: its JSON is nested too deeply",
            field="file",
            hint="save it as UTF-8 (PowerShell's '>' writes UTF-16: use Set-Content -Encoding utf8)"
            if isinstance(exc, UnicodeDecodeError) else "pass the JSON that team.dump_component() returns",
        ) from exc
    if not isinstance(data, dict):
        raise DefinitionInvalid(f"{path} does not hold a JSON object", field="file")
    return data


def _read_bounded(path: Path) -> bytes:
    """The bytes of ``path``, refused unread past :data:`MAX_FILE_BYTES`: a 20 MB file is neither held in memory
    nor parsed.

    Raises:
        DefinitionInvalid: The file is over the bound.
        OSError: It cannot be read.
    """
    from config_registry.registration import MAX_DEFINITION_BYTES, SIZE_HINT

    with path.open("rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
        size = os.fstat(handle.fileno()).st_size  # 0 for a pipe, whose size is known only by reading it
    if len(data) > MAX_FILE_BYTES:
        said = f"is {size:,} bytes" if size > MAX_FILE_BYTES else f"holds more than {MAX_FILE_BYTES:,} bytes"
        raise DefinitionInvalid(
            f"{path} {said}, over the {MAX_FILE_BYTES:,}-byte (8 MiB) limit on a definition file; the definition "
            f"itself may take {MAX_DEFINITION_BYTES:,} bytes (1 MiB) as the registry stores it",
            field="file",
            hint=SIZE_HINT,
        )
    return data


def one_label(labels: list[str] | None) -> str | None:
    """The one ``--label`` given, if any. A registration moves one label: given twice, the last would win unseen.

    Raises:
        DefinitionInvalid: More than one label was given.
    """
    if not labels:
        return None
    if len(labels) > 1:
        raise DefinitionInvalid(
            f"--label is given {len(labels)} times ({', '.join(map(repr, labels))}); a registration points one "
            "label at its version",
            field="label",
            hint=f"give one --label, then point the others at the version it reports: teamstore registry label "
            f"NAME <version> {labels[1]} --reason WHY",
        )
    return labels[0]


def dump_factory_here(factory: str) -> ComponentModel:
    """:func:`config_registry.factory.dump_factory`, with the current folder first on ``sys.path`` as
    ``python -m`` puts it (and uvicorn its app folder): the ``teamstore`` script puts its own folder there
    instead, so a factory module beside the caller did not import.

    Raises:
        FactoryInvalid: As ``dump_factory``; a factory module that is not found says where it is looked for.
        DefinitionInvalid: As ``dump_factory``.
    """
    from config_registry.factory import dump_factory

    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:  # "" is the current folder, as `python -c` puts it
        sys.path.insert(0, here)
    try:
        return dump_factory(factory)
    except FactoryInvalid as exc:
        missing = exc.__cause__.name if isinstance(exc.__cause__, ModuleNotFoundError) else None
        module = factory.partition(":")[0]
        if missing is None or not (module == missing or module.startswith(f"{missing}.")):
            raise  # found, but something it imports is not: its own message names what
        raise FactoryInvalid(
            exc.message, hint=f"module {module!r} must be importable from the current folder ({here}) or "
            "PYTHONPATH: run the command from the folder that holds it, or add that folder to PYTHONPATH",
        ) from exc.__cause__
