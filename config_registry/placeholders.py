"""Values that stand where a credential would without being one: the dummy keys local model servers ask
for, the path of the file a credential is read from, and a value that leaves the secret out (a ``${VAR}``, a
``$(command)``, an example).

    from config_registry.placeholders import is_dummy_key, is_relative_file_path, left_out

    is_dummy_key("EMPTY")                          # True: vLLM's documented placeholder
    is_dummy_key("sk-ollama-8f3a9c2b7d1e4f5a")     # False: a real-looking key that merely contains one
    is_relative_file_path("secrets/gcp.json")      # True
    is_relative_file_path("Pa55.word")             # False: a password with a dot in it
    left_out("${DB_PASSWORD:?}")                   # True: the program expands it from its environment

Nothing here reads a name: :mod:`config_registry.credentials` decides under which names these stand in.
"""

from __future__ import annotations

import re

from config_registry.shell import words as shell_words

# The OpenAI client refuses to start without a key, so servers that check none document a value to give it.
# Each is accepted whole (case ignored), never as part of a longer value: "sk-ollama-8f3a..." is a key.
DUMMY_KEYS = frozenset({
    "empty",               # vLLM, SGLang, FastChat: api_key="EMPTY"
    "sk-no-key-required",  # llama.cpp's server and llamafile
    "ollama",              # Ollama: "required but ignored"
    "lm-studio",           # LM Studio
    "not-needed",          # examples for LM Studio and other local servers
    "-",                   # Hugging Face text-generation-inference
    "placeholder",         # AutoGen's own examples for a local OpenAI-compatible server
    "dummy",
    "none",
    "null",
    "unused",
    "no-key",
    "x",
})

# A relative path names its file by one of these extensions (case ignored): keys, certificates and keystores,
# and the text and config formats a secret is written in. Not "pass", "secret" or "password": "my.password"
# and "Hunter.Pass" are passwords as often as they are files.
FILE_EXTENSIONS = frozenset({
    "json", "pem", "key", "crt", "cer", "der", "p12", "pfx", "jks", "keystore",
    "txt", "env", "yaml", "yml", "toml", "ini", "conf", "cfg", "cnf", "pw",
})
# ... or is one of the dot-files that hold credentials by convention (case ignored).
DOT_FILES = frozenset({".pgpass", ".env", ".netrc", ".npmrc", ".pypirc", ".my.cnf", ".git-credentials", ".dockercfg"})
# A bare relative path (one that starts with "./" or "../" is read by :mod:`config_registry.credentials`):
# segments of path characters with no space, shell metacharacter or trailing slash.
_RELATIVE_PATH = re.compile(r"(?!\.{1,2}/)[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*")
# What a segment's words are split at: the punctuation of file names.
_WORD_PUNCTUATION = re.compile(r"[._-]+")

# A value that leaves the secret out: one left for the program to expand from its own environment
# (``${AUTH_TOKEN}``, cmd's ``%AUTH_TOKEN%`` and ``!AUTH_TOKEN!``, PowerShell's ``$env:AUTH_TOKEN``) ...
_AUTHORIZATION_SCHEME = re.compile(r"(?:bearer|basic|token)\s+", re.IGNORECASE)
_PLACEHOLDER = re.compile(
    r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%[A-Za-z_][A-Za-z0-9_]*%|![A-Za-z_][A-Za-z0-9_]*!|"
    r"(?i:\$env:)[A-Za-z_][A-Za-z0-9_]*"
)
# ... or a parameter code fills in when it runs: SQL's ("password_hash=?", "%s", "%(pw)s", ":pw", "$1") and
# Python's str.format ("PGPASSWORD={} psql") ...
_CODE_PARAMETER = re.compile(r"\?|%s|%\([A-Za-z_]\w*\)s|:[A-Za-z_]\w*|\$\d+|\{[A-Za-z_]?\w*\}")
# ... also with what the shell does when it is unset (``${DB_PASSWORD:?}``, ``${DB_PASSWORD:-}``): an error's
# message is no value, but a default is one, and must itself leave the secret out ...
_EXPANSION = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?\?[^{}]*|:?[-=+](.*))\}", re.DOTALL)
# ... or read by the shell when the command runs, a whole value ("PGPASSWORD=$(cat /run/secrets/pg)"), PowerShell's "(Get-Content C:\secrets\pg.txt)" or "(Get-Secret pg -AsPlainText)"), or
# written as an example of what goes there ("PGPASSWORD=...", "TOKEN=<your token>").
_EXAMPLE_VALUE = re.compile(
    r"\$\((?:[^()]|\([^()]*\))*\)|`[^`]*`|\.{3,}|\u2026|<[^<>]*>|"
    r"\(\s*(?i:get-content|gc|cat|type|get-secret|get-azkeyvaultsecret)\s[^();&|]*\)(?:\.Trim\(\))?",
    re.DOTALL,
)


def is_dummy_key(value: str) -> bool:
    """Whether ``value`` is, whole, one of the :data:`DUMMY_KEYS` a local model server documents."""
    return value.strip().lower() in DUMMY_KEYS


def is_relative_file_path(value: str) -> bool:
    """Whether ``value`` reads as a bare relative file path (:data:`_RELATIVE_PATH`, no leading "./"): one
    whose file has a known extension (:data:`FILE_EXTENSIONS`) or is a known dot-file (:data:`DOT_FILES`), no
    word of whose segments looks random (:func:`reads_as_name`). A password or a key with a slash or a dot in
    it is no path: "Pa55.word", "sDX5/J.iNCBk", "s3cr3t/x", "hunter/2"."""
    if _RELATIVE_PATH.fullmatch(value) is None:
        return False
    *folders, file = value.split("/")
    stem, dot, extension = file.rpartition(".")
    if file.lower() in DOT_FILES:
        return all(map(reads_as_name, folders))
    return bool(dot) and extension.lower() in FILE_EXTENSIONS and all(map(reads_as_name, [*folders, stem]))


def reads_as_name(segment: str) -> bool:
    """Whether no word of a path's segment looks random: 24 characters or more, or 8 or more mixing letters
    and digits ("hunter2Xk9", where "k8s", "v2" and "3f2a1b" are names)."""
    for word in _WORD_PUNCTUATION.split(segment):
        mixed = any(c.isdigit() for c in word) and any(c.isalpha() for c in word)
        if len(word) >= 24 or (len(word) >= 8 and mixed):
            return False
    return True


def left_out(value: str) -> bool:
    """Whether a value leaves the secret out: a ``${VAR}`` (``%VAR%``, ``$env:VAR``) the program expands from
    its environment, with no default or one that leaves it out in turn (``${VAR:?}``, ``${VAR:-$OTHER}``), a
    ``$(command)`` the shell runs, a parameter code fills in (SQL's ``?``), or an example of what goes there
    (``...``, ``<your token>``)."""
    scheme = _AUTHORIZATION_SCHEME.match(value)
    value = value[scheme.end():] if scheme else value
    expansion = _EXPANSION.fullmatch(value)
    if expansion is not None:
        return not expansion.group(1) or left_out(expansion.group(1))
    return any(pattern.fullmatch(value) for pattern in (_PLACEHOLDER, _CODE_PARAMETER, _EXAMPLE_VALUE))


def variable_left_out(value: str) -> bool:
    """Whether a variable's value leaves the secret out (:func:`left_out`), also when a command follows it
    in one argument that is a whole command line (``PGPASSWORD=${DB_PASSWORD:?} psql``), but not with text
    glued to it (``$(cat /x)pw``)."""
    first = shell_words(value)[:1]
    return left_out(value) or (bool(first) and first != [value] and value.startswith(first[0])
                               and left_out(first[0]))
