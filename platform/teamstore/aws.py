"""What every boto3 client teamstore makes shares: short timeouts, and the retries the ``AWS_*`` variables set.

    from teamstore.aws import client_config

    session = boto3.session.Session()
    client = session.client("kms", config=client_config(session, connect_timeout=2.0, read_timeout=5.0,
                                                        max_attempts=2))

A client's ``Config`` outranks the ``AWS_*`` variables, so one built with retries of its own would ignore
``AWS_MAX_ATTEMPTS`` and ``AWS_RETRY_MODE`` (and the profile's ``max_attempts`` and ``retry_mode``) without a
word: they are read here and put in it. The S3 client (transcripts, the warehouse) and the KMS client both
build theirs with it.
"""

from __future__ import annotations

from typing import Any

from teamstore.errors import ConfigurationError


def client_config(session: Any, *, connect_timeout: float, read_timeout: float, max_attempts: int) -> Any:
    """A botocore ``Config`` with these timeouts, and ``max_attempts`` attempts per request (the first included)
    in standard mode unless ``AWS_MAX_ATTEMPTS`` or ``AWS_RETRY_MODE`` (or the profile's) set their own.

    Args:
        session: The ``boto3.session.Session`` the client is made from (its variables and profile are read).
        connect_timeout: Seconds to open a connection.
        read_timeout: Seconds to wait for a response.
        max_attempts: Attempts per request when nothing else sets them.

    Raises:
        ConfigurationError: The attempts set there are no whole number from 1.
        BotoCoreError: The profile does not exist or the config file does not parse (the caller says which to fix).
    """
    from botocore.config import Config

    attempts, mode = _retries(session._session, max_attempts)
    return Config(connect_timeout=connect_timeout, read_timeout=read_timeout,
                  retries={"total_max_attempts": attempts, "mode": mode})


def _retries(session: Any, max_attempts: int) -> tuple[int, Any]:
    """The attempts and mode: ``max_attempts`` in standard mode, unless the ``AWS_*`` variables or the profile
    set their own.

    Raises:
        ConfigurationError: The attempts set there are no whole number from 1.
    """
    from botocore.exceptions import BotoCoreError

    try:
        attempts = session.get_config_variable("max_attempts")
        mode = session.get_config_variable("retry_mode")
    except (ValueError, BotoCoreError):
        attempts = 0
    if attempts is not None and attempts < 1:
        raise ConfigurationError("AWS_MAX_ATTEMPTS (or the profile's max_attempts) is no whole number from 1",
                                 hint="set it to the attempts per request, the first included (e.g. 3), or unset it")
    return attempts or max_attempts, mode or "standard"
