"""What the libraries teamstore talks to AWS through may log.

    from teamstore.logs import keep_request_bodies_out_of_logs

    keep_request_bodies_out_of_logs()    # botocore, boto3 and s3transfer held at INFO, unless set already

At DEBUG botocore logs the body of every request it sends and every answer it parses. KMS's ``Encrypt``
and ``Decrypt`` carry a user's data key in plain (their ``Plaintext``), so a service logging at DEBUG would
write each data key it wraps or opens to its logs, where it outlives the erasure that destroys the key.
Every boto3 client teamstore makes, and every ``Platform``, holds these loggers at INFO first.
"""

from __future__ import annotations

import logging

AWS_SDK_LOGGERS = ("botocore", "boto3", "s3transfer")
"""The AWS SDK's loggers: at DEBUG they log requests' and answers' bodies and parameters."""


def keep_request_bodies_out_of_logs() -> None:
    """Raise each of :data:`AWS_SDK_LOGGERS` to INFO, unless the application has set its level itself.

    An application that sets one to DEBUG on purpose (``logging.getLogger("botocore").setLevel(logging.DEBUG)``)
    keeps that level, and with it users' data keys in its logs: docs/operations.md, *No message content in
    logs*, says when that is acceptable.
    """
    for name in AWS_SDK_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
