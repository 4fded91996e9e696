"""What the deletion coordinator reads from the environment (``TEAMSTORE_ERASURE_*``).

    from teamstore.erasure.settings import ErasureSettings

    knobs = ErasureSettings()                        # defaults below
    knobs = ErasureSettings(fence_grace_seconds=0)   # tests: no in-flight writes to wait for

Kept apart from :class:`teamstore.settings.Settings` so the erasure knobs travel together; the shared
settings still decide the database, the transcript store and transcript retention.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from teamstore.limits import MAX_DAYS
from teamstore.settings import TypedSettings


class ErasureSettings(TypedSettings):
    """Deadlines, retention of what teamstore cannot delete, and timing of the fence."""

    model_config = SettingsConfigDict(env_prefix="TEAMSTORE_ERASURE_", extra="ignore", env_ignore_empty=True)

    due_days: int = Field(default=30, gt=0, le=MAX_DAYS, description="Deadline: received + this many days.")
    backup_retention_days: int = Field(
        default=35, ge=0, le=MAX_DAYS, description="How long database backups are kept (they age out, never edited)."
    )
    tracing_retention_days: int = Field(
        default=30, ge=0, le=MAX_DAYS, description="How long the tracing backend keeps spans."
    )
    fence_grace_seconds: float = Field(
        default=2.5,
        ge=0,
        le=3600,
        description="After fencing a user, wait this long for writes that passed their check before it "
        "(a transcript upload's deadline is 2 s) before enumerating.",
    )
    session_wait_seconds: float = Field(
        default=60.0,
        ge=0,
        le=86_400,
        description="Before erasing, wait this long for the user's open sessions (runs that began before "
        "the fence) to end; their writes are refused meanwhile. If one is still open the request fails, "
        "keeping the fence: rerun it.",
    )
    upload_wait_seconds: float = Field(
        default=120.0,
        ge=0,
        le=86_400,
        description="Before erasing, wait this long for transcript uploads that may still land (S3 left them "
        "unanswered, or they are still on its way; each settles TEAMSTORE_LATE_UPLOAD_SECONDS after it ended). "
        "If one still may after the wait, the request fails, keeping the fence: rerun it.",
    )
    lease_seconds: float = Field(
        default=120.0, gt=0, le=86_400, description="A request's lease; a killed coordinator's lease expires after it."
    )
    hash_key: SecretStr | None = Field(
        default=None, description="Key of the subject hash in receipts (unset: a fixed label) and of the hash of "
        "the user id a held request keeps (unset: the database's own id).",
    )
    hash_key_previous: SecretStr | None = Field(
        default=None, description="The hash key before the current one, while requests held under it remain: they "
        "are still matched (their own user's rerun keeps the hash under the current key from then on). Without the "
        "current key (unset or empty), whatever hashes an id for a request refuses it.",
    )
