"""What a name says of its value: a credential (a field, header, variable or flag that means one), a reference
to one, or a command line, so that :mod:`config_registry.credentials` and :mod:`config_registry.source` read
names one way.

    from config_registry.names import holds_command_line, is_secret_field

    is_secret_field("openaiApiKey")            # True; "max_tokens", "cache_key" and "TOKEN_URL" are not
    holds_command_line("DB_PASSWORD_COMMAND")  # True: its value is read as a command line

Nothing here reads a value.
"""

from __future__ import annotations

import re

# A config key, HTTP header, environment variable or connection-string part names a credential when, case
# and separators ignored, one of these is anywhere in it ("clientsecret", "DBPASSWORD", "webhook_secret_b64") ...
_CREDENTIAL_TEXT = ("secret", "password", "passwd", "passphrase", "credential")
# ... or its last word is one of these ("api_key", "X-Auth-Token", "Cookie", "X-Hub-Signature-256", "DB_PWD"),
# unless "key" follows an identifier's word or "token" a count's (below) ...
_CREDENTIAL_LAST = frozenset({
    "key", "keys", "apikey", "apikeys", "token", "tokens", "pwd", "auth", "authorization", "bearer", "cookie",
    "cookies", "signature", "session",
})
# ... or its last word is "pass" after another word ("DB_PASS", rclone's "RCLONE_CONFIG_PASS", RabbitMQ's
# "RABBITMQ_DEFAULT_PASS"), unless that word is a count's or an order's ("first_pass", "num_pass"); alone it
# may be a number (ffmpeg's "-pass 1") ...
_PASS_NOT_CREDENTIAL = frozenset({
    "first", "second", "third", "final", "last", "next", "single", "multi", "one", "two", "num", "number", "max",
    "min", "count", "each", "per",
})
# ... or its last word ends with one of these compounds written as one word ("x-accesstoken", "privatekey",
# "XAPIKEY", sshpass's "SSHPASS"), or it has the word "apikey" anywhere ("apikey_header"). Names are split
# into words at '-', '_', '.', spaces and camelCase boundaries ("XApiKey": x, api, key); trailing numbers are
# dropped. No other word ending in "pass" is one: git's "GIT_ASKPASS" names a program, "bypass" a setting.
_CREDENTIAL_COMPOUNDS = (*(
    compound + plural
    for compound in (
        "apikey", "accesskey", "privatekey", "authkey", "signingkey", "sessionkey", "accesstoken", "authtoken",
        "apitoken", "bearertoken", "idtoken", "refreshtoken", "sessiontoken", "securitytoken", "csrftoken",
        "xsrftoken", "oauthtoken", "bearer", "authorization",
    )
    for plural in ("", "s")
), "sshpass")
# After these words "key" names an identifier ("cache_key", "public_key", "sort_key") ...
_IDENTIFIER_KEY = frozenset({
    "public", "cache", "sort", "primary", "partition", "foreign", "idempotency", "dedup", "routing", "lookup",
    "index", "group", "row", "shard", "object", "state", "result", "message", "map", "dict", "field", "column",
})
# ... and "token" a count, a limit or a model's special token ("max_tokens", "token_limit" ends otherwise,
# "max_total_token", "eos_token", "stop_tokens").
_TOKEN_NOT_CREDENTIAL = frozenset({
    "max", "min", "total", "num", "number", "count", "limit", "budget", "usage", "prompt", "completion",
    "input", "output", "reasoning", "remaining", "cached", "stop", "eos", "bos", "pad", "unk", "sep", "cls",
    "mask", "special", "start", "end",
})
_WORD_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD_SEPARATOR = re.compile(r"[^A-Za-z0-9]+")
# A name whose last word says its value names, locates or describes a credential rather than holding it is a
# reference, not a credential's name: "PASSWORD_PROMPT", "TOKEN_URL", "SECRET_NAME" (a secret store's name
# for it), "VAULT_SECRET_PATH", "API_KEY_ENV". Its value is still read for a credential's shape. Two words
# after a credential's name leave it one, since the value may be the secret: a URL that "secret" says is one
# ("CALENDAR_SECRET_URL", where "TOKEN_URL" is the endpoint that serves a token), and a header
# ("API_KEY_HEADER", "PASSWORD_HEADER"), a reference only when given a header's name rather than its value
# (credentials.is_reference_setting). A name that says it holds a command line ("PASSWORD_COMMAND") is read
# as one (_COMMAND_NAMES).
_REFERENCE_WORDS = frozenset({
    "prompt", "url", "uri", "name", "path", "label", "header", "field", "env", "var", "variable", "hint",
    "placeholder",
})
# An environment variable whose name's last word says it holds a command line ("CMD", "INIT_COMMAND",
# "SETUP_SCRIPT"): its value is read as a shell string, as an MCP server's "-c" argument is.
_COMMAND_NAMES = frozenset({"cmd", "cmdline", "command", "commands", "commandline", "script", "exec", "entrypoint"})
_NOT_A_CREDENTIALS_NAME = _REFERENCE_WORDS | _COMMAND_NAMES
_HEADER_WORDS = frozenset({"header", "headers"})
# In code, where a name is a variable's, a parameter's or a dict key's, only a name whose last word is one of
# these holds a credential ("password", "db_passwd", "client_secret", "auth_token", "credentials") ...
_CODE_CREDENTIAL_LAST = frozenset({
    "password", "passwords", "passwd", "passphrase", "pwd", "pass", "secret", "secrets", "token", "tokens",
    "credential", "credentials", "apikey", "apikeys",
})
# ... or whose last word is "key" after one of these ("api_key", "access_key", "private_key"): after any other
# word a key names what it is kept under ("memory_key", "s3_key", "env_key", "input_key").
_CODE_KEY_KINDS = frozenset({
    "api", "access", "private", "secret", "signing", "auth", "encryption", "master", "client", "license",
    "subscription",
})
# The last words of a name for a key or a token, which a dummy key may be given (credentials.holds_no_credential).
_KEY_OR_TOKEN_WORDS = ("key", "keys", "token", "tokens")
# ... unless the word that says what it is (the one before, or the start of the last, a compound's end too)
# says it is an application's own secret, never a model server's key: Django's SECRET_KEY, a JWT's signing or
# refresh token, an encryption, private, master, shared or SSH key, a session token, Laravel's APP_KEY; an
# API's or an access key is a key whatever the words before ("APP_OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY").
_OWN_SECRETS_WORDS = (
    "secret", "secrets", "private", "signing", "encryption", "master", "jwt", "hmac", "session", "cookie", "csrf",
    "django", "flask", "rails", "app", "refresh", "shared", "ssh",
)
_SERVICE_KEY_WORDS = ("api", "access")
# ... but an access or API key after a word for what an application signs or keeps its sessions with is one of its
# own ("JWT_ACCESS_KEY", "SESSION_API_KEY"): the key that signs the tokens, never a model server's.
_TOKEN_SIGNERS = ("jwt", "hmac", "session", "cookie", "csrf", "signing", "refresh")
# A secret key after a model service's name is that service's key ("OPENAI_SECRET_KEY", "AZURE_OPENAI_SECRET_KEY"),
# which a local server's dummy stands in for, where an application's ("DJANGO_SECRET_KEY", "SECRET_KEY") is its own.
_MODEL_SERVICES = (
    "openai", "anthropic", "azure", "mistral", "mistralai", "groq", "gemini", "cohere", "together", "togetherai",
    "deepseek", "ollama", "vllm", "litellm", "huggingface", "hf", "fireworks", "fireworksai", "perplexity",
    "openrouter", "xai", "llm", "gpt",
)


def name_words(name: str) -> list[str]:
    """``name``'s words in lower case, split at separators and camelCase boundaries, trailing numbers dropped."""
    words = [w.lower() for w in _WORD_SEPARATOR.split(_WORD_BOUNDARY.sub("_", name)) if w]
    while words and words[-1].isdigit():
        words.pop()
    return words


def is_secret_field(key: str) -> bool:
    """True for names that mean a credential: config keys (``api_key``, ``azure_ad_token``, ``openaiApiKey``,
    ``clientsecret``), HTTP headers (``Authorization``, ``x-functions-key``, ``X-Auth-Key``, ``x-accesstoken``,
    ``Cookie``), environment variables (``DB_PWD``, ``DBPASSWORD``) and connection-string parts
    (``AccountKey``), also those the tools that read a password from the environment name (``SSHPASS``,
    ``RCLONE_CONFIG_PASS``, ``MYSQL_PWD``, ``REDISCLI_AUTH``). Counts and limits (``max_tokens``,
    ``token_limit``, ``first_pass``), identifiers (``cache_key``, ``public_key``, ``key_id``) and where a secret is
    read from (``SSHPASS_FILE``, ``PGPASSFILE``, ``GIT_ASKPASS``) are not, nor is a reference whose last word
    says what it holds is not the credential (``PASSWORD_PROMPT``, ``TOKEN_URL``, ``SECRET_NAME``,
    ``PASSWORD_COMMAND``: :data:`_NOT_A_CREDENTIALS_NAME`); a ``SECRET_URL`` and a credential's ``_HEADER``
    are (:data:`_REFERENCE_WORDS`)."""
    words = name_words(key)
    if words[-1:] in (["url"], ["uri"]) and words[-2:-1] in (["secret"], ["secrets"]):
        return True  # "CALENDAR_SECRET_URL": "secret" says what the URL is; "TOKEN_URL" says what it serves
    if len(words) > 1 and words[-1] in _HEADER_WORDS:
        return _names_credential(words[:-1])  # a header name or line; the value says which (credentials.py)
    if not words or words[-1] in _NOT_A_CREDENTIALS_NAME:
        return False
    return _names_credential(words)


def _names_credential(words: list[str]) -> bool:
    if any(text in "".join(words) for text in _CREDENTIAL_TEXT) or "apikey" in words:
        return True
    last, before = words[-1], set(words[:-1])
    if last == "pass":
        return bool(before) and words[-2] not in _PASS_NOT_CREDENTIAL
    if last not in _CREDENTIAL_LAST:
        return last.endswith(_CREDENTIAL_COMPOUNDS)
    if last in ("key", "keys"):
        return not before & _IDENTIFIER_KEY
    if last in ("token", "tokens"):
        return not before & _TOKEN_NOT_CREDENTIAL
    return True


def holds_command_line(name: str) -> bool:
    """Whether the name's last word says its value is a command line (``CMD``, ``PRE_START_COMMAND``,
    ``SETUP_SCRIPT``, ``DB_PASSWORD_COMMAND``), which is then read as one rather than as a credential."""
    words = name_words(name)
    return bool(words) and words[-1] in _COMMAND_NAMES


def names_credential_in_code(name: str) -> bool:
    """Whether a lower- or mixed-case name in code names a credential: one :func:`is_secret_field` says does,
    whose last word says it holds one (``password``, ``client_secret``, ``auth_token``, ``api_key``,
    ``privateKey``), not a name that says what the credential's value is kept under or described by
    (``memory_key``, ``password_hash``, ``password_policy``, ``csrf_cookie``, ``secret_type``)."""
    words = name_words(name)
    if not words or not is_secret_field(name):
        return False
    if words[-1] in ("key", "keys"):
        return len(words) > 1 and words[-2] in _CODE_KEY_KINDS
    return words[-1] in _CODE_CREDENTIAL_LAST or words[-1].endswith(_CREDENTIAL_COMPOUNDS)


def holds_secret_command(name: str) -> bool:
    """Whether the name says its value is the command line that gives a credential (``DB_PASSWORD_CMD``,
    ``secret_script``, ``--password-command``): a command name after a credential's, whose command prints
    the secret, so an ``echo`` of a literal there is the secret itself."""
    words = name_words(name)
    return len(words) > 1 and words[-1] in _COMMAND_NAMES and _names_credential(words[:-1])


def names_key_or_token(name: str) -> bool:
    """Whether a name's last word says it holds a key or a token (``api_key``, ``OPENAI_API_KEY``, ``apiKey``,
    ``XAPIKEY``, Ollama's ``ANTHROPIC_AUTH_TOKEN``) rather than a password or a secret: what a local model
    server's dummy key stands in for, where a dummy-looking password is still a password, and so is an
    application's own secret key (``SECRET_KEY``, ``JWT_REFRESH_TOKEN``, ``JWT_ACCESS_KEY``: :data:`_OWN_SECRETS_WORDS`,
    :data:`_TOKEN_SIGNERS`), unless a model service's name says whose it is (``OPENAI_SECRET_KEY``)."""
    words = name_words(name)
    if not words or not words[-1].endswith(_KEY_OR_TOKEN_WORDS):
        return False
    # What the key or token is: the word before it ("OPENAI_API_KEY"), or the start of the word it ends ("XAPIKEY",
    # "SECRETKEY", "jwtsecretkey").
    compound = words[-1].removesuffix("s").removesuffix("key").removesuffix("token")
    qualifier = compound or (words[-2] if len(words) > 1 else "")
    # Whose it is: the start of a qualifier written as one word ("jwtaccess"), else the word before the qualifier.
    before = words[-2 if compound else -3] if len(words) > (1 if compound else 2) else ""
    if qualifier.endswith(_SERVICE_KEY_WORDS):
        owner = (qualifier.removesuffix("access").removesuffix("api") or before).removesuffix("s")
        return not (words[-1].endswith(("key", "keys")) and owner.endswith(_TOKEN_SIGNERS))
    # A service's name may be split into words ("OpenAI", "HUGGING_FACE"): the words before "secret", joined.
    service = "".join(words[:-1] if compound else words[:-2]) + qualifier.removesuffix("secret")
    if qualifier.endswith("secret") and service.endswith(_MODEL_SERVICES):
        return True
    # "DJANGOSECRET_KEY", "jwtsecretkey": a compound ends with what it is; "sessiontoken" may start with it.
    return not (qualifier.endswith(_OWN_SECRETS_WORDS) or compound.startswith(_OWN_SECRETS_WORDS))
