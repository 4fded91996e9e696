"""The sealed payload format: what opens, what does not, and how a reader tells sealed bytes from older ones."""

from __future__ import annotations

import gzip
import os

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from teamstore.errors import PayloadUnreadable
from teamstore.keys import sealed
from teamstore.keys.service import DataKey
from teamstore.state.envelope import encode, is_sealed_text, seal_text, sealed_bytes

KEY_ID = "0f" * 16


def _aead() -> AESGCM:
    return AESGCM(os.urandom(32))


def test_a_sealed_payload_opens_under_its_key_for_its_context_and_names_its_key() -> None:
    aead = _aead()
    blob = sealed.seal(aead, KEY_ID, b"my router drops every evening", "state/s1")
    assert sealed.is_sealed(blob) and sealed.key_id_of(blob) == KEY_ID
    assert b"router" not in blob
    assert sealed.open_sealed(aead, blob, "state/s1") == b"my router drops every evening"


def test_compressed_text_comes_back_whole_and_takes_less_room() -> None:
    aead, text = _aead(), b'{"messages": ["the router drops again"]}' * 100
    small = sealed.seal(aead, KEY_ID, text, "state/s1", compress=True)
    assert len(small) < len(text) // 4
    assert sealed.open_sealed(aead, small, "state/s1") == text


@pytest.mark.parametrize("change", ["context", "key", "a flipped byte", "cut short", "version"])
def test_a_payload_does_not_open_elsewhere_under_another_key_or_once_changed(change: str) -> None:
    aead = _aead()
    blob = sealed.seal(aead, KEY_ID, b"words", "state/s1")
    context = "state/s2" if change == "context" else "state/s1"
    if change == "key":
        aead = _aead()
    elif change == "a flipped byte":
        blob = blob[:-1] + bytes([blob[-1] ^ 1])
    elif change == "cut short":
        blob = blob[: sealed.HEADER_BYTES + 3]
    elif change == "version":
        blob = blob[:4] + b"\x09" + blob[5:]
    with pytest.raises(PayloadUnreadable) as info:
        sealed.open_sealed(aead, blob, context)
    assert info.value.hint


def test_bytes_written_before_sealing_are_told_apart_by_their_first_bytes() -> None:
    for older in (gzip.compress(b'{"kind":"run"}'), b'{"envelope":1}', b"", b"\x00TS"):
        assert not sealed.is_sealed(older) and sealed.key_id_of(older) is None


def test_a_sealed_state_sits_in_the_envelope_and_a_json_one_is_not_taken_for_it() -> None:
    blob = sealed.seal(_aead(), KEY_ID, encode({"kind": "team"}).encode(), "state/s1")
    text = seal_text(blob)
    assert is_sealed_text(text) and sealed_bytes(text) == blob
    assert text.startswith('{"envelope":1,"codec":"aes256gcm"')
    assert sealed_bytes(encode({"kind": "team"})) is None and not is_sealed_text(encode({"kind": "team"}))


# Sealed by an earlier release (format 1: LZ4'd, then not) under the data key below, for ``state/s1``: rows
# written then must open as long as format 1 is read.
EARLIER = {
    "AFRTSwEBASNFZ4mrze8BI0VniavN79HmNRQRvjoTf+dOodr2sLTWOfJoh0dNd2HgFNfJ6v6if0T5KDKaEi5JNh4ZnADR8Xo6hbIR6HtU49el2Mk"
    "RTipmt5trA/W5mIkFPSOjLndzXmiUm4pXbrYwLiPneNjfdgWfnrCREvBtXTVEa2jQ",
    "AFRTSwEAASNFZ4mrze8BI0VniavN7294LG3mvFzZ6886il0s6MFmK/yD2p8kYqihoJjIoMANTNJsoEKSuWn53kWPNKV3Y0RcT8M5zwWmoxS/+A"
    "6x2lPuQ6oOdyDKsRb6TjRzEpyHamlu8xhD4/7EwsezFWcXHXf6YCzUbQFC",
}


@pytest.mark.parametrize("data", sorted(EARLIER))
def test_a_state_sealed_by_an_earlier_release_still_opens(data: str) -> None:
    key = DataKey("alice", "0123456789abcdef0123456789abcdef", AESGCM(bytes(range(32))))
    text = f'{{"envelope":1,"codec":"aes256gcm","data":"{data}"}}'
    blob = sealed_bytes(text)
    assert blob is not None and key.sealed_it(blob)
    assert key.open(blob, "state/s1") == b'{"envelope":1,"codec":"json","data":{"said":"CANARY my router ZX-81 drops"}}'
    with pytest.raises(PayloadUnreadable):
        key.open(blob, "state/s2")
