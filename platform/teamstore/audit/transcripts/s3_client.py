"""The boto3 client the S3 transcript store uses, and how its failures become teamstore errors.

    from teamstore.audit.transcripts.s3_client import make_client

    client = make_client(read_timeout=5.0)     # AWS_* variables decide credentials, region and endpoint
    store = S3TranscriptStore(client, "audit-bucket", "teamstore")

Two translations: :func:`translate` for the store's everyday requests (put, get, list, delete, configure),
whose messages may name the key asked for; :func:`without_keys` for the version-level requests erasure
makes, whose messages name the failure by class and S3 error code only, never a key or URL (those hold the
subject key, and the text goes into an erasure receipt).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult, urlsplit

from teamstore.audit.transcripts.capabilities import AWS_OWN, aws_host
from teamstore.aws import client_config
from teamstore.errors import (
    ConfigurationError,
    MissingExtra,
    StorageError,
    TranscriptNotFound,
    TranscriptStoreGone,
    TranscriptUnavailable,
    UploadInDoubt,
)
from teamstore.logs import keep_request_bodies_out_of_logs

RETRY_GUARD = "teamstore-no-retry-after-unanswered-put"
"""The id of the ``needs-retry`` hook that ends the retries of a PUT S3 may have received."""
_NEEDS = {
    "write": "s3:PutObject on the transcript prefix",
    "read": "s3:GetObject on the transcript prefix",
    "list": "s3:ListBucket on the bucket",
    "delete": "s3:ListBucketVersions, s3:DeleteObject and s3:DeleteObjectVersion on the transcript prefix",
    "mark": "s3:GetObject and s3:PutObject on the transcript prefix",
    "look up": "s3:GetObject on the transcript prefix and s3:ListBucket on the bucket",
    "configure": "s3:GetLifecycleConfiguration and s3:PutLifecycleConfiguration on the bucket",
}
"""What an access-denied request of each kind needs."""
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_CREDENTIALS_REFUSED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
"""S3's codes for credentials it does not take: a key id it does not know, a secret that is not the key id's, an
expired or malformed session token. No permission granted fixes them."""
_WRONG_REGION = {"AuthorizationHeaderMalformed", "PermanentRedirect", "IllegalLocationConstraintException"}
"""S3's codes for a request signed for, or sent to, another region than the bucket's (botocore follows AWS's own
redirects; an S3-compatible endpoint answers with these)."""
CREDENTIALS_FIX = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or give the process a role"
REGION_FIX = "set AWS_DEFAULT_REGION (or AWS_REGION) to the bucket's region, and AWS_ENDPOINT_URL_S3 to its endpoint"
PARTIAL_CREDENTIALS = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY together (an empty one counts as missing), "
                       "or unset both for a profile or a role")
"""The fix for a key id without its secret (or the reverse), which botocore refuses as it makes a client."""
VERSIONS_NEED = "fix S3 access (s3:ListBucketVersions, s3:DeleteObjectVersion, s3:GetObjectVersion)"
"""What the version-level requests need, as their errors' hint says."""


def unanswered(exc: BaseException) -> bool:
    """Whether a request that failed with ``exc`` may have reached S3 and be stored all the same: it failed
    while being sent or answered (a read timeout, a dropped connection, a TLS failure). A failure to connect
    sends nothing, one before sending (credentials) sends nothing, and S3's own error answers (``ClientError``)
    store nothing."""
    from botocore.exceptions import HTTPClientError, SSLError

    return isinstance(exc, HTTPClientError | SSLError)


def no_retry_after_unanswered(caught_exception: BaseException | None = None, **_: Any) -> bool | None:
    """botocore's ``needs-retry`` hook for ``PutObject``: after an attempt S3 may have received, do not send
    another (False ends the retries); otherwise let the client's retry policy decide (None)."""
    if caught_exception is not None and unanswered(caught_exception):
        return False
    return None


def _boto3() -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise MissingExtra("S3 transcripts", "s3", "boto3") from exc
    return boto3


def make_client(connect_timeout: float = 2.0, read_timeout: float = 5.0, max_attempts: int = 2) -> Any:
    """A boto3 S3 client with short timeouts and few retries.

    Args:
        connect_timeout: Seconds to open a connection.
        read_timeout: Seconds to wait for a response.
        max_attempts: Total attempts per request, the first included, unless ``AWS_MAX_ATTEMPTS`` (or the
            profile's ``max_attempts``) says otherwise.

    Returns:
        The client (``AWS_*`` variables decide credentials, region, endpoint and retries).

    Raises:
        ConfigurationError: The ``AWS_*`` variables name an endpoint that is no http(s) URL (with a host and a port
            that is a number in range), a malformed region,
            a profile that does not exist, a config file that does not parse or attempts that are no whole
            number from 1.
        MissingExtra: boto3 is not installed.
    """
    boto3 = _boto3()
    from botocore.exceptions import BotoCoreError, PartialCredentialsError

    keep_request_bodies_out_of_logs()

    try:
        session = boto3.session.Session()
        config = client_config(session, connect_timeout=connect_timeout, read_timeout=read_timeout,
                               max_attempts=max_attempts)
        client = session.client("s3", config=config)
    except BotoCoreError as exc:  # names the region, profile, file or missing variable, never a credential
        raise ConfigurationError(
            f"could not set up the S3 client: {exc}",
            hint=PARTIAL_CREDENTIALS if isinstance(exc, PartialCredentialsError)
            else "fix AWS_DEFAULT_REGION, AWS_PROFILE, AWS_RETRY_MODE or AWS_CONFIG_FILE (or unset them)",
        ) from None
    except ValueError:
        # botocore's message repeats the endpoint, which may carry credentials (http://key:secret@host).
        raise _bad_endpoint() from None
    _check_endpoint(str(client.meta.endpoint_url))
    return client


_DEFAULT_PORTS = {"http": 80, "https": 443}


def recorded_endpoint(url: str) -> str:
    """The endpoint a client talks to, as recorded with the stores it reaches: :data:`AWS_OWN` for AWS's own S3 (a
    host of S3's under ``amazonaws.com``: ``s3.<region>``, ``s3-<region>``, a bucket's, a VPC endpoint's, an access
    point's; not another AWS host, such as a load balancer's or an instance's in front of a MinIO), else its
    scheme, host and port (none for the scheme's default), never a user or password the URL carries (credentials
    come from the ``AWS_*`` variables). Never raises: a port that is no number is kept as written."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if aws_host(host) and not _AWS_OTHER.intersection(labels := host.split(".")) and any(
            label == "s3" or label.startswith(("s3-", "s3express-")) for label in labels):
        return AWS_OWN
    scheme, where = parts.scheme.lower(), parts.netloc.rpartition("@")[2].lower()
    if (port := _port(parts)) is not None:
        host = f"[{host}]" if ":" in host else host
        where = host if port in (0, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    return f"{scheme}://{where}{parts.path.rstrip('/')}"


_AWS_OTHER = frozenset({"elb", "compute", "compute-1", "execute-api"})
"""Labels of AWS hosts that are no S3 endpoint, whatever their user-chosen first label (``s3-minio.elb...``)."""


def _port(parts: SplitResult) -> int | None:
    """The URL's port (0 when it names none); None when it is no number in range."""
    try:
        return parts.port or 0
    except ValueError:
        return None


def _check_endpoint(url: str) -> None:
    """Refuse an endpoint no request can reach: botocore takes any scheme (htps://, ftp://) and any port
    (``:99999``, ``:9000;x``) and fails each request, so every transcript would go to the outbox as if S3 were
    down."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in _DEFAULT_PORTS or not parts.hostname or _port(parts) is None:
        raise _bad_endpoint()


def _bad_endpoint() -> ConfigurationError:
    return ConfigurationError(
        "AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL) is not an http:// or https:// URL with a host and, if any, "
        "a port up to 65535",
        hint="set it to the S3-compatible endpoint, e.g. http://minio:9000, or unset it for AWS",
    )


def error_code(exc: BaseException) -> str:
    """S3's error code of a ``ClientError`` (``""`` for any other failure)."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def describe(exc: BaseException) -> str:
    """The error's class and S3 error code, never its text: botocore quotes the request's URL or key."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        return f"{type(exc).__name__} {error_code(exc) or 'unknown'} in {exc.operation_name}"
    return type(exc).__name__


def without_keys(exc: Exception, action: str, bucket: str) -> TranscriptUnavailable:
    """A failed version-level request (``action``: "list object versions", ...) as an error naming no key; a
    bucket that does not exist is :class:`~teamstore.errors.TranscriptStoreGone`."""
    kind = TranscriptStoreGone if error_code(exc) == "NoSuchBucket" else TranscriptUnavailable
    return kind(f"could not {action} in bucket {bucket!r}: {describe(exc)}",
                                 hint=fix_for(exc, VERSIONS_NEED))


def fix_for(exc: BaseException, permissions: str) -> str:
    """What to do about a failed request, by its kind: ``permissions`` (what to grant) only when S3 refused
    access, since an endpoint that does not answer or a missing bucket is no permission to grant."""
    from botocore.exceptions import (
        BotoCoreError,
        CredentialRetrievalError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    code = error_code(exc)
    if code == "NoSuchBucket":
        return "create the bucket or fix the URL that names it"
    if code in _CREDENTIALS_REFUSED or isinstance(
        exc, NoCredentialsError | PartialCredentialsError | CredentialRetrievalError
    ):
        return CREDENTIALS_FIX
    if code in _WRONG_REGION:
        return REGION_FIX
    if isinstance(exc, BotoCoreError):
        return "check AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL) and the network: S3 did not answer"
    return permissions


def translate(exc: Exception, action: str, bucket: str, key: str) -> Exception:
    """Turn a botocore error into a teamstore error that says what to do."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        CredentialRetrievalError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    # Only a failed upload leaves a transcript in the outbox: a read or `retention apply` queues nothing.
    queued = "; transcripts wait in the outbox (teamstore transcripts flush)" if action == "write" else ""
    if isinstance(exc, ClientError):
        return _answered(exc, action, bucket, key, queued)
    if isinstance(exc, NoCredentialsError | PartialCredentialsError | CredentialRetrievalError):
        return TranscriptUnavailable(
            f"could not {action} transcripts: no usable AWS credentials ({type(exc).__name__})",
            hint=fix_for(exc, "") + queued,
        )
    if action == "write" and unanswered(exc):
        return UploadInDoubt(
            f"S3 too slow or cut off while answering a transcript upload ({type(exc).__name__}): it may land all the "
            "same",
            hint="check AWS_ENDPOINT_URL_S3 / network; the transcript waits in the outbox and is sent again once "
            "the first upload can no longer land (TEAMSTORE_LATE_UPLOAD_SECONDS)",
        )
    if isinstance(exc, BotoCoreError):
        return TranscriptUnavailable(
            f"could not {action} transcripts: S3 unreachable or too slow ({type(exc).__name__})",
            hint=fix_for(exc, "") + queued,
        )
    if isinstance(exc, StorageError | TranscriptUnavailable):
        return exc
    return TranscriptUnavailable(f"could not {action} transcripts: {type(exc).__name__}: {exc}")


def _answered(exc: Exception, action: str, bucket: str, key: str, queued: str) -> Exception:
    """S3's own error answer (a ``ClientError``) as a teamstore error (``queued`` ends a fix of credentials: a
    key S3 does not take fails every upload alike)."""
    code = error_code(exc)
    if code in _NOT_FOUND:
        return TranscriptNotFound(f"no transcript at {key}", hint="check the user, session and run id")
    if code == "NoSuchBucket":
        return TranscriptStoreGone(
            f"could not {action} transcripts: bucket {bucket!r} does not exist",
            hint="create the bucket or fix TEAMSTORE_TRANSCRIPTS_URL",
        )
    if code in _CREDENTIALS_REFUSED:  # no role's permission fixes a key S3 does not know
        return TranscriptUnavailable(
            f"could not {action} transcripts in bucket {bucket!r}: S3 refused the AWS credentials ({code})",
            hint=f"{CREDENTIALS_FIX} that S3 accepts{queued}",
        )
    if code in _WRONG_REGION:
        return TranscriptUnavailable(
            f"could not {action} transcripts: bucket {bucket!r} is not in the region the client uses ({code})",
            hint=REGION_FIX + queued,
        )
    if code in {"AccessDenied", "AllAccessDisabled"}:
        return TranscriptUnavailable(
            f"could not {action} transcripts in bucket {bucket!r}: access denied ({code})",
            hint=f"grant the worker's role {_NEEDS[action]}",
        )
    return TranscriptUnavailable(f"could not {action} transcripts in {bucket!r}: S3 said {code}: {exc}")
