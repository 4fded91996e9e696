"""Per-user keys: every payload that can hold a user's words is sealed under that user's own data key.

    from teamstore.keys import KeyService

    keys = KeyService.from_settings(engine, settings)          # the composition root builds one: App.keys
    blob = await keys.seal(user_id, payload, "memory/summary")  # any new store: one call on the way in ...
    payload = await keys.open(user_id, blob, "memory/summary")  # ... and one on the way out

Data keys (AES-256-GCM) are wrapped by a key-encryption key, AWS KMS (``TEAMSTORE_KMS_KEY_ID``) or a local key
file, and stored wrapped in ``ts_data_keys``. Erasure destroys the user's row, which puts every copy of their
sealed data beyond use: versions S3 may not delete, and backups once the key-encryption key of their time is
rotated out and destroyed (``teamstore keys rotate``, ``teamstore keys retire``; :mod:`teamstore.keys.rotation`).

Modules: ``sealed`` (the payload format), ``schema`` (the tables), ``kek`` and ``kms`` (key-encryption keys),
``ring`` (which KEK lives where), ``service`` (data keys, the cache), ``rotation`` (rotate, retire, the bound),
``health`` (whether the KEKs in use can be used now: ``teamstore keys status``), ``unrecorded`` (the key file's keys the
database does not record, as after a restore), ``unrecorded_kms`` (the KMS keys it marks and does not record),
``marks`` (each database's tag on the KMS keys it uses).
"""

from __future__ import annotations

from teamstore.keys.service import DataKey, KeyService

__all__ = ["DataKey", "KeyService"]
