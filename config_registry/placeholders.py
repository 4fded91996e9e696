"""Values that stand where a credential would without being one: the dummy keys local model servers ask
for, and the path of the file a credential is read from.

    from config_registry.placeholders import is_dummy_key, is_relative_file_path

    is_dummy_key("EMPTY")                          # True: vLLM's documented placeholder
    is_dummy_key("sk-ollama-8f3a9c2b7d1e4f5a")     # False: a real-looking key that merely contains one
    is_relative_file_path("secrets/gcp.json")      # True
    is_relative_file_path("hunter2-Xk9!pq")        # False

Nothing here reads a name: :mod:`config_registry.credentials` decides under which names these stand in.
"""

from __future__ import annotations

import re

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

# A relative path: segments of path characters, at least two of them or one with a file extension
# ("secrets/gcp.json", "run/pw", "pw.txt"), leading "./" or "../" allowed; no spaces or shell metacharacters.
_RELATIVE_PATH = re.compile(
    r"(?:\.{1,2}/)*[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+/?|"
    r"(?:\.{1,2}/)*[A-Za-z0-9_-][A-Za-z0-9_.-]*\.(?:[a-z][a-z0-9]{0,9}|[A-Z][A-Z0-9]{0,9})"  # one case: not "Xk9"
)
# What a path's words are split at: its separators and the punctuation of file names.
_PATH_PUNCTUATION = re.compile(r"[/._-]+")


def is_dummy_key(value: str) -> bool:
    """Whether ``value`` is, whole, one of the :data:`DUMMY_KEYS` a local model server documents."""
    return value.strip().lower() in DUMMY_KEYS


def is_relative_file_path(value: str) -> bool:
    """Whether ``value`` reads as a relative file path (:data:`_RELATIVE_PATH`) none of whose words looks like
    a random token (8 or more characters mixing letters and digits, or 24 or more, as a key or a password
    has), so that a password or a base64 key with a slash or a dot in it is no path."""
    if not _RELATIVE_PATH.fullmatch(value):
        return False
    return not any(_looks_random(word) for word in _PATH_PUNCTUATION.split(value))


def _looks_random(word: str) -> bool:
    """A word of a password or a key rather than of a file name: "prod", "gcp", "2024" and "v1" are not."""
    mixed = any(c.isdigit() for c in word) and any(c.isalpha() for c in word)
    return len(word) >= 24 or (len(word) >= 8 and mixed)
