"""An S3 prefix (or any S3-compatible store) as an export destination: each partition is one PUT, which
replaces the object whole; the ``AWS_*`` variables decide credentials, region and endpoint, as for
transcripts."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from teamstore.audit.transcripts.s3_client import describe, fix_for, make_client
from teamstore.errors import LedgerExportFailed


class S3Partitions:
    """Partition objects under ``s3://bucket/prefix``.

    Args:
        client: A boto3 S3 client (:meth:`from_url` makes one from the ``AWS_*`` variables).
        bucket: The bucket.
        prefix: The key prefix, without a trailing slash (may be empty).
    """

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._spool = Path(tempfile.mkdtemp(prefix="teamstore-export-"))

    @classmethod
    def from_url(cls, bucket: str, prefix: str) -> S3Partitions:
        """A destination with a client made from the ``AWS_*`` variables (a PUT may take a while: a minute's
        read timeout, one retry)."""
        return cls(make_client(read_timeout=60.0, max_attempts=2), bucket, prefix)

    def stage(self, key: str) -> Path:
        """A file in a private temporary folder, uploaded by :meth:`commit`."""
        return self._spool / key.replace("/", "_")

    def commit(self, key: str, staged: Path) -> None:
        """One PUT of the whole file (objects up to 5 GB; a day of the ledger is far below)."""
        from botocore.exceptions import BotoCoreError, ClientError

        full = f"{self.prefix}/{key}" if self.prefix else key
        try:
            with staged.open("rb") as body:
                self.client.put_object(Bucket=self.bucket, Key=full, Body=body,
                                       ContentType="application/vnd.apache.parquet")
        except (BotoCoreError, ClientError) as exc:  # named by class and S3's code: botocore's text quotes URLs
            raise LedgerExportFailed(
                f"could not upload {key!r} to bucket {self.bucket!r}: {describe(exc)}",
                hint=f"{fix_for(exc, 'grant s3:PutObject on the prefix')}, then export again",
            ) from None
        finally:
            self.discard(staged)

    def discard(self, staged: Path) -> None:
        """Remove a spooled file."""
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()

    def close(self) -> None:
        """Remove the spool folder."""
        shutil.rmtree(self._spool, ignore_errors=True)
