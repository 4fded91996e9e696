"""Values that stand where a credential would without being one: the dummy keys local model servers ask
for.

    from config_registry.placeholders import is_dummy_key

    is_dummy_key("EMPTY")                          # True: vLLM's documented placeholder
    is_dummy_key("sk-ollama-8f3a9c2b7d1e4f5a")     # False: a real-looking key that merely contains one

Nothing here reads a name: :mod:`config_registry.credentials` decides under which names these stand in.
"""

from __future__ import annotations

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


def is_dummy_key(value: str) -> bool:
    """Whether ``value`` is, whole, one of the :data:`DUMMY_KEYS` a local model server documents."""
    return value.strip().lower() in DUMMY_KEYS

