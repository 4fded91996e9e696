"""Key-encryption keys in AWS KMS, through boto3 (the ``kms`` extra): production's choice.

    from teamstore.keys.kms import KmsKeys

    kms = KmsKeys()                                    # AWS_* variables: credentials, region, endpoint
    kek_id = kms.resolve("alias/teamstore")            # "kms:arn:aws:kms:...": the key an alias names today
    wrapped = kms.get(kek_id).wrap(data_key, key_id)   # Encrypt, with the key id as encryption context

A data key is made locally and wrapped with ``Encrypt``, unwrapped with ``Decrypt``; the encryption context
names only the data key's id (CloudTrail logs it), never a user. A KEK is recorded by its key ARN, not an
alias, since an alias can be pointed at another key. Retiring one schedules its deletion with the shortest
window KMS allows (7 days): it cannot be used from that moment, and is gone when the window ends.
Requests have short timeouts and few retries, so an unreachable KMS fails a session's opening fast.

Each database marks the KMS keys it wraps data keys under with a tag of its own (:func:`mark_of`), so that one
database's ``keys retire`` can see another still uses a key (:mod:`teamstore.keys.marks`).
"""

from __future__ import annotations

from typing import Any

from teamstore.aws import client_config
from teamstore.errors import (
    ConfigurationError,
    KeyDeletionRefused,
    KeyDestroyed,
    KeyUnavailable,
    MissingExtra,
)
from teamstore.keys.kek import KMS, damaged
from teamstore.logs import keep_request_bodies_out_of_logs

DELETION_WINDOW_DAYS = 7
"""The shortest wait KMS allows between scheduling a key's deletion and deleting it."""
_GONE = {"KMSInvalidStateException", "DisabledException", "NotFoundException"}
MARK_PREFIX = "teamstore-database-"
"""The tag key a database marks its KMS keys with is this and its id (:mod:`teamstore.db.identity`)."""
MARK_VALUE = "wraps-data-keys"
_MADE = {"TagKey": "teamstore", "TagValue": "key-encryption-key"}
"""The tag every KMS key a rotation makes has, whichever database made it (IAM grants workers its keys by it)."""


def mark_of(database: str) -> str:
    """The tag key by which the database ``database`` (its id) marks a KMS key it wraps data keys under."""
    return f"{MARK_PREFIX}{database}"


def _key_id(kek_id: str) -> str:
    """The KMS key id of a KEK id (``kms:<ARN>``): KMS takes the ARN too, but some KMS-compatible servers (moto's)
    take only the id for some requests."""
    return kek_id.removeprefix(KMS).rsplit(":key/", 1)[-1]


def make_client(connect_timeout: float = 2.0, read_timeout: float = 5.0, max_attempts: int = 2) -> Any:
    """A boto3 KMS client with short timeouts and few retries (``AWS_*`` variables decide the rest, the
    attempts and retry mode included: :func:`teamstore.aws.client_config`; ``AWS_ENDPOINT_URL_KMS`` or
    ``AWS_ENDPOINT_URL`` point it at another endpoint).

    Raises:
        MissingExtra: boto3 is not installed.
        ConfigurationError: The ``AWS_*`` variables cannot make a client (no region, a bad endpoint, a retry
            mode botocore does not know, attempts that are no whole number from 1).
    """
    try:
        import boto3
    except ImportError as exc:
        raise MissingExtra("key-encryption keys in AWS KMS", "kms", "boto3") from exc
    from botocore.exceptions import BotoCoreError, PartialCredentialsError

    keep_request_bodies_out_of_logs()  # Encrypt's and Decrypt's bodies hold data keys in plain
    bad_endpoint = ConfigurationError("AWS_ENDPOINT_URL_KMS (or AWS_ENDPOINT_URL) is not an http:// or https:// URL",
                                      hint="set it to the KMS endpoint, or unset it for AWS")
    try:
        session = boto3.session.Session()
        config = client_config(session, connect_timeout=connect_timeout, read_timeout=read_timeout,
                               max_attempts=max_attempts)
        client = session.client("kms", config=config)
    except BotoCoreError as exc:
        # A key id without its secret (or the reverse) is refused here too, and is no matter of the region.
        partial = isinstance(exc, PartialCredentialsError)
        raise ConfigurationError(f"could not set up the KMS client: {exc}", hint=(
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY together (an empty one counts as missing), or unset both "
            "for a profile or a role") if partial else "fix AWS_DEFAULT_REGION, AWS_PROFILE, AWS_RETRY_MODE or "
            "AWS_CONFIG_FILE (or unset them)") from None
    except ValueError:
        raise bad_endpoint from None
    # botocore takes any scheme (htps://, ftp://) and fails each request: every
    # session's opening would fail as if KMS were down.
    if not client.meta.endpoint_url.lower().startswith(("http://", "https://")):
        raise bad_endpoint
    return client


def _code(exc: BaseException) -> str:
    from botocore.exceptions import ClientError

    return str(exc.response.get("Error", {}).get("Code", "")) if isinstance(exc, ClientError) else ""


def _timed_out(exc: BaseException) -> bool:
    from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

    return isinstance(exc, ConnectTimeoutError | ReadTimeoutError)


def unavailable(exc: BaseException, action: str, permission: str, *, reading: bool = False) -> KeyUnavailable:
    """A failed KMS request as :class:`KeyUnavailable`, named by class and error code (never a key id).

    Args:
        exc: What boto3 raised.
        action: What was asked, to be said as "KMS refused to <action>".
        permission: The IAM action(s) it takes, for the hint when KMS refuses it.
        reading: The request only read (a listing, tags, a description): the message does not go on to say that
            nothing was written, which a command that writes nothing would only puzzle over.
    """
    code = _code(exc)
    written = "" if reading else ". Nothing was written"
    if code == "AccessDeniedException":
        return KeyUnavailable(f"KMS refused to {action} ({code}){written}",
                              hint=f"grant this process's role {permission} (docs/operations.md, *Keys*, lists what "
                              "each command needs)")
    if code in {"UnrecognizedClientException", "InvalidSignatureException"}:
        return KeyUnavailable(f"KMS did not accept this process's credentials to {action} ({code}){written}",
                              hint="check the AWS credentials (AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
                              "AWS_SECRET_ACCESS_KEY) and that the clock is right")
    if code == "LimitExceededException":
        return KeyUnavailable(f"KMS refused to {action}: a quota is reached ({code}){written}",
                              hint="retry later; if it persists, raise the KMS quota for this account and region")
    if _timed_out(exc):
        return KeyUnavailable(f"KMS did not answer in time to {action} ({type(exc).__name__}){written}",
                              hint="KMS is slow or out of reach: check AWS_ENDPOINT_URL_KMS / AWS_DEFAULT_REGION, the "
                              "network and KMS's health; retry once it answers")
    return KeyUnavailable(
        f"KMS could not {action}: {code or type(exc).__name__}{written}",
        hint="check AWS_ENDPOINT_URL_KMS / AWS_DEFAULT_REGION, the network and KMS's health; retry once it answers",
    )


def _beyond_use(code: str) -> KeyDestroyed:
    """A KMS key KMS will not use, said as what it is, with the way back where there is one."""
    if code == "DisabledException":
        return KeyDestroyed("the KMS key-encryption key is disabled: what it wrapped cannot be opened while it is",
                            hint="if it was disabled by mistake, `aws kms enable-key` brings it back")
    if code == "NotFoundException":
        return KeyDestroyed("KMS no longer has the key-encryption key (deleted): what it wrapped is beyond use for "
                            "good", hint="nothing brings it back: a backup older than the rotation bound reads so, "
                            "as it should (docs/erasure.md)")
    return KeyDestroyed(
        f"the KMS key-encryption key is scheduled for deletion, or in another state KMS does not use ({code}): what "
        "it wrapped is beyond use",
        hint="a key retired on schedule: nothing to fix (docs/erasure.md, *The rotation bound*); one retired by "
        "mistake, within its deletion window: `aws kms cancel-key-deletion`, then `aws kms enable-key`",
    )


class KmsKek:
    """One KMS key, by ARN, wrapping and unwrapping data keys."""

    def __init__(self, client: Any, kek_id: str) -> None:
        self.client, self.kek_id, self.arn = client, kek_id, kek_id.removeprefix(KMS)

    @staticmethod
    def _context(key_id: str) -> dict[str, str]:
        return {"teamstore": "data-key", "key_id": key_id}

    def wrap(self, data_key: bytes, key_id: str) -> bytes:
        """``Encrypt`` the data key under this KMS key.

        Raises:
            KeyDestroyed: The KMS key is disabled or pending deletion. KeyUnavailable: KMS failed.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.client.encrypt(KeyId=self.arn, Plaintext=data_key, EncryptionContext=self._context(key_id))
        except (BotoCoreError, ClientError) as exc:
            raise self._failed(exc, "wrap a data key", "kms:Encrypt") from None
        return bytes(answer["CiphertextBlob"])

    def unwrap(self, wrapped: bytes, key_id: str) -> bytes:
        """``Decrypt`` the wrapped data key (KMS checks it names this key and the data key's id).

        Raises:
            DataKeyDamaged: KMS says the ciphertext is not valid (the row was changed).
            KeyDestroyed: The KMS key is disabled, pending deletion or gone. KeyUnavailable: KMS failed.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.client.decrypt(CiphertextBlob=wrapped, KeyId=self.arn,
                                         EncryptionContext=self._context(key_id))
        except (BotoCoreError, ClientError) as exc:
            if _code(exc) in {"InvalidCiphertextException", "IncorrectKeyException"}:
                raise damaged(self.kek_id) from None
            raise self._failed(exc, "unwrap a data key", "kms:Decrypt") from None
        return bytes(answer["Plaintext"])

    def _failed(self, exc: BaseException, action: str, permission: str) -> KeyDestroyed | KeyUnavailable:
        if _code(exc) in _GONE:
            return _beyond_use(_code(exc))
        return unavailable(exc, action, permission)


class KmsKeys:
    """The KMS keys this database's data keys are wrapped by.

    Args:
        client: A boto3 KMS client the caller owns; by default one from :func:`make_client`, made on first use.
    """

    def __init__(self, client: Any | None = None) -> None:
        self._client = client

    @property
    def client(self) -> Any:
        """The boto3 client (made on first use)."""
        if self._client is None:
            self._client = make_client()
        return self._client

    def get(self, kek_id: str) -> KmsKek:
        """The KMS KEK recorded as ``kek_id`` (``kms:<ARN>``)."""
        return KmsKek(self.client, kek_id)

    def resolve(self, key: str, named_by: str = "TEAMSTORE_KMS_KEY_ID") -> str:
        """The KEK id of the KMS key ``key`` names (an id, ARN or alias), by its ARN.

        Args:
            key: The key's id, ARN or alias.
            named_by: Where ``key`` came from (``TEAMSTORE_KMS_KEY_ID``, ``--to``), for the hint of an error.

        Raises:
            ConfigurationError: KMS knows no such key (or this role may not describe it), or it is not enabled.
            KeyUnavailable: KMS failed.
        """
        kek_id, state = self.describe(key, named_by)
        if state == "PendingDeletion":
            raise ConfigurationError(f"the KMS key {key!r} is scheduled for deletion",
                                     hint=f"name another key in {named_by}; or, if its deletion was scheduled by "
                                     "mistake, `aws kms cancel-key-deletion`, then `aws kms enable-key`")
        if state != "Enabled":
            raise ConfigurationError(f"the KMS key {key!r} is {state}, not enabled",
                                     hint=f"`aws kms enable-key`, or name another key in {named_by}")
        return kek_id

    def describe(self, key: str, named_by: str = "TEAMSTORE_KMS_KEY_ID") -> tuple[str, str]:
        """The KEK id of the KMS key ``key`` names, and its state (``Enabled``, ``PendingDeletion``, ...).

        Args:
            key: The key's id, ARN or alias.
            named_by: Where ``key`` came from, for the hint of an error.

        Raises:
            ConfigurationError: KMS knows no such key (or this role may not describe it).
            KeyUnavailable: KMS failed.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            meta = self.client.describe_key(KeyId=key)["KeyMetadata"]
        except (BotoCoreError, ClientError) as exc:
            if _code(exc) == "NotFoundException":
                raise ConfigurationError(
                    f"KMS has no key {key!r} (NotFoundException)",
                    hint=f"name a symmetric KMS key's id, ARN or alias in {named_by}; an alias must be in the "
                    "region AWS_DEFAULT_REGION names",
                ) from None
            if _code(exc) == "AccessDeniedException":
                raise ConfigurationError(
                    f"KMS refused to describe the key {key!r} (AccessDeniedException)",
                    hint="grant this process's role kms:DescribeKey on it, and kms:Encrypt and kms:Decrypt: every "
                    "worker wraps and unwraps data keys under it",
                ) from None
            raise unavailable(exc, "describe the key", "kms:DescribeKey") from None
        return f"{KMS}{meta['Arn']}", str(meta.get("KeyState"))

    def create(self, marked_by: str | None = None) -> str:
        """A new symmetric KMS key for a rotation (``kms:CreateKey``); its KEK id.

        Args:
            marked_by: The id of the database the key is made for: the key is made marked as its
                (:func:`mark_of`).

        Raises:
            KeyUnavailable: KMS failed or refused.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        tags = [_MADE, *([{"TagKey": mark_of(marked_by), "TagValue": MARK_VALUE}] if marked_by else [])]
        try:
            meta = self.client.create_key(Description="teamstore key-encryption key", KeyUsage="ENCRYPT_DECRYPT",
                                          Tags=tags)["KeyMetadata"]
        except (BotoCoreError, ClientError) as exc:
            raise unavailable(exc, "create a key-encryption key", "kms:CreateKey and kms:TagResource") from None
        return f"{KMS}{meta['Arn']}"

    def destroy(self, kek_id: str) -> bool:
        """Schedule the KMS key's deletion with the shortest window: unusable at once, deleted after it.

        Returns:
            False when KMS has no such key (deleted once its window ended, or by hand): nothing is left to destroy.

        Raises:
            KeyUnavailable: KMS failed or refused.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.schedule_key_deletion(KeyId=_key_id(kek_id), PendingWindowInDays=DELETION_WINDOW_DAYS)
        except (BotoCoreError, ClientError) as exc:
            if _code(exc) == "KMSInvalidStateException":
                return True  # already pending deletion
            if _code(exc) == "NotFoundException":
                return False
            raise unavailable(exc, "schedule the retired key's deletion", "kms:ScheduleKeyDeletion") from None
        return True

    def mark(self, kek_id: str, database: str) -> None:
        """Tag the KMS key as one the database ``database`` (its id) wraps data keys under (``kms:TagResource``;
        marking it again changes nothing).

        Raises:
            KeyUnavailable: KMS failed or refused (``AccessDeniedException``: the role lacks kms:TagResource).
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.tag_resource(KeyId=_key_id(kek_id), Tags=[{"TagKey": mark_of(database), "TagValue": MARK_VALUE}])
        except (BotoCoreError, ClientError) as exc:
            raise unavailable(exc, "mark the key-encryption key as this database's", "kms:TagResource") from None

    def marked_by(self, kek_id: str) -> set[str] | None:
        """The ids of the databases that mark the KMS key as one they wrap data keys under
        (``kms:ListResourceTags``), read before its deletion is scheduled; ``None`` when KMS has no such key.

        Raises:
            KeyDeletionRefused: KMS refused to list the tags (the role lacks kms:ListResourceTags): the deletion
                is refused too, since another database may still use the key.
            KeyUnavailable: KMS failed otherwise.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return self._marks(_key_id(kek_id))
        except (BotoCoreError, ClientError) as exc:
            if _code(exc) == "NotFoundException":
                return None
            if _code(exc) == "AccessDeniedException":
                raise KeyDeletionRefused(
                    f"the deletion of the retired KMS key-encryption key {kek_id.removeprefix(KMS)} was not scheduled: "
                    "KMS refused to list its tags (AccessDeniedException), so whether another database still wraps its "
                    "users' data keys under it is unknown", hint="grant this process's role kms:ListResourceTags on the "
                    "keys it retires, then run `teamstore keys retire` again", kek_id=kek_id, other_databases=None,
                ) from None
            raise unavailable(exc, "read the key-encryption key's tags", "kms:ListResourceTags") from None

    def _marks(self, key_id: str) -> set[str]:
        """The ids of the databases that mark the KMS key ``key_id``, read over every page of its tags (boto3's
        errors raised as they come)."""
        found: set[str] = set()
        asked: dict[str, Any] = {"KeyId": key_id}
        while True:
            page = self.client.list_resource_tags(**asked)
            found |= {str(t["TagKey"]).removeprefix(MARK_PREFIX) for t in page.get("Tags", [])
                      if str(t["TagKey"]).startswith(MARK_PREFIX)}
            if not page.get("Truncated") or not page.get("NextMarker"):
                return found
            asked["Marker"] = page["NextMarker"]

    def account_keys(self, limit: int) -> tuple[list[str], bool]:
        """The ARNs of at most ``limit`` KMS keys of the account and region (``kms:ListKeys``, 1,000 a page), and
        whether they are all of them.

        Raises:
            KeyUnavailable: KMS failed or refused.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        arns: list[str] = []
        asked: dict[str, Any] = {"Limit": min(max(limit, 1), 1000)}
        try:
            while len(arns) < limit:
                page = self.client.list_keys(**asked)
                arns += [str(k["KeyArn"]) for k in page.get("Keys", [])]
                if not page.get("Truncated") or not page.get("NextMarker"):
                    return arns[:limit], len(arns) <= limit
                asked["Marker"] = page["NextMarker"]
        except (BotoCoreError, ClientError) as exc:
            raise unavailable(exc, "list the account's KMS keys", "kms:ListKeys", reading=True) from None
        return arns[:limit], False

    def marked_keys(self, database: str, arns: list[str]) -> tuple[list[str], int]:
        """Those of the KMS keys ``arns`` that the database ``database`` marks (``kms:ListResourceTags`` on each),
        and how many would not show their tags (``AccessDeniedException``: a role granted it only on some keys).
        A key KMS no longer has is left out.

        Raises:
            KeyUnavailable: KMS failed otherwise.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        marked, refused = [], 0
        for arn in arns:
            try:
                if database in self._marks(_key_id(arn)):
                    marked.append(arn)
            except (BotoCoreError, ClientError) as exc:
                if _code(exc) == "AccessDeniedException":
                    refused += 1
                elif _code(exc) != "NotFoundException":
                    raise unavailable(exc, "read a KMS key's tags", "kms:ListResourceTags", reading=True) from None
        return marked, refused

    def metadata(self, kek_id: str) -> dict[str, Any] | None:
        """What KMS says of the key ``kek_id`` (``kms:DescribeKey``: its ``KeyState``, ``CreationDate``,
        ``DeletionDate``...); ``None`` when KMS will not say (no such key any more, or the role may not describe
        it).

        Raises:
            KeyUnavailable: KMS failed otherwise.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return dict(self.client.describe_key(KeyId=_key_id(kek_id))["KeyMetadata"])
        except (BotoCoreError, ClientError) as exc:
            if _code(exc) in {"NotFoundException", "AccessDeniedException"}:
                return None
            raise unavailable(exc, "describe a KMS key", "kms:DescribeKey", reading=True) from None
