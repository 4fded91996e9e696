"""The sealed payload: what every store writes instead of a user's words. Pure: no key lookups, no I/O.

    from teamstore.keys.sealed import header, is_sealed, key_id_of

    blob = data_key.seal(b"...", "state/s1")   # teamstore.keys.service.DataKey builds these
    is_sealed(blob)                             # True: the magic bytes lead it
    key_id_of(blob)                             # the data key it was sealed under (32 hex characters)

Layout, version 1 (every integer one byte)::

    magic  b"\\x00TSK"   never the first bytes of gzip (1f 8b), JSON ({) or text, so a reader tells a
                        sealed payload from one written before sealing by its first bytes alone
    version 1
    flags   bit 0: the plaintext was LZ4-compressed (block format, size stored) before sealing
    key_id  16 bytes    the user's data key (``ts_data_keys.key_id``, hex there)
    nonce   12 bytes    random, never reused under one key
    AES-256-GCM ciphertext and its 16-byte tag

The associated data is the header (magic to key id) and the payload's *context*: where it belongs and
what it is (``state/<session id>``, ``transcript/<object key>``). A payload copied to another place, user or
purpose does not open there. A reader that meets a version it does not know refuses it
(:class:`~teamstore.errors.PayloadUnreadable`); a new layout gets a new version, and old ones keep reading.
"""

from __future__ import annotations

import os

import lz4.block
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from teamstore.errors import PayloadUnreadable

MAGIC = b"\x00TSK"
VERSION = 1
COMPRESSED = 0x01
KEY_ID_BYTES, NONCE_BYTES, TAG_BYTES = 16, 12, 16
HEADER_BYTES = len(MAGIC) + 2 + KEY_ID_BYTES
"""Magic, version, flags and key id: what :func:`key_id_of` needs to read (the transcript erasure reads only
this much of an object under a hold)."""
OVERHEAD = HEADER_BYTES + NONCE_BYTES + TAG_BYTES


def is_sealed(data: bytes) -> bool:
    """Whether ``data`` is a sealed payload (of any version), by its magic bytes."""
    return data[: len(MAGIC)] == MAGIC


def key_id_of(data: bytes) -> str | None:
    """The data key ``data`` was sealed under, as hex; ``None`` for data that is not sealed (or too short)."""
    if not is_sealed(data) or len(data) < HEADER_BYTES:
        return None
    return data[len(MAGIC) + 2 : HEADER_BYTES].hex()


def header(key_id: str, flags: int = 0) -> bytes:
    """The header of a payload sealed under ``key_id`` (hex)."""
    return MAGIC + bytes((VERSION, flags)) + bytes.fromhex(key_id)


def _aad(head: bytes, context: str) -> bytes:
    return head + context.encode("utf-8", "surrogatepass")


def key_of(data: bytes) -> bytes:
    """The raw key id bytes of a sealed payload's header (no check that it is one: see :func:`is_sealed`)."""
    return data[len(MAGIC) + 2 : HEADER_BYTES]


def seal(aead: AESGCM, key_id: str, plaintext: bytes, context: str, *, compress: bool = False) -> bytes:
    """``plaintext`` sealed under the data key ``aead`` (whose id is ``key_id``) for ``context``.

    Args:
        aead: The user's data key.
        key_id: Its id (hex), written into the header.
        plaintext: The payload.
        context: Where it belongs and what it is; the same must be given to open it.
        compress: LZ4 the plaintext first (text compresses; sealed bytes never would afterwards, and a state
            the database could no longer compress would be stored out of line). LZ4 for speed: a save pays it.
    """
    return seal_under(aead, header(key_id, COMPRESSED if compress else 0), plaintext, context)


def seal_under(aead: AESGCM, head: bytes, plaintext: bytes, context: str) -> bytes:
    """:func:`seal` with the header made already (a data key keeps its own: a save makes none)."""
    if head[len(MAGIC) + 1] & COMPRESSED:
        plaintext = lz4.block.compress(plaintext)
    nonce = os.urandom(NONCE_BYTES)
    return head + nonce + aead.encrypt(nonce, plaintext, _aad(head, context))


def open_sealed(aead: AESGCM, data: bytes, context: str) -> bytes:
    """The plaintext of ``data``, sealed under ``aead`` for ``context``.

    Raises:
        PayloadUnreadable: ``data`` is not a sealed payload of a version this code reads, it was damaged, or
            it was sealed for another context or under another key.
    """
    if not is_sealed(data) or len(data) < OVERHEAD:
        raise _unreadable("it is not a sealed payload (or it was cut short)")
    version, flags = data[len(MAGIC)], data[len(MAGIC) + 1]
    if version != VERSION:
        raise _unreadable(f"it is sealed in format {version}, which this version of teamstore does not read",
                          hint="upgrade teamstore on this worker")
    head, nonce = data[:HEADER_BYTES], data[HEADER_BYTES : HEADER_BYTES + NONCE_BYTES]
    try:
        plaintext = aead.decrypt(nonce, data[HEADER_BYTES + NONCE_BYTES :], _aad(head, context))
    except InvalidTag:
        raise _unreadable("its bytes were changed, or it was sealed for another place or user") from None
    if flags & COMPRESSED:
        try:
            plaintext = lz4.block.decompress(plaintext)
        except lz4.block.LZ4BlockError:
            raise _unreadable("its compressed content does not inflate") from None
    return plaintext


def _unreadable(why: str, hint: str | None = None) -> PayloadUnreadable:
    return PayloadUnreadable(
        f"a sealed payload does not open: {why}",
        hint=hint or "restore the object or row from a backup taken before it was damaged; nothing else reads it",
    )
