"""The shapes a credential is known by whatever its name: detect-secrets' regex detectors (AWS, GitHub, GitLab,
Slack, Stripe, JWTs, private-key blocks ...) and the few key shapes it lacks.

    from config_registry.shapes import known_shape

    known_shape("ghp_" + "a1B2" * 9)        # "GitHub Token"
    known_shape("sk-learn-compatible-model")  # None: a word, not a key

Nothing here reads a name: :mod:`config_registry.credentials` and :mod:`config_registry.stores` ask of a value.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
from typing import Any

# The key shapes detect-secrets does not know (its OpenAI detector knows only keys with the 'T3BlbkFJ' marker):
# OpenAI and Anthropic ``sk-``, Google ``AIza``, Hugging Face ``hf_``, GitHub's fine-grained tokens.
_KEY_SHAPE = re.compile(
    r"(?<![A-Za-z0-9_-])(sk-[A-Za-z0-9_-]{20,}|github_pat_[A-Za-z0-9_]{30,}|AIza[0-9A-Za-z_-]{35}|"
    r"hf_[A-Za-z0-9]{30,})"
)
# detect-secrets detectors left out: a public IP address in an endpoint is no secret.
_NOT_CREDENTIAL_DETECTORS = frozenset({"IPPublicDetector"})


def known_shape(value: str) -> str | None:
    """The kind of credential ``value`` holds by its shape (``"GitHub Token"``, ``"JSON Web Token"``,
    ``"Private Key"``, ``"API key"`` ...), or ``None``.

    The shapes are detect-secrets' regex detectors (its entropy and keyword detectors are made for source
    files: they flag ordinary prose and miss header names), plus the few key shapes it lacks.
    """
    for detector in _detectors():
        if next(iter(detector.analyze_string(value)), None) is not None:
            return str(detector.secret_type)
    # Random keys have digits; 'sk-learn-compatible-...' in a prompt is a word.
    if any(not key.startswith("sk-") or any(c.isdigit() for c in key) for key in _KEY_SHAPE.findall(value)):
        return "API key"
    return None


@functools.cache
def _detectors() -> tuple[Any, ...]:
    """One instance of every regex detector detect-secrets ships (imported on first use: only
    registration needs them). Its detectors keep no state and read no settings."""
    import detect_secrets.plugins
    from detect_secrets.plugins.base import RegexBasedDetector

    for module in pkgutil.iter_modules(detect_secrets.plugins.__path__):
        importlib.import_module(f"detect_secrets.plugins.{module.name}")
    found: list[type[RegexBasedDetector]] = []
    pending = list(RegexBasedDetector.__subclasses__())
    while pending:
        detector = pending.pop(0)
        pending.extend(detector.__subclasses__())
        if detector.__name__ not in _NOT_CREDENTIAL_DETECTORS and not inspect.isabstract(detector):
            found.append(detector)
    return tuple(detector() for detector in sorted(found, key=lambda d: d.__name__))
