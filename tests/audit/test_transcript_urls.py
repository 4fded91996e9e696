"""TEAMSTORE_TRANSCRIPTS_URL as operators write it: each mistake a typed error that repeats no credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from teamstore.audit.transcripts import transcript_store_from_url
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.errors import ConfigurationError


@pytest.mark.parametrize("url", [
    "s3://[/]",                       # not a URL at all (urlparse raised ValueError)
    "s3://",                          # no bucket
    "s3://AKIAEXAMPLE:s3cret@bucket/p",  # credentials where the bucket goes
    "s3://bucket name/p",
    "ftp://host/x",
    "file://transcripts",             # a host named "transcripts": it was the working directory
    "file://files.internal/srv/t",
    "file://",
    "",
])
def test_a_transcripts_url_that_names_no_store_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        transcript_store_from_url(url)
    assert "s3cret" not in caught.value.message and caught.value.hint


def test_a_folder_url_or_a_bare_path_is_a_local_store(tmp_path: Path) -> None:
    assert isinstance(transcript_store_from_url(tmp_path.as_uri()), LocalTranscriptStore)
    assert isinstance(transcript_store_from_url(str(tmp_path)), LocalTranscriptStore)
    assert transcript_store_from_url(f"file://localhost{tmp_path}").root == tmp_path


@pytest.mark.parametrize(("variable", "value"), [
    ("AWS_ENDPOINT_URL_S3", "minio:9000 with s3cret"),  # not a URL (botocore raised ValueError repeating it)
    ("AWS_ENDPOINT_URL_S3", "http://[key:s3cret@minio"),
    # botocore made a client of these and failed every request: each transcript went to the outbox
    ("AWS_ENDPOINT_URL_S3", "htps://key:s3cret@minio:9000"),
    ("AWS_ENDPOINT_URL", "ftp://minio:9000"),
    # and of these, whose port is no number in range: a writer then failed recording its store
    ("AWS_ENDPOINT_URL_S3", "http://key:s3cret@127.0.0.1:99999"),
    ("AWS_ENDPOINT_URL_S3", "http://key:s3cret@minio:9000;x"),
    ("AWS_DEFAULT_REGION", "eu west 1"),
    ("AWS_PROFILE", "no-such-profile"),
])
def test_aws_variables_that_cannot_make_a_client_are_a_configuration_error(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as caught:
        transcript_store_from_url("s3://audit/teamstore")
    assert "s3cret" not in caught.value.message and caught.value.hint


def test_a_key_id_without_its_secret_says_to_set_both_not_the_region(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # It said to fix AWS_DEFAULT_REGION, AWS_PROFILE or AWS_CONFIG_FILE, none of which was wrong.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "")  # as an unset shell variable leaves it
    with pytest.raises(ConfigurationError, match="AWS_SECRET_ACCESS_KEY") as caught:
        transcript_store_from_url("s3://audit/teamstore")
    assert "AKIDEXAMPLE" not in caught.value.message
    assert caught.value.hint and "AWS_SECRET_ACCESS_KEY" in caught.value.hint and "REGION" not in caught.value.hint
