"""What a secret store names a secret by, given where a secret's id, ARN or ref goes (``SECRET_ID``, AWS's
``--secret-id``), so that :mod:`config_registry.credentials` stores it as a reference rather than refusing it as
the secret.

    from config_registry.stores import names_secrets_id, names_store_reference, names_stored_secret

    names_secrets_id("DB_SECRET_ARN")          # True
    names_store_reference("op://dev/openai/credential")  # True: under a credential's name too
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
# What a secret store names a secret by: an AWS Secrets Manager ARN, with ECS's ":json-key:version-stage:version-id"
# after it (a version's id is the ClientRequestToken it was put with, 32 to 64 characters: a UUID as AWS's own tools
# make it); a Google Secret Manager resource name; an Azure Key Vault secret's URI; a 1Password op:// reference
# without spaces (vault, item and section may be ids: 1Password's SDKs take only those). Its groups are the parts a
# person names, in whatever words the store allows ("ConnectionStrings--DefaultConnection", "OPENAI__API_KEY",
# "x509-cert", "2fa", ":clientID::"): a secret put in one is the secret itself, told by its look
# (_holds_secret_value), not by how a path's words are written. The other groups (an ARN's partition, region and
# secret name, a Google project and location, a Key Vault's name and version, a 1Password vault, item and section)
# are judged only under a credential's name (names_store_reference).
# The numbers a store writes, in ASCII digits (\d and str.isdigit take any script's): a Google project's number
# (12 digits, as Google gives them), and a number of four digits at most after a part's first word (us-east-1).
_PROJECT_NUMBER = re.compile(r"[0-9]{6,13}")
_SHORT_NUMBER = re.compile(r"[0-9]{1,4}")
_SECRET_STORE_NAMES = (
    re.compile(r"arn:(?P<partition>aws[a-z-]*):secretsmanager:(?P<region>[a-z0-9-]+):[0-9]{12}:secret:"
               r"(?P<arn_name>[A-Za-z0-9/_+=.@!-]+)"
               r"(?::(?P<key>[A-Za-z0-9_.-]*)(?::(?P<stage>[A-Za-z0-9_.-]*)(?::(?P<version>[A-Za-z0-9_-]{32,64})?)?)?)?"),
    re.compile(r"projects/(?P<project>[A-Za-z0-9_-]+)(?:/locations/(?P<location>[a-z0-9-]+))?"
               r"/secrets/(?P<name>[A-Za-z0-9_-]+)(?:/versions/(?:latest|[0-9]{1,9}))?"),
    re.compile(r"https://(?P<key_vault>[a-z0-9-]+)\.vault\.(?:azure\.net|usgovcloudapi\.net|azure\.cn)"
               r"/secrets/(?P<name>[A-Za-z0-9-]+)(?:/(?P<vault_version>[0-9a-f]{32}))?/?"),
    re.compile(r"op://(?P<vault>[A-Za-z0-9_.-]+)/(?P<item>[A-Za-z0-9_.-]+)(?:/(?P<section>[A-Za-z0-9_.-]+))?"
               r"/(?P<field>[A-Za-z0-9_.-]+)"),
)
# The groups above a person names, the only ones judged under a secret's id (names_stored_secret); under a
# credential's name every group is (names_store_reference).
_NAMED_PARTS = frozenset({"key", "stage", "version", "name", "field"})
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
_NAME_WORD = re.compile(r"(?=[A-Za-z]{2}|[A-Za-z][0-9])(?:[a-z]+|[A-Z]+|[A-Z]?[a-z]+(?:[A-Z][a-z]+)*)[0-9]?")


# Under a credential's name, a reference's every part is read a word at a time (split at runs of "-", "_" and ".",
# so .NET's "AzureOpenAI--ApiKey" and "OPENAI__API_KEY" too): a word is lower or upper case, or camel case of
# capitalised words of three letters at least and the acronyms names of credentials use ("OpenAIApiKey",
# "SQLPassword", "clientID"), one digit at most after it ("v2", "central1"). Taking any run of capitals as an
# acronym would let four times as many random keys' pieces read as names ("TADxaASBMujr"), and a capitalised word of
# two letters a random key's alternating case ("hUnTeRsEcReT", "AbCdEf"), which a bare path's _NAME_WORD takes.
_ACRONYMS = ("API", "AI", "ID", "DB", "SQL", "JWT", "AWS", "GCP", "AD", "KV", "URL", "URI", "SSH", "TLS", "SSL",
             "LLM", "GPT", "MCP", "PAT", "OTP", "IAM", "CRM", "RSA", "SAS", "RDS", "SA", "HF", "GH")
_ACRONYM = "|".join(sorted(_ACRONYMS, key=len, reverse=True))
_CREDENTIAL_NAME_WORD = re.compile(
    rf"(?:[A-Za-z](?=[0-9])|[A-Z]{{2,}}|(?:[a-z]{{2,}}|[A-Z][a-z]{{2,}}|(?:{_ACRONYM})(?=[A-Z][a-z]))"
    rf"(?:[A-Z][a-z]{{2,}}|(?:{_ACRONYM})(?![a-z]))*)[0-9]?")
_NAME_WORD_RUNS = re.compile(r"[-_.]+")
# The six random characters AWS ends a secret's name with in its ARN ("prod/openai-AbCdEf"), no name's words.
_ARN_SUFFIX = re.compile(r"-[A-Za-z0-9]{6}\Z")
_ARN_SECRET_NAME = re.compile(r"[A-Za-z0-9/_.-]+")  # under a credential's name, no symbol a password takes (@ ! + =)


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
    name a secret (:func:`_names_segment`). A reference's parts a person names (an ARN's JSON key and version
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
                       for kind, part in reference.groupdict().items() if kind in _NAMED_PARTS)
    segments = value.split("/")
    return (len(segments) > 1 and _SECRET_PATH.fullmatch(value) is not None and known_shape(value) is None
            and all(map(_names_segment, segments)))


def names_store_reference(value: str) -> bool:
    """Whether ``value``, given under a credential's name, is a secret store's reference that a runner replaces
    with the secret (1Password's ``op run``: ``OPENAI_API_KEY=op://dev/openai/credential``; ECS's ``valueFrom``),
    judged more strictly than under a secret's id (:func:`names_stored_secret`), since a random key is as likely
    there: no known key's shape in it, and every part that can carry text reads as a name
    (:func:`_names_reference_part`), an id a store makes included (a 1Password id, a version's), whose shape a
    random key has. Only the numbers a store puts there are taken as they are: an ARN's 12-digit account, a Google
    project's and a version's number."""
    reference = _store_reference(value)
    return reference is not None and known_shape(value) is None and all(
        _names_reference_part(kind, part) for kind, part in reference.groupdict().items() if part)


def is_store_reference(value: str) -> bool:
    """Whether ``value`` is written as a secret store's reference (:data:`_SECRET_STORE_NAMES`), whatever its parts."""
    return _store_reference(value.strip()) is not None


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
        _NAME_WORD.fullmatch(word) is not None or _SHORT_NUMBER.fullmatch(word) is not None for word in rest)


def _names_reference_part(kind: str, part: str) -> bool:
    """Whether a reference's part reads as a name under a credential's name: not a secret's value
    (:func:`_holds_secret_value`) and each word a name's (:data:`_CREDENTIAL_NAME_WORD`), a number of four digits at
    most after the first (``us-east-1``); an ARN's secret name a path's segment at a time, the six characters AWS
    ends it with read only for a password's look; a Google project's number as it is."""
    if kind == "project" and _PROJECT_NUMBER.fullmatch(part) is not None:
        return True
    if kind == "arn_name":
        name, suffix = _ARN_SUFFIX.sub("", part), part[-6:]
        # AWS's random suffix is read only for a password's look ("Pa55wd"): a name's words it has none of.
        return (known_shape(part) is None and _ARN_SECRET_NAME.fullmatch(name) is not None
                and (name == part or not _holds_secret_value(suffix))
                and all(_names_reference_part("segment", segment) for segment in name.split("/")))
    first, *rest = _NAME_WORD_RUNS.split(part)
    return not _holds_secret_value(part) and _CREDENTIAL_NAME_WORD.fullmatch(first) is not None and all(
        _CREDENTIAL_NAME_WORD.fullmatch(word) is not None or _SHORT_NUMBER.fullmatch(word) is not None for word in rest)
