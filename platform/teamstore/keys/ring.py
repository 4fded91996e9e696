"""Where each key-encryption key lives, and which one a database starts with.

    from teamstore.keys.ring import KeyRing

    ring = KeyRing.from_settings(settings)
    kek = ring.get("local:9f0c...")          # the local key file's, or KMS's for a "kms:" id
    kek_id = ring.bootstrap()                # a new database's first KEK: TEAMSTORE_KMS_KEY_ID, else the file's

Every method blocks (file or KMS I/O): the key service calls them on a thread.
"""

from __future__ import annotations

from teamstore.errors import ConfigurationError
from teamstore.keys.kek import KMS, LOCAL, KeyEncryptionKey, LocalKeyFile
from teamstore.keys.kms import KmsKeys
from teamstore.settings import Settings


class KeyRing:
    """The local key file and KMS, by KEK id.

    Args:
        key_file: The local key file.
        kms: KMS access (its client made on first use).
        kms_key_id: ``TEAMSTORE_KMS_KEY_ID``: the KMS key a new database starts with, if any.
    """

    def __init__(self, key_file: LocalKeyFile, kms: KmsKeys | None = None, kms_key_id: str | None = None) -> None:
        self.key_file, self.kms, self.kms_key_id = key_file, kms or KmsKeys(), kms_key_id
        self._configured: str | None = None  # TEAMSTORE_KMS_KEY_ID resolved to its ARN, once per process
        self._unusable = False  # ... or found disabled or scheduled for deletion, once per process

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyRing:
        """The ring ``TEAMSTORE_KEY_FILE`` and ``TEAMSTORE_KMS_KEY_ID`` describe."""
        return cls(LocalKeyFile(settings.resolved_key_file), kms_key_id=settings.kms_key_id or None)

    def get(self, kek_id: str) -> KeyEncryptionKey:
        """The KEK recorded as ``kek_id``.

        Raises:
            KeyUnavailable, KeyDestroyed: The local key file cannot give it (see :meth:`LocalKeyFile.get`).
            ConfigurationError: The id names no place teamstore keeps keys (a damaged row).
        """
        if kek_id.startswith(LOCAL):
            return self.key_file.get(kek_id)
        if kek_id.startswith(KMS):
            return self.kms.get(kek_id)
        raise ConfigurationError(f"the key-encryption key id {kek_id!r} names neither the key file nor KMS",
                                 hint="restore ts_key_encryption_keys and ts_data_keys from a backup")

    def configured(self) -> str | None:
        """The KEK id ``TEAMSTORE_KMS_KEY_ID`` names (its ARN, asked of KMS once), or ``None`` when unset."""
        if self.kms_key_id is None:
            return None
        if self._configured is None:
            self._configured = self.kms.resolve(self.kms_key_id)
        return self._configured

    def configured_usable(self) -> str | None:
        """:meth:`configured` if that KMS key is enabled; ``None`` when unset, or when KMS holds the key disabled
        or scheduled for deletion (a key a rotation retired, which the deployment's variable still names).

        Raises:
            ConfigurationError: KMS knows no such key (an alias goes when its key is deleted).
            KeyUnavailable: KMS failed.
        """
        if self.kms_key_id is None or self._configured is not None or self._unusable:
            return self._configured
        kek_id, state = self.kms.describe(self.kms_key_id)
        if state != "Enabled":
            self._unusable = True  # no DescribeKey for every new user's key
            return None
        self._configured = kek_id
        return kek_id

    def bootstrap(self) -> str:
        """The KEK a database with none recorded starts with: ``TEAMSTORE_KMS_KEY_ID``'s, else the key file's
        only key (the file made now if there is none)."""
        return self.configured() or self.key_file.first()

    def create(self, to: str | None, like: str, made_by: str | None = None) -> str:
        """A new KEK for a rotation: the KMS key ``to`` names; else one like the current KEK ``like`` (a new key
        in the key file or a new KMS key, either marked as the database ``made_by``'s)."""
        if to is not None:
            return self.kms.resolve(to)
        return self.kms.create(made_by) if like.startswith(KMS) else self.key_file.create(made_by)

    def destroy(self, kek_id: str) -> bool:
        """Destroy a retired KEK's material (the key file's entry; KMS: its deletion scheduled); False when KMS
        has no such key any more (see :meth:`KmsKeys.destroy`)."""
        if kek_id.startswith(KMS):
            return self.kms.destroy(kek_id)
        self.key_file.destroy(kek_id)
        return True
