"""What a secret store names a secret by, given where a secret's id, ARN or ref goes (``SECRET_ID``, AWS's
``--secret-id``), so that :mod:`config_registry.credentials` stores it as a reference rather than refusing it as
the secret.

    from config_registry.stores import names_secrets_id, names_stored_secret

    names_secrets_id("DB_SECRET_ARN")          # True
    names_stored_secret("prod/crm-db")         # True: a path of words as people name a secret
    names_stored_secret("hunter2SECRET9f8e")   # False: a single word may be the secret itself

Nothing here refuses anything.
"""

from __future__ import annotations

import re

from config_registry.names import name_words
from config_registry.shapes import known_shape

# The last words of a name whose value names a secret a secret store keeps (names_stored_secret): "SECRET_ID".
_SECRET_REFERENCE_LAST = frozenset({"id", "arn", "ref", "reference"})
_SECRET_STORE_NAMES = (
    re.compile(r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@!-]+(?::[A-Za-z0-9_.-]*){0,3}"),
    re.compile(r"projects/[A-Za-z0-9_-]+(?:/locations/[a-z0-9-]+)?/secrets/[A-Za-z0-9_-]+"
               r"(?:/versions/(?:latest|\d+))?"),
    re.compile(r"https://[a-z0-9-]+\.vault\.(?:azure\.net|usgovcloudapi\.net|azure\.cn)/secrets/[A-Za-z0-9-]+"
               r"(?:/[0-9a-f]{32})?/?"),
    re.compile(r"op://[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+){2,3}"),  # no space: an item's id, or a name without one
)
_SECRET_PATH = re.compile(r"[A-Za-z0-9/_.-]{3,512}")  # no symbol a password takes (@, !, +, =, a space)
_PATH_WORD_SEPARATORS = re.compile(r"[-_.]")
# A word of a secret's name: lower, upper or camel case, then one digit at most; two letters at least, or one and a
# digit.
_NAME_WORD = re.compile(r"(?=[A-Za-z]{2}|[A-Za-z]\d)(?:[a-z]+|[A-Z]+|[A-Z]?[a-z]+(?:[A-Z][a-z]+)*)\d?")


def names_secrets_id(name: str) -> bool:
    """Whether ``name`` is a secret's id, ARN or ref (``SECRET_ID``, ``--secret-arn``), whose value may name where a
    secret store keeps the secret (:func:`names_stored_secret`)."""
    words = name_words(name)
    return words[-2:-1] in (["secret"], ["secrets"]) and words[-1] in _SECRET_REFERENCE_LAST


def names_stored_secret(value: str) -> bool:
    """Whether ``value``, given to a ``SECRET_ID``, ``SECRET_ARN`` or ``SECRET_REF`` (AWS's ``--secret-id``),
    names a secret a secret store keeps rather than being one: an AWS Secrets Manager ARN (a JSON key after it
    too, as ECS's ``valueFrom`` has it), a Google Secret Manager resource name
    (``projects/p/secrets/db/versions/latest``, a regional one too), an Azure Key Vault secret's URI, a 1Password
    ``op://`` reference, or a path (``prod/db``, ``prod/AppBeta/MySql``, ``kv/prod/db-2``) of words as people
    name a secret (:func:`_names_segment`). A single word is not one: HashiCorp Vault's
    AppRole ``secret_id`` is a credential (a UUID, or any string given), and a password may read as a word or a
    name (``letmein``, ``correct-horse-battery``)."""
    if any(pattern.fullmatch(value) for pattern in _SECRET_STORE_NAMES):
        return True
    segments = value.split("/")
    return (len(segments) > 1 and _SECRET_PATH.fullmatch(value) is not None and known_shape(value) is None
            and all(map(_names_segment, segments)))


def _names_segment(segment: str) -> bool:
    """A segment of a secret's path as people name one: words split at ``-``, ``_`` and ``.``, each in lower or
    upper case or camel case (``prod``, ``CRM``, ``AppBeta``, ``dbPassword``), two letters at least or one and a
    digit (``v2``, ``app1``), or a number after the first (``db-2``). A random key's piece (``ecXHJ``,
    ``SMyWVeCSo``), a password's (``P4ss``, ``Pa55``, ``s3cr3t``) or a bare number (``hunter/2``) is none."""
    first, *rest = _PATH_WORD_SEPARATORS.split(segment)
    return _NAME_WORD.fullmatch(first) is not None and all(
        _NAME_WORD.fullmatch(word) is not None or (word.isdigit() and len(word) <= 4) for word in rest)
