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
from config_registry.placeholders import reads_as_name
from config_registry.shapes import known_shape

# The last words of a name whose value names a secret a secret store keeps (names_stored_secret): "SECRET_ID".
_SECRET_REFERENCE_LAST = frozenset({"id", "arn", "ref", "reference"})
# An AWS ARN's partition, region and account, as AWS writes them: nothing else may stand there ("arn:aws:ssm:<a random
# key>:..." would store it), in ASCII digits.
_AWS = (r"arn:aws(?:-cn|-us-gov|-iso(?:-[a-z])?|-eusc)?:{service}:(?:eusc-)?[a-z]{{2}}(?:-(?:gov|iso[a-z]?))?"
        r"-(?:north|south|central|east|west)(?:east|west)?-[0-9]{{1,2}}:[0-9]{{12}}:")
# What a secret store names a secret by: an AWS Secrets Manager ARN, with ECS's ":json-key:version-stage:version-id"
# after it (a version's id is the ClientRequestToken it was put with, 32 to 64 characters: a UUID as AWS's own tools
# make it); a Google Secret Manager resource name; an Azure Key Vault secret's URI; a 1Password op:// reference
# without spaces (vault, item and section may be ids: 1Password's SDKs take only those). Its groups are the parts a
# person names, in whatever words the store allows ("ConnectionStrings--DefaultConnection", "OPENAI__API_KEY",
# "x509-cert", "2fa", ":clientID::"): a secret put in one is the secret itself, told by its look
# (_holds_secret_value), not by how a path's words are written.
_SECRET_STORE_NAMES = (
    re.compile(_AWS.format(service="secretsmanager") + r"secret:[A-Za-z0-9/_+=.@!-]+"
               r"(?::(?P<key>[A-Za-z0-9_.-]*)(?::(?P<stage>[A-Za-z0-9_.-]*)(?::(?P<version>[A-Za-z0-9_-]{32,64})?)?)?)?"),
    re.compile(r"projects/[A-Za-z0-9_-]+(?:/locations/[a-z0-9-]+)?/secrets/(?P<name>[A-Za-z0-9_-]+)"
               r"(?:/versions/(?:latest|\d+))?"),
    re.compile(r"https://[a-z0-9-]+\.vault\.(?:azure\.net|usgovcloudapi\.net|azure\.cn)/secrets/(?P<name>[A-Za-z0-9-]+)"
               r"(?:/[0-9a-f]{32})?/?"),
    re.compile(r"op://[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+){1,2}/(?P<field>[A-Za-z0-9_.-]+)"),
)
# An AWS Systems Manager parameter's ARN, as ECS's "valueFrom" takes one (a SecureString parameter holds a secret as
# Secrets Manager does): its name is a path, judged as a path's words are (_names_segment), of two segments or more
# as any path is: a single word may be the secret, whatever is written before it.
_SSM_PARAMETER = re.compile(_AWS.format(service="ssm") + r"parameter(/[A-Za-z0-9/_.-]+)")
# A 1Password field's id, which a reference may give in place of its name ("nerlnqbfzdm5q5g6ydsgdqgdw4").
_ONE_PASSWORD_ID = re.compile(r"[a-z0-9]{26}")
# A password written with digits for letters reads as a name to the randomness test ("P4ss", "s3cr3t"): its words
# read back with the letters, where the part as written has none of them ("db-password-2024" has its word already).
_LEET = str.maketrans("430157", "aeoist")
# A version's id in a UUID's shape, as AWS's tools give it ...
_UUID_SHAPED = re.compile(r"[A-Za-z0-9]{8}-[A-Za-z0-9]{4}-[A-Za-z0-9]{4}-[A-Za-z0-9]{4}-[A-Za-z0-9]{12}")
# ... or its 32 hex digits alone as a program writes uuid4().hex (in one case: a random key's mixed case is no hex a
# program prints), only under a secret's id: under a credential's name it is an Azure OpenAI or Cognitive Services
# key's very shape.
_UUID_HEX = re.compile(r"[0-9a-f]{32}|[0-9A-F]{32}")
# A lower-case word ending in a number of four digits at most, as people number a server or a replica
# ("sqlserver1", "postgres01"), which the randomness test takes by its letters alone. Not a capitalised word: the
# commonest password's shape ("Password123", "Summer2024"); nor a long one ("xkmqplvnrtbwzyhgcdfjsa1234").
_NUMBERED = re.compile(r"(?<![A-Za-z0-9])([a-z]{1,15})[0-9]{1,4}(?![A-Za-z0-9])")
_PASSWORD_WORDS = ("pass", "secret", "admin", "letmein", "welcome", "qwerty")
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
    ``op://`` reference, or a path (``prod/db``, ``prod/AppBeta/MySql``, ``kv/prod/db-2``, Parameter Store's
    ``/prod/db``) of words as people name a secret (:func:`_names_segment`), or an AWS Systems Manager parameter's
    ARN, whose name is such a path. A reference's parts a person names (an ARN's JSON key and version
    stage, a Google or an Azure secret's name, a 1Password field) take any name the store allows
    (``ConnectionStrings--DefaultConnection``, ``:clientID::``, ``op://Private/GitHub/2fa``) but one that looks
    like a secret's value (:func:`_holds_secret_value`): ``op://vault/item/hunter2SECRET9f8e`` holds the secret
    where its field's name goes. An ARN's secret name is
    not (AWS ends it with six random characters, and one AWS makes starts "rds!"). A single word is not one: HashiCorp Vault's
    AppRole ``secret_id`` is a credential (a UUID, or any string given), and a password may read as a word or a
    name (``letmein``, ``correct-horse-battery``)."""
    reference = _store_reference(value)
    if reference is not None:
        return not any(part and _holds_secret_value(part) and not _an_id(kind, part)
                       for kind, part in reference.groupdict().items())
    parameter = _SSM_PARAMETER.fullmatch(value)
    path = parameter.group(1) if parameter is not None else value
    segments = path.removeprefix("/").split("/")
    return (len(segments) > 1 and _SECRET_PATH.fullmatch(path) is not None
            and known_shape(path) is None and all(map(_names_segment, segments)))


def _store_reference(value: str) -> re.Match[str] | None:
    """The match of the secret store's reference ``value`` is whole (:data:`_SECRET_STORE_NAMES`), if any."""
    return next(filter(None, (pattern.fullmatch(value) for pattern in _SECRET_STORE_NAMES)), None)


def _an_id(kind: str, part: str) -> bool:
    """Whether a reference's part is an id its store makes: a 1Password field's, or a version's after an ARN in the
    UUID's shape AWS's tools give it, with or without its dashes (another ClientRequestToken is judged as any part
    is). Only under a secret's id: under a credential's name, 32 hex digits are an Azure OpenAI key's shape."""
    version = _UUID_SHAPED.fullmatch(part) is not None or _UUID_HEX.fullmatch(part) is not None
    return (kind == "field" and _ONE_PASSWORD_ID.fullmatch(part) is not None) or (kind == "version" and version)


def _holds_secret_value(part: str) -> bool:
    """Whether a reference's part a person names (a 1Password field, an ARN's JSON key or stage, a Google or an Azure
    secret's name) looks like a secret's value rather than a name: a known key's shape, a random-looking word (24
    characters or more, or 8 or more mixing letters and digits: :func:`~config_registry.placeholders.reads_as_name`)
    or a password written with digits for letters (``P4ss``)."""
    lowered = part.lower()
    leet = lowered.translate(_LEET)
    spelled = any(word in leet and word not in lowered for word in _PASSWORD_WORDS)
    # A name numbered as people number them ("sqlserver1-password", "postgres01", "office365") is not random.
    unnumbered = _NUMBERED.sub(lambda m: m.group(1), part)
    return known_shape(part) is not None or not reads_as_name(unnumbered) or spelled


def _names_segment(segment: str) -> bool:
    """A segment of a secret's path as people name one: words split at ``-``, ``_`` and ``.``, each in lower or
    upper case or camel case (``prod``, ``CRM``, ``AppBeta``, ``dbPassword``), two letters at least or one and a
    digit (``v2``, ``app1``), or a number after the first (``db-2``). A random key's piece (``ecXHJ``,
    ``SMyWVeCSo``), a password's (``P4ss``, ``Pa55``, ``s3cr3t``) or a bare number (``hunter/2``) is none."""
    first, *rest = _PATH_WORD_SEPARATORS.split(segment)
    return _NAME_WORD.fullmatch(first) is not None and all(
        _NAME_WORD.fullmatch(word) is not None or (word.isdigit() and len(word) <= 4) for word in rest)
