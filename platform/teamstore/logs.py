"""What the libraries teamstore talks to AWS, model providers and collectors through may log.

    from teamstore.logs import keep_query_values_out_of_logs, keep_request_bodies_out_of_logs

    keep_request_bodies_out_of_logs()    # botocore, boto3 and s3transfer held at INFO, unless set already
    keep_query_values_out_of_logs()      # httpx's and urllib3's request lines without their query's values

At DEBUG botocore logs the body of every request it sends and every answer it parses. KMS's ``Encrypt``
and ``Decrypt`` carry a user's data key in plain (their ``Plaintext``), so a service logging at DEBUG would
write each data key it wraps or opens to its logs, where it outlives the erasure that destroys the key.
Every boto3 client teamstore makes, and every ``Platform``, holds these loggers at INFO first.
"""

from __future__ import annotations

import logging
import re

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


URL_LOGGERS = ("httpx", "httpx2", "urllib3.connectionpool")
"""Loggers that quote the URLs of the requests they send: httpx's at INFO (``HTTP Request: POST <url> ...``,
for every model call; ``httpx2`` where the OpenAI SDK is built on that fork of it), urllib3's at WARNING (a
retry) and DEBUG (each request), under botocore and the OTLP exporter."""

# A query's (or fragment's) value, and a password in the user part of a URL.
_QUERY_VALUE = re.compile(r"([?&;#][^=&;#?\s\"']*=)[^&;#\s\"']*")
_PASSWORD = re.compile(r"(//[^/@\s:\"']*:)[^/@\s\"']*@")


def hide_query_values(text: str) -> str:
    """``text`` with the value of every URL query parameter, and a URL's password, replaced by ``***``: an
    OpenAI-compatible gateway may take its key in the ``base_url`` (``?api-key=...``, ``?key=...``, ``?code=...``),
    which the client sends with every request."""
    return _PASSWORD.sub(r"\1***@", _QUERY_VALUE.sub(r"\1***", text))


class _QueryValuesHidden(logging.Filter):
    """Hides the query values (:func:`hide_query_values`) of a URL a record quotes, in its message or its
    arguments (httpx passes its ``URL`` object, which is formatted only when a handler writes the line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(_hidden(arg) for arg in record.args)
        elif isinstance(record.msg, str):  # a message already formatted (one with arguments is a format)
            record.msg = hide_query_values(record.msg)
        return True


def _hidden(arg: object) -> object:
    if isinstance(arg, int | float):  # formatted with %d
        return arg
    said = str(arg)
    hidden = hide_query_values(said)
    return arg if hidden == said else hidden  # an argument with nothing to hide stays as it was (%r)


_HIDDEN = _QueryValuesHidden()


def keep_query_values_out_of_logs() -> None:
    """Install :class:`_QueryValuesHidden` on each of :data:`URL_LOGGERS` (once per process), whatever their
    level."""
    for name in URL_LOGGERS:
        logger = logging.getLogger(name)
        if _HIDDEN not in logger.filters:
            logger.addFilter(_HIDDEN)
