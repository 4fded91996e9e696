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
# unless "key" follows an identifier's word or "token" a count's (below). Not "pepper": alone it is a recipe's or a
# menu's word ("salt_and_pepper"); a password hash's is its key ("PEPPER_KEY", _CIPHERS) ...
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
# "XAPIKEY", "ENCRYPTIONKEY", "HMACKEY", sshpass's "SSHPASS"), or it has the word "apikey" anywhere
# ("apikey_header"). Names are split into words at '-', '_', '.', spaces and camelCase boundaries ("XApiKey": x,
# api, key); trailing numbers are dropped. No other word ending in "pass" is one: git's "GIT_ASKPASS" names a
# program, "bypass" a setting; nor in "key" ("MONKEY", "hotkey", "WHISKEY").
_CREDENTIAL_COMPOUNDS = (*(
    compound + plural
    for compound in (
        "apikey", "accesskey", "privatekey", "authkey", "signingkey", "sessionkey", "accesstoken", "authtoken",
        "apitoken", "bearertoken", "idtoken", "refreshtoken", "sessiontoken", "securitytoken", "csrftoken",
        "xsrftoken", "oauthtoken", "jwttoken", "bearer", "authorization",
        # an application's own key, as _OWN_SECRETS_WORDS and _SIGNERS name it written apart ("MASTER_KEY", "AES_KEY"),
        # and a licence's or a subscription's; not an SSH key's nor an app's, which as one word name public keys,
        # paths and key ids (Proxmox's "sshkeys") and a public app id (the "appkey" of push and speech SDKs)
        "masterkey", "sharedkey", "jwtkey", "csrfkey", "xsrfkey", "cookiekey", "encryptionkey", "encryptkey",
        "decryptionkey", "decryptkey", "cryptokey", "cipherkey", "hmackey", "fernetkey", "aeskey", "saltkey",
        "pepperkey", "signaturekey", "licensekey", "subscriptionkey",
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
# A capital before a lower-case word starts it ("HTMLParser": html, parser), but for a key's or a token's word after
# an acronym ("HMACkey", "APIkey", "JWTtoken": hmac, key), which would leave the acronym's last letter on it.
_KEY_AFTER_CAPITALS = r"(?:key|token)s?(?![a-z])"
_WORD_BOUNDARY = re.compile(rf"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z](?!{_KEY_AFTER_CAPITALS})[a-z])"
                            rf"|(?<=[A-Z])(?={_KEY_AFTER_CAPITALS})")
# A number glued to a key's word after another ("API_KEY2", "LicenseKey2") or to a key's compound ("ENCRYPTIONKEY256"),
# dropped as a separate one is; not to another word, of which it may be part ("token0", "Token2022", "OAuth2",
# "Auth0", "key1" alone, "PASSWORD_CMD2").
_GLUED_NUMBER = re.compile(r"(?<=[a-z])[0-9]+$")
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
# ... or whose last word is "key" after one of these ("api_key", "access_key", "private_key", "hmac_key",
# "fernet_key"): after any other word a key names what it is kept under ("memory_key", "s3_key", "env_key",
# "input_key", "jwt_key", "salt_key", "signature_key" as a JSON key's or a header's name) or a path ("ssh_key").
_CODE_KEY_KINDS = frozenset({
    "api", "access", "private", "secret", "signing", "auth", "encryption", "master", "client", "license",
    "subscription", "encrypt", "decryption", "decrypt", "hmac", "fernet", "aes",
})
# The last words of a name for a key or a token, which a dummy key may be given (credentials.holds_no_credential):
# a local model server's dummy stands in for any key or token ("OPENAI_API_KEY", "VLLM_SERVER_KEY", "LOCAL_TOKEN",
# "GITHUB_TOKEN", "X-Token"), so that configs written for one keep working, but for an application's own (below).
_KEY_OR_TOKEN_WORDS = ("key", "keys", "token", "tokens")
# A key or token is an application's own, where a real secret goes whatever it looks like, when the word that says
# what it is (the one before, or the start of a word it ends: "SECRETKEY") ends with one of these: Django's
# SECRET_KEY, Laravel's APP_KEY, a private, master, shared or SSH key ...
_OWN_SECRETS_WORDS = ("secret", "secrets", "private", "master", "shared", "ssh", "django", "flask", "rails", "app")
# ... or when one of these words, whole (plural too), comes anywhere before it with no model service's name after it:
# what an application issues and signs (its sessions, cookies, JWTs, CSRF and refresh tokens), any key after which
# is what it signs them with ("JWT_API_ACCESS_KEY", "SESSION_AUTH_TOKEN"; "DESIGNING_API_KEY" is no signer's,
# "SESSION_OPENAI_API_KEY" is a model service's) ...
_ISSUED = frozenset({"jwt", "session", "cookie", "csrf", "xsrf", "refresh"})
# ... or what it signs, encrypts or hashes with ("FERNET_KEY", "AES_KEY", "CIPHER_KEY", "SALT_KEY", "SIGNATURE_KEY"),
# unless an API's key follows: "ENCRYPTION_API_KEY" is an encryption service's key, as any API's is. A JWT's token is
# a service's token written as a JWT ("JWT_TOKEN", "JWT_ACCESS_TOKEN").
_CIPHERS = frozenset({
    "hmac", "signing", "signature", "encryption", "encrypt", "decryption", "decrypt", "crypto", "cipher", "fernet",
    "aes", "salt", "pepper",
})
_SIGNERS = _ISSUED | _CIPHERS
# A key's or a token's word saying whose service it is, which leaves the words before it to say whose key it is.
_SERVICE_KEY_WORDS = ("api", "access", "auth", "subscription")
# A secret key after a model service's or a local model server's name (joined, since one may be split into words:
# "OPEN_AI", "HUGGING_FACE", "LM_STUDIO") is that service's key, which a local server's dummy stands in for
# ("OPENAI_SECRET_KEY"), and so is a key after a signer's word with one between ("SESSION_LLM_KEY").
_MODEL_SERVICES = (
    "openai", "anthropic", "azure", "mistral", "mistralai", "groq", "gemini", "cohere", "together", "togetherai",
    "deepseek", "huggingface", "huggingfacehub", "hf", "fireworks", "fireworksai", "perplexity", "openrouter", "xai",
    "ollama", "vllm", "litellm", "lmstudio", "llamacpp", "llamafile", "localai", "tgi", "tei", "sglang", "gpt4all",
    "kobold", "koboldcpp", "llm", "gpt", "model", "embedding", "inference",
)


def name_words(name: str) -> list[str]:
    """``name``'s words in lower case, split at separators and camelCase boundaries, trailing numbers dropped (one
    glued to a key's last word too: ``API_KEY2``, ``ENCRYPTIONKEY256``; :data:`_GLUED_NUMBER`)."""
    words = [w.lower() for w in _WORD_SEPARATOR.split(_WORD_BOUNDARY.sub("_", name)) if w]
    while words and words[-1].isdigit():
        words.pop()
    if words and (unglued := _GLUED_NUMBER.sub("", words[-1])) != words[-1] and (
            (unglued in ("key", "keys") and len(words) > 1)
            or (unglued.endswith(_CREDENTIAL_COMPOUNDS) and unglued.endswith(("key", "keys")))):
        words[-1] = unglued
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
    """Whether a name says it holds a key or a token a local model server's dummy key may stand in for
    (``api_key``, ``OPENAI_API_KEY``, ``azure_ad_token``, ``VLLM_SERVER_KEY``, ``XAPIKEY``, ``OPENAI_SECRET_KEY``,
    ``ENCRYPTION_API_KEY``, ``JWT_TOKEN``), rather than a password, a secret or an application's own key or token (``SECRET_KEY``, ``FERNET_KEY``,
    ``JWT_ACCESS_KEY``, ``SESSION_AUTH_TOKEN``: :data:`_OWN_SECRETS_WORDS`, :data:`_SIGNERS`), where a
    dummy-looking value is still the slot a real secret goes in."""
    words = name_words(name)
    if not words or not words[-1].endswith(_KEY_OR_TOKEN_WORDS):
        return False
    # The words that say what the key or token is, the start of a compound among them ("XAPIKEY": "xapi").
    compound = words[-1].removesuffix("s").removesuffix("key").removesuffix("token")
    what = [*words[:-1], compound] if compound else words[:-1]
    if not what:
        return True
    token = not words[-1].endswith(("key", "keys"))
    return not (_names_own_secret(what, glued=bool(compound), token=token) or _signed_with(what, token=token))


def _names_own_secret(what: list[str], *, glued: bool, token: bool) -> bool:
    """Whether the word that says what a key or token is (the last of ``what``, ``glued`` to it: ``SECRETKEY``)
    says it is an application's own (:data:`_OWN_SECRETS_WORDS`, a signer's too: ``--jwtsigning-key``; a JWT's
    ``token`` is no signer's): a secret key but a model service's (``OPENAI_SECRET_KEY``)."""
    qualifier = what[-1]
    if qualifier.endswith(_SERVICE_KEY_WORDS) or _names_model_service(what):
        return False
    if qualifier.endswith(("secret", "secrets")):
        return not _names_model_service([*what[:-1], qualifier.removesuffix("s").removesuffix("secret")])
    own = (*_OWN_SECRETS_WORDS, *(_SIGNERS - {"jwt"} if token else _SIGNERS))
    return qualifier.endswith(own) or (glued and qualifier.startswith(own))


def _names_model_service(words: list[str]) -> bool:
    """Whether ``words`` end with a model service's name, joined (``["hugging", "face"]``), plural too."""
    joined = "".join(words)
    return joined.endswith(_MODEL_SERVICES) or joined.removesuffix("s").endswith(_MODEL_SERVICES)


def _signed_with(what: list[str], *, token: bool) -> bool:
    """Whether the words before a key or a token say an application signs its tokens, keeps its sessions or encrypts
    with it (:data:`_SIGNERS`): a signer's word, whole (plural too, a service's word glued after it: ``JWTACCESS``),
    with no model service's name after it, nor an API's word after a cipher's (:data:`_CIPHERS`)."""
    api_after = False
    for at in range(len(what) - 1, -1, -1):
        service = next((w for w in _SERVICE_KEY_WORDS if what[at].endswith(w)), "")
        api_after = api_after or service == "api"
        word = what[at].removesuffix(service)
        word = word if word in _SIGNERS else word.removesuffix("s")  # "COOKIES_API_KEY"
        if word in _SIGNERS and not (token and word == "jwt") and not (api_after and word in _CIPHERS):
            return True
        if _names_model_service([*what[:at], word]):
            return False
    return False
