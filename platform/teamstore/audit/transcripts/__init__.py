"""Transcript stores: one gzip JSON-lines object per run, in S3 or a local folder.

from teamstore.audit.transcripts import transcript_store_from_settings

store = transcript_store_from_settings(Settings())   # TEAMSTORE_TRANSCRIPTS_URL, s3:// or file://
keys = await store.list_keys(session_prefix(run_keys))
lifecycle = capability(store, Capability.LIFECYCLE_RULES)   # typed, or None where the store lacks it

The interface and key layout are in ``base``, the optional capabilities' protocols in ``capabilities``,
the backends in ``local`` (a folder; its removals beside other sweeps and erasures in ``local_removal``) and
``s3`` (with its client and error translation in ``s3_client``);
``record`` encodes one run's object and ``pages`` reads a session's newest runs.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from teamstore.audit.transcripts.base import (
    Capability,
    TranscriptStore,
    run_key,
    session_prefix,
    subject_prefix,
)
from teamstore.audit.transcripts.capabilities import capability
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.errors import ConfigurationError
from teamstore.settings import Settings

__all__ = [
    "Capability",
    "LocalTranscriptStore",
    "TranscriptStore",
    "capability",
    "run_key",
    "session_prefix",
    "store_beside",
    "store_endpoint",
    "subject_prefix",
    "transcript_store_from_settings",
    "transcript_store_from_url",
]


def transcript_store_from_url(url: str) -> TranscriptStore:
    """The store a URL names: ``s3://bucket/prefix`` or ``file:///folder`` (a bare path is a folder).

    Args:
        url: The transcripts URL.

    Returns:
        A new store; the caller closes it.

    Raises:
        ConfigurationError: A URL that does not parse, an unsupported scheme, no valid bucket, or no
            folder (``file://name``, where the name is taken for a host, or an empty path); for
            ``s3://``, ``AWS_*`` variables that cannot make a client (see ``make_client``).
        MissingExtra: ``s3://`` without boto3 installed.
    """
    try:
        parsed = urlparse(url)
    except ValueError:  # e.g. brackets that are no IPv6 address: s3://[bucket]
        raise ConfigurationError(
            "the transcripts URL does not parse as a URL",
            hint="set TEAMSTORE_TRANSCRIPTS_URL to s3://bucket/prefix or file:///folder",
        ) from None
    if parsed.scheme == "s3":
        from teamstore.audit.transcripts.s3 import S3TranscriptStore

        return S3TranscriptStore.from_url(url)
    if parsed.scheme in ("file", ""):
        return LocalTranscriptStore(_folder(parsed.netloc, unquote(parsed.path) if parsed.scheme else url))
    raise ConfigurationError(
        f"unsupported transcripts URL scheme {parsed.scheme!r}",
        hint="set TEAMSTORE_TRANSCRIPTS_URL to s3://bucket/prefix or file:///folder",
    )


def _folder(host: str, path: str) -> Path:
    # file://transcripts reads as the host "transcripts" and no path: the folder would have been the
    # working directory, which `retention sweep` then walks, deleting old files and empty folders.
    if host not in ("", "localhost") or not path:
        raise ConfigurationError(
            "the transcripts URL names no folder: a file URL has three slashes before an absolute path",
            hint="set TEAMSTORE_TRANSCRIPTS_URL to file:///srv/teamstore/transcripts, or a plain path",
        )
    return Path(path)


def store_beside(store: TranscriptStore, url: str) -> TranscriptStore | None:
    """The store ``url`` names, reached with what ``store`` is reached with, or ``None`` when it cannot be.

    A folder (``file://``) is opened by its URL alone (whether this machine has it is for the caller to ask:
    ``Capability.HOST_LOCAL``); another store is reached through ``store``'s client when ``store`` declares
    ``Capability.SIBLINGS`` and is of its kind (S3: another bucket or prefix, the same endpoint and credentials).

    Args:
        store: The store the caller talks to.
        url: A recorded store's URL.

    Returns:
        ``store`` itself for its own URL; a new store (the caller closes it) or ``None``.

    Raises:
        ConfigurationError: ``url`` is a ``file://`` URL that names no folder.
    """
    if url == store.url:
        return store
    if urlparse(url).scheme == "file":
        return transcript_store_from_url(url)
    siblings = capability(store, Capability.SIBLINGS)
    return siblings.sibling(url) if siblings is not None else None


def store_endpoint(store: TranscriptStore) -> str | None:
    """The endpoint ``store`` is reached at, recorded with it (:data:`Capability.SIBLINGS`' ``endpoint``, ``"aws"``
    for AWS's own S3): ``None`` for a folder, reached at no endpoint."""
    siblings = capability(store, Capability.SIBLINGS)
    return siblings.endpoint if siblings is not None else None


def transcript_store_from_settings(settings: Settings) -> TranscriptStore:
    """The store ``Settings.resolved_transcripts_url`` names (see :func:`transcript_store_from_url`)."""
    return transcript_store_from_url(settings.resolved_transcripts_url)
