"""Key-encryption keys: what wraps users' data keys. The protocol, and the local key file of the embedded default.

    from teamstore.keys.kek import LocalKeyFile

    keys = LocalKeyFile(Path(".teamstore/key-encryption-keys.json"))
    kek_id = keys.first()                       # a new home's key (the file made owner-only, 0600)
    kek_id = keys.create()                      # a rotation's new key, beside the others
    wrapped = keys.get(kek_id).wrap(data_key, key_id)
    keys.destroy(kek_id)                        # its material gone; the id kept, to say so later

Every method here is blocking (file I/O, or a KMS request in :mod:`teamstore.keys.kms`): the key service
calls them on a thread. A KEK's id says where it lives (``local:`` here, ``kms:`` in AWS KMS); the database
records the ids and which one is current, never the material.

The key file is JSON: ``{"format": 1, "keys": {"local:<hex>": "<base64 of 32 bytes>"}, "made": {"local:<hex>":
"<ISO time>"}, "made_by": {"local:<hex>": "<database id>"}, "destroyed": [...]}``. ``made`` dates each key (this
host's clock) and ``made_by`` names the database whose rotation made it (:mod:`teamstore.db.identity`), so that
``keys retire`` can destroy a key its database does not record, made by that database, once it is old enough
(:mod:`teamstore.keys.unrecorded`). Both sit beside ``keys`` rather than in each entry so that a version from
before them still reads and writes the file. A key without a date (made before them, or by such a version) is
dated when the file is next written: never older than it is; one without a maker is never destroyed so. The file is written whole to a temporary file and moved into place, owner-only, and
flushed to the disk before the move and its folder after it (a new home's, each folder above it too; a
:class:`~teamstore.errors.KeyFileInDoubt` when that fails); a file that group or others may read is refused. Losing it makes every payload sealed under it unreadable, for good (docs/erasure.md).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from config_registry.folders import PRIVATE, make_folder
from teamstore.disk import fsync_name, fsync_up
from teamstore.errors import ConfigurationError, DataKeyDamaged, KeyDestroyed, KeyFileInDoubt, KeyUnavailable

LOCAL, KMS = "local:", "kms:"
FORMAT = 1
_NONCE = 12


class KeyEncryptionKey(Protocol):
    """One key-encryption key: wraps and unwraps data keys (blocking calls)."""

    kek_id: str

    def wrap(self, data_key: bytes, key_id: str) -> bytes:
        """``data_key`` encrypted under this KEK, bound to ``key_id`` (the data key's id).

        Raises:
            KeyUnavailable: The KEK cannot be used now (unreachable, refused).
        """
        ...

    def unwrap(self, wrapped: bytes, key_id: str) -> bytes:
        """The data key ``wrapped`` holds.

        Raises:
            DataKeyDamaged: ``wrapped`` does not open under this KEK (changed, or bound to another key id).
            KeyDestroyed: This KEK was destroyed.
            KeyUnavailable: The KEK cannot be used now.
        """
        ...


def _bound(key_id: str) -> bytes:
    # The associated data of a wrapped key: a wrapped key copied onto another key id's row does not open.
    return b"teamstore data key " + key_id.encode("ascii")


class LocalKek:
    """A key-encryption key held in the local key file (AES-256-GCM)."""

    def __init__(self, kek_id: str, material: bytes) -> None:
        self.kek_id = kek_id
        self._aead = AESGCM(material)

    def wrap(self, data_key: bytes, key_id: str) -> bytes:
        """``data_key`` sealed under this KEK: a random nonce, then the ciphertext and its tag."""
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(nonce, data_key, _bound(key_id))

    def unwrap(self, wrapped: bytes, key_id: str) -> bytes:
        """The data key ``wrapped`` holds.

        Raises:
            DataKeyDamaged: It does not open under this KEK.
        """
        try:
            return self._aead.decrypt(wrapped[:_NONCE], wrapped[_NONCE:], _bound(key_id))
        except (InvalidTag, ValueError):
            raise damaged(self.kek_id) from None


def damaged(kek_id: str) -> DataKeyDamaged:
    """The error for a wrapped data key its KEK does not open."""
    return DataKeyDamaged(
        f"a user's wrapped data key does not open under the key-encryption key its row names ({kek_id}): the "
        "row in ts_data_keys was changed or damaged. Nothing was written; no new key is made over it",
        hint="restore that ts_data_keys row from a database backup; until then the user's sealed data stays "
        "unreadable (erasing the user still works)",
    )


def _material(encoded: object) -> bytes | None:
    """A key file entry's 32 bytes of key material; ``None`` when the entry is not that (edited, cut short)."""
    if not isinstance(encoded, str):
        return None
    try:
        material = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None
    return material if len(material) == 32 else None


def _identity(seen: os.stat_result) -> tuple[int, ...]:
    """What changes whenever the file does: replaced (a new inode, as every write here makes), written in place,
    or its mode changed (the change time)."""
    return (seen.st_dev, seen.st_ino, seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns, seen.st_mode)


def _ids(value: object) -> bool:
    """Whether ``value`` is a list of key ids (the file's destroyed keys)."""
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _made(doc: dict[str, Any], kek_id: str) -> datetime | None:
    """When the file's key ``kek_id`` was made; ``None`` when the file does not say (or not as a time)."""
    made = doc.get("made")
    written = made.get(kek_id) if isinstance(made, dict) else None
    try:
        when = datetime.fromisoformat(written) if isinstance(written, str) else None
    except ValueError:
        return None
    return when if when is not None and when.tzinfo is not None else None


def _maker(doc: dict[str, Any], kek_id: str) -> str | None:
    """The database whose rotation made the file's key ``kek_id``; ``None`` when the file does not say."""
    makers = doc.get("made_by")
    maker = makers.get(kek_id) if isinstance(makers, dict) else None
    return maker if isinstance(maker, str) else None


def _dated(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with every key it holds dated: an undated one (or one whose date does not read) now, the dates
    and makers of keys it no longer holds dropped. Dating an old key now only ever keeps it longer."""
    now = datetime.now(UTC).isoformat()
    doc["made"] = {kek_id: (when.isoformat() if (when := _made(doc, kek_id)) else now) for kek_id in doc["keys"]}
    doc["made_by"] = {kek_id: maker for kek_id in doc["keys"] if (maker := _maker(doc, kek_id)) is not None}
    return doc


class Made(NamedTuple):
    """When a key of the file was made, and by which database's rotation."""

    at: datetime | None
    """``None``: undated (made before the file kept dates), until the next write dates it."""
    by: str | None
    """The database id (:mod:`teamstore.db.identity`); ``None`` for a key no rotation marked (a new home's
    first key, or one made before the file kept makers)."""


class LocalKeyFile:
    """The local key file: every local key-encryption key, current and retired, by id.

    Args:
        path: The file (``TEAMSTORE_KEY_FILE``, else ``$TEAMSTORE_HOME/key-encryption-keys.json``).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        # The file as last read by :meth:`get`, with the identity it had then (a rotation asks for two keys per
        # data key: one stat each instead of a read and a parse, while any change to the file is still seen).
        self._last: tuple[tuple[int, ...], dict[str, Any]] | None = None

    def exists(self) -> bool:
        """Whether the file is there."""
        return self.path.exists()

    def get(self, kek_id: str) -> LocalKek:
        """The KEK ``kek_id`` from the file.

        Raises:
            KeyDestroyed: The file records it as destroyed.
            KeyUnavailable: The file is missing, unreadable, or holds no such key (another file?).
            ConfigurationError: Group or others may read the file, or it is a folder.
        """
        doc = self._unchanged()
        encoded = doc["keys"].get(kek_id)
        if encoded is None:
            if kek_id in doc.get("destroyed", []):
                raise KeyDestroyed(
                    f"the key-encryption key {kek_id} was retired and destroyed: the data keys it wrapped, and "
                    "everything sealed under them, are beyond use",
                    hint="this happens to a backup older than the rotation bound (docs/erasure.md); nothing to fix",
                )
            raise KeyUnavailable(
                f"the key file {self.path} holds no key-encryption key {kek_id}, which the database names",
                hint="point TEAMSTORE_KEY_FILE at the key file this database was used with (restore it from its "
                "own backup); never make a new one: the data keys wrapped by the old one would be lost",
            )
        material = _material(encoded)
        if material is None:
            raise KeyUnavailable(
                f"the key file {self.path} is damaged: its entry for the key-encryption key {kek_id} is not 32 bytes "
                "of base64",
                hint="restore the key file from its own backup; never make a new one: the data keys wrapped by the "
                "damaged key would be lost",
            )
        return LocalKek(kek_id, material)

    def create(self, made_by: str | None = None) -> str:
        """Add a new key to the file (a rotation's, marked with its database's id ``made_by``); its id. A new
        home's file is made by :meth:`first`.

        Raises:
            KeyUnavailable: The file is missing or unreadable: a new file here would hold the new key alone, and
                restoring the lost one over it (as the error says to) would lose every data key wrapped since.
                Or it could not be written: the file is as it was.
            KeyFileInDoubt: The key is in the file, but its folder could not be flushed. The database must not
                record it; a rerun makes another (this one is then a key no database records, which ``keys
                retire`` destroys).
        """
        kek_id = f"{LOCAL}{secrets.token_hex(16)}"
        material = base64.b64encode(os.urandom(32)).decode("ascii")
        with self._locked():
            doc = self._read()
            doc["keys"][kek_id] = material
            if made_by is not None:
                makers = doc.get("made_by")
                doc["made_by"] = {**(makers if isinstance(makers, dict) else {}), kek_id: made_by}
            self._write(doc)  # dated now, with it
        return kek_id

    def first(self) -> str:
        """The id of the file's only key, making the file with one if there is none (a new home).

        Raises:
            KeyUnavailable: The file holds several keys (its database must name which is current), or could not be
                made.
            KeyFileInDoubt: The file was made (or found), but a folder could not be flushed: run it again.
        """
        # Its database records the key next, so the file's folder and each above it up to the filesystem's root are
        # flushed every time, whether the file is made now or found: a run that failed after making any of them
        # (a flush, the write itself) left this run no way to know which.
        with self._locked():
            if not self.path.exists():
                kek_id = f"{LOCAL}{secrets.token_hex(16)}"
                self._write({"format": FORMAT, "keys": {kek_id: base64.b64encode(os.urandom(32)).decode("ascii")},
                             "destroyed": []}, up=True)
                return kek_id
            keys = list(self._read()["keys"])
            if len(keys) == 1:
                self._flush(up=True)
        if len(keys) != 1:
            raise KeyUnavailable(
                f"the key file {self.path} holds {len(keys)} key-encryption keys and the database records none",
                hint="point TEAMSTORE_KEY_FILE (or TEAMSTORE_DATABASE_URL) at the pair that belongs together",
            )
        return str(keys[0])

    def made(self) -> dict[str, Made]:
        """Every key the file holds (not destroyed), with when it was made and by which database's rotation.
        Read afresh, with every check :meth:`get` makes.

        Raises:
            KeyUnavailable, ConfigurationError: As :meth:`get` raises them for the file.
        """
        doc = self._read()
        return {str(kek_id): Made(_made(doc, kek_id), _maker(doc, kek_id)) for kek_id in doc["keys"]}

    def date_undated(self) -> None:
        """Date the file's undated keys now (writing it only if one is). A rerun after a flush that failed
        (:class:`KeyFileInDoubt`) flushes nothing again: dates a power loss took are given again, later, and a
        later date only keeps a key longer."""
        with self._locked():
            doc = self._read()
            if any(_made(doc, kek_id) is None for kek_id in doc["keys"]):
                self._write(doc)

    def destroy(self, kek_id: str) -> None:
        """Remove ``kek_id``'s material from the file, keeping its id among the destroyed.

        Raises:
            KeyUnavailable: The file neither holds ``kek_id`` nor lists it as destroyed (another file): the key
                would live on in the database's own file, while the database recorded it destroyed.
            KeyFileInDoubt: The key's material is gone from the file, but its folder could not be flushed: a power
                loss may bring it back, so the database must not record it destroyed until a rerun flushes it.
        """
        with self._locked():
            doc = self._read()
            if kek_id in doc["destroyed"] and kek_id not in doc["keys"]:
                self._flush()  # a destroy whose flush failed, rerun: until flushed, a power loss brings the key back
                return
            if doc["keys"].pop(kek_id, None) is None:
                raise KeyUnavailable(
                    f"the key file {self.path} holds no key-encryption key {kek_id}, which the database retired: "
                    "nothing was destroyed",
                    hint="point TEAMSTORE_KEY_FILE at the key file this database is used with, then run `teamstore "
                    "keys retire` again",
                )
            doc["destroyed"] = sorted({*doc["destroyed"], kek_id})
            self._write(doc)

    def _unchanged(self) -> dict[str, Any]:
        """The file as :meth:`get` last read it if it is the same file, unchanged since (not replaced, written or
        chmod'ed: each changes its identity); else read again, with every check :meth:`_read` makes."""
        last = self._last
        if last is not None:
            with contextlib.suppress(OSError):  # gone or unreadable now: the read below says so
                if _identity(self.path.stat()) == last[0]:
                    return last[1]
        identity, doc = self._read_with_identity()
        self._last = (identity, doc)
        return doc

    def _read(self) -> dict[str, Any]:
        """The file as it is now, in a dict of its own (what a change to the file edits and writes back; never the
        copy :meth:`get` keeps)."""
        return self._read_with_identity()[1]

    def _read_with_identity(self) -> tuple[tuple[int, ...], dict[str, Any]]:
        try:
            mode = self.path.stat().st_mode
            if stat.S_ISDIR(mode):  # before its mode: `chmod 600` on a folder is no fix
                raise ConfigurationError(
                    f"the key file {self.path} is a folder, not a key file",
                    hint="set TEAMSTORE_KEY_FILE to the key file itself (key-encryption-keys.json in it, if that is "
                    "where it is kept)",
                )
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ConfigurationError(
                    f"the key file {self.path} may be read by other users (mode {stat.S_IMODE(mode):o})",
                    hint=f"chmod 600 {self.path}; a Kubernetes secret volume (read-only, 0644 by default) cannot "
                    "be changed so: set the volume's `defaultMode: 0400` (its files are root's, so only a process "
                    "running as root reads them then, and not with the pod's `fsGroup`, which adds group read); "
                    "else keep the file on a writable volume this user owns (`keys rotate` and `keys retire` write "
                    "it), or the key-encryption key in KMS (TEAMSTORE_KMS_KEY_ID)",
                )
            with self.path.open("rb") as handle:
                identity = _identity(os.fstat(handle.fileno()))  # of the file read, were it replaced meanwhile
                doc = json.loads(handle.read().decode("utf-8"))
        except FileNotFoundError:
            raise KeyUnavailable(
                f"the key file {self.path} is missing, and the database's data keys are wrapped by a key in it: "
                "every payload sealed under them is unreadable without it. Nothing was written",
                hint="restore the key file from its own backup, or point TEAMSTORE_KEY_FILE at it",
            ) from None
        except (OSError, ValueError) as exc:
            raise KeyUnavailable(f"the key file {self.path} could not be read ({type(exc).__name__})",
                                 hint="check its permissions, or restore it from its backup") from None
        if (not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("keys"), dict)
                or not _ids(doc.setdefault("destroyed", []))):
            raise KeyUnavailable(f"the key file {self.path} is not a teamstore key file (format {FORMAT})",
                                 hint="restore it from its backup")
        return identity, doc

    def _write(self, doc: dict[str, Any], *, up: bool = False) -> None:
        """Write the file whole beside itself, flushed, rename it into place, then flush its folder (and, ``up``,
        each folder above it: :meth:`_flush`): a key the database records must outlive a power loss.

        Raises:
            KeyUnavailable: It could not be written; the file is as it was.
            KeyFileInDoubt: It took its new content, but its folder could not be flushed.
        """
        # Through a symlink to the file itself (kept apart, on a volume that is backed up): replacing the link
        # would leave the new key only here, and the backed-up file without it.
        target = self.path.resolve()
        try:
            make_folder(target.parent, PRIVATE)  # a link's target's, which :meth:`_locked` did not make
            _replace(target, json.dumps(_dated(doc)))
        except OSError as exc:
            raise KeyUnavailable(f"could not write the key file {self.path} ({exc.strerror or exc}); it is as it was",
                                 hint="check the permissions of its folder and the space left, then run the same "
                                 "command again") from None
        self._flush(up=up)

    def flush(self) -> None:
        """Put the file's name on the disk (its folder's entries): what ``keys retire`` does before it reads the
        file, for a destroy whose flush failed (:class:`KeyFileInDoubt`) and which the file no longer lists.

        Raises:
            KeyFileInDoubt: Its folder could not be flushed.
        """
        with self._locked():
            self._flush()

    def _flush(self, *, up: bool = False) -> None:
        """Put the file's name on the disk; ``up``: and the name of each folder above it, up to the filesystem's
        root (a new home's, whose folders a failed run may have made). Also what a rerun of a write whose flush
        failed does, when it finds the change made already and so writes nothing (:class:`KeyFileInDoubt`).

        Raises:
            KeyFileInDoubt: A folder could not be flushed.
        """
        target = self.path.resolve()
        try:
            if up:
                fsync_up(target.parent)
            else:
                fsync_name(target)
        except OSError as exc:
            raise KeyFileInDoubt(
                f"the key file {self.path} was written, but a folder holding it could not be flushed to the disk "
                f"({exc.strerror or exc}): it may or may not hold the change after a power loss, so the database "
                "records none of it",
                hint="check the disk that holds the key file, then run the same command again: it flushes the file "
                "before the database relies on it",
            ) from None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise changes to the file across processes (a lock file beside it)."""
        try:
            make_folder(self.path.parent, PRIVATE)
            fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise KeyUnavailable(f"could not lock the key file {self.path} ({exc.strerror or exc})",
                                 hint="check that its folder is writable by this user") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _replace(target: Path, text: str) -> None:
    """Make ``text`` the file at ``target`` (0600): written beside it and flushed, then renamed over it, so that
    neither a reader nor a power loss ever meets the name on half a file, or on an empty one."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")  # 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
