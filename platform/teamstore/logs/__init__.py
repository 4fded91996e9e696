"""What the libraries teamstore talks to AWS, model providers and collectors through may log, and what AutoGen may.

    from teamstore.logs import keep_query_values_out_of_logs, keep_request_bodies_out_of_logs

    keep_request_bodies_out_of_logs()    # botocore, boto3 and s3transfer held at INFO, unless set already;
                                         # KMS's bodies out of botocore's DEBUG lines, whatever its level
    keep_query_values_out_of_logs()      # httpx's and urllib3's request lines without their query's values
    keep_content_out_of_logs()           # AutoGen's loggers at WARNING, their failures by type only, asyncio's
                                         # records of unhandled failures without the task, callback or failure
                                         # they quote, and the model SDKs' DEBUG record of each request without
                                         # its body

At DEBUG botocore logs the body of every request it sends and every answer it parses. KMS's ``Encrypt``
and ``Decrypt`` carry a user's data key in plain (their ``Plaintext``), so a service logging at DEBUG would
write each data key it wraps or opens to its logs, where it outlives the erasure that destroys the key.
Every boto3 client teamstore makes, and every ``Platform``, holds these loggers at INFO first.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import Callable
from typing import Any

from teamstore.logs.event_loop import asyncio_left_out

AWS_SDK_LOGGERS = ("botocore", "boto3", "s3transfer")
"""The AWS SDK's loggers: at DEBUG they log requests' and answers' bodies and parameters."""


def keep_request_bodies_out_of_logs() -> None:
    """Raise each of :data:`AWS_SDK_LOGGERS` to INFO, unless the application has set its level itself, and
    install :class:`_KmsBodiesHidden` (once per process), whatever their level.

    An application that sets one to DEBUG on purpose (``logging.getLogger("botocore").setLevel(logging.DEBUG)``)
    keeps that level, and sees every request's and answer's body but KMS's, which hold users' data keys in
    plain: docs/operations.md, *No message content in logs*, says when that is acceptable.
    """
    for name in AWS_SDK_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    for name in _BODY_LOGGERS:
        logger = logging.getLogger(name)
        if _KMS_BODIES_HIDDEN not in logger.filters:
            logger.addFilter(_KMS_BODIES_HIDDEN)


_BODY_LOGGERS = ("botocore.endpoint", "botocore.parsers")
"""Where botocore logs bodies at DEBUG: each request's parameters, its body included, and each answer's body."""
_BODY_HIDDEN = b"[KMS body hidden: it holds a data key in plain]"


class _KmsBodiesHidden(logging.Filter):
    """Keeps the body of every KMS request and answer out of botocore's DEBUG lines: ``Encrypt``'s request and
    ``Decrypt``'s answer carry a user's data key in plain (``Plaintext``), which would open that user's sealed
    data for whoever keeps the log, long after an erasure destroyed the key. Other services' bodies stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.args, tuple):
            return True
        if record.name == "botocore.endpoint" and len(record.args) == 2 and _is_kms(record.args[0]):
            operation, request = record.args
            if isinstance(request, dict) and "body" in request:
                record.args = (operation, {**request, "body": _BODY_HIDDEN})
        elif record.name == "botocore.parsers" and any(
                isinstance(a, bytes) and b'"Plaintext"' in a for a in record.args):
            record.args = tuple(_BODY_HIDDEN if isinstance(a, bytes) else a for a in record.args)
        return True


def _is_kms(operation: object) -> bool:
    service = getattr(getattr(operation, "service_model", None), "service_name", None)
    return service == "kms"


_KMS_BODIES_HIDDEN = _KmsBodiesHidden()


_OTLP = "opentelemetry.exporter.otlp"
URL_LOGGERS = ("httpx", "httpx2", "urllib3.connectionpool", "openai._base_client", "anthropic._base_client",
               f"{_OTLP}.common.http", f"{_OTLP}.proto.http._common", f"{_OTLP}.proto.http.trace_exporter",
               f"{_OTLP}.proto.http.metric_exporter", f"{_OTLP}.proto.http._log_exporter",
               f"{_OTLP}.proto.grpc.exporter", f"{_OTLP}.proto.grpc.trace_exporter",
               f"{_OTLP}.proto.grpc.metric_exporter")
"""Loggers that quote the URLs of the requests they send: httpx's at INFO (``HTTP Request: POST <url> ...``,
for every model call; ``httpx2`` where the OpenAI SDK is built on that fork of it), urllib3's at WARNING (a
retry) and DEBUG (each request), under botocore and the OTLP exporter, the OpenAI (before version 3) and
Anthropic SDKs' at DEBUG (``HTTP Response: POST <url> "200 OK" ...``), and the OTLP exporters' at WARNING and
ERROR (a failed export quotes its request's error, and with it the collector's URL)."""

# A query's (or fragment's) value (up to the next parameter: a ";" is taken as part of it), a query of a bare
# value, and a password in the user part of a URL (up to its last "@", which a password may hold).
_QUERY_VALUE = re.compile(r"([?&;#][^=&;#?\s\"']*=)[^&#\s\"']*")
_BARE_QUERY = re.compile(r"([?&])[^=&#?\s\"']+(?=[&#\s\"']|$)")
_PASSWORD = re.compile(r"(//[^/@\s:\"']*:)[^/\s\"']*@")


def hide_query_values(text: str) -> str:
    """``text`` with the value of every URL query parameter (a bare ``?token`` too), and a URL's password,
    replaced by ``***``: an OpenAI-compatible gateway may take its key in the ``base_url`` (``?api-key=...``,
    ``?key=...``, ``?code=...``), which the client sends with every request."""
    return _PASSWORD.sub(r"\1***@", _BARE_QUERY.sub(r"\1***", _QUERY_VALUE.sub(r"\1***", text)))


class _QueryValuesHidden(logging.Filter):
    """Hides the query values (:func:`hide_query_values`) of a URL a record quotes, in its message or its
    arguments (httpx passes its ``URL`` object, which is formatted only when a handler writes the line), and in
    the exception it carries: the OpenAI (before version 3) and Anthropic SDKs log each failed request's
    ``httpx.HTTPStatusError``, whose message holds the URL. The exception then reaches handlers as text only
    (``exc_text``, which formatters print in its place): a handler reading the exception itself (OpenTelemetry's
    ``LoggingHandler``) would take its message whole."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(_hidden(arg) for arg in record.args)
        elif isinstance(record.msg, str):  # a message already formatted (one with arguments is a format)
            record.msg = hide_query_values(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = hide_query_values(_TRACEBACKS.formatException(record.exc_info))
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = hide_query_values(record.exc_text)
        return True


_TRACEBACKS = logging.Formatter()


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


AUTOGEN_PACKAGES = ("autogen_core", "autogen_agentchat", "autogen_ext")
"""AutoGen's packages: their loggers are named after them (``autogen_core.events``, ``autogen_ext.tools.mcp._actor``)
and log users' words: messages and tool calls at INFO and DEBUG, failures whose messages quote them at ERROR."""


def keep_content_out_of_logs() -> None:
    """Raise each of :data:`AUTOGEN_PACKAGES`' loggers to WARNING, unless the application has set its level itself,
    and install :class:`_AutoGenRecords` (once per process), which leaves out what the records it lets through may
    quote of users' words, on every logger of those packages, those made later included, and on asyncio's; and
    :class:`_RequestOptionsLeftOut` on :data:`MODEL_SDK_LOGGERS`, whatever their level.

    A Platform does this unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` opts in to message content
    in telemetry, so a service logging at INFO (or DEBUG) does not write its users' messages to its logs.
    """
    for name in AUTOGEN_PACKAGES:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
    still_content_left_out()
    for name in MODEL_SDK_LOGGERS:
        logger = logging.getLogger(name)
        if _REQUESTS_LEFT_OUT not in logger.filters:
            logger.addFilter(_REQUESTS_LEFT_OUT)


MODEL_SDK_LOGGERS = ("openai._base_client", "anthropic._base_client")
"""Where the model providers' SDKs log each request they build at DEBUG (``Request options: {...}``), its
``json_data`` holding every message sent: openai 1.x and 2.x, which autogen-ext's ``openai`` extra allows,
and the anthropic SDK. (openai 3 logs no body.)"""


class _RequestOptionsLeftOut(logging.Filter):
    """The SDKs' ``Request options`` record with the request's method and path only: its body and query are
    the messages sent to the model and its parameters, users' words among them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith("Request options"):
            options = record.args if isinstance(record.args, dict) else {}
            record.msg = "Request options: %s %s (the rest is left out: it holds the messages sent)"
            record.args = (options.get("method", "?"), hide_query_values(str(options.get("url", "?"))))
        return True


_REQUESTS_LEFT_OUT = _RequestOptionsLeftOut()


_ours_set = False  # whether this process has set the factory once (a later replacement is then news)
_said_replaced: object = None  # the last factory found to have replaced ours unchained: said once each


def still_content_left_out() -> bool:
    """Install :class:`_AutoGenRecords` again if the record factory in place does not leave content out: one set
    since that did not call the one it replaced (a Platform checks at each session's opening). Returns whether
    it had to; the first time it replaces a factory set since, it says so at WARNING."""
    global _ours_set, _said_replaced
    current = logging.getLogRecordFactory()
    if _leaves_content_out(current):
        return False
    if _ours_set and _said_replaced is not current:
        _said_replaced = current
        logging.getLogger("teamstore.logs").warning(
            "a log record factory set since teamstore's did not call the one it replaced; teamstore's is set "
            "again on top of it, so that AutoGen's records leave users' words out (a factory should call the one "
            "it replaces)")
    _ours_set = True
    logging.setLogRecordFactory(_AutoGenRecords(current))
    return True


def _is_autogens(name: str) -> bool:
    return name.partition(".")[0] in AUTOGEN_PACKAGES


class _AutoGenRecords:
    """The log record factory (:func:`logging.setLogRecordFactory`) that passes each record of an AutoGen logger
    through :func:`_leave_content_out`, and each of asyncio's through :func:`~teamstore.logs.event_loop.asyncio_left_out` (asyncio logs from
    wherever the collector runs, so no filter of the caller's sees it first), and makes every other as the
    factory it replaced does.

    A logger's filters see only the records logged on that very logger, and AutoGen logs on dozens, some made
    only once a team's component is loaded (``autogen_ext.tools.mcp._actor``, ``autogen_ext.memory.*``); the
    record factory sees each record of each logger as it is made, while the failure it reports is still the
    one being handled. A factory an application sets later keeps this one working by calling the one it
    replaces, as Python's documentation asks (OpenTelemetry's logging instrumentation does).
    """

    def __init__(self, made_by: Callable[..., logging.LogRecord]) -> None:
        self.made_by = made_by

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.made_by(*args, **kwargs)
        if record.name is None and type(record) is logging.LogRecord:  # logging.makeLogRecord's: filled in after
            record.__class__ = _RebuiltRecord
        else:
            content_left_out(record)
        return record


def content_left_out(record: logging.LogRecord) -> None:
    """Leave out of ``record`` what it may quote of users' words, by the logger it is of: AutoGen's
    (:func:`_leave_content_out`) and asyncio's (:func:`asyncio_left_out`); any other's is left as it is."""
    name = record.name if isinstance(record.name, str) else ""
    if _is_autogens(name):
        if record.exc_text and not record.exc_info:  # rebuilt from another process: its traceback as text
            record.exc_text = None
            record.msg = f"{record.msg} (its traceback is left out: it may quote users' words)"
        _leave_content_out(record)
        setattr(record, _MARK, True)
    elif name.partition(".")[0] == "asyncio":
        asyncio_left_out(record)


class _RebuiltRecord(logging.LogRecord):
    """A record :func:`logging.makeLogRecord` makes (what a socket log receiver rebuilds from another process's):
    its name, message and failure are set only once the factory has made it, so its content is left out when
    it is first read, as every handler's formatter reads it (:meth:`getMessage`)."""

    teamstore_read = False

    def getMessage(self) -> str:
        if not self.teamstore_read:
            self.teamstore_read = True
            content_left_out(self)
        return super().getMessage()


_MARK = "teamstore_content_left_out"
"""The attribute each AutoGen record this module has seen carries: how a factory is known to chain to it (a
factory of the host's that drops tracebacks by itself must not pass for it)."""
_WAS_CANCELLED = "teamstore_cancelled"
"""Whether the failure a record reported was a cancellation, kept once its traceback is left out (a filter reads
it). A bool: OpenTelemetry's logging handler sends a record's extra attributes as they are, and warns on a type."""


def _leaves_content_out(factory: Callable[..., logging.LogRecord]) -> bool:
    """Whether records ``factory`` makes for AutoGen's loggers leave a failure's message out: ours, or one that
    calls ours (a factory set since, that chains)."""
    probe = ValueError("probe")
    record = factory("autogen_core", logging.ERROR, __file__, 0, "probe", None, (ValueError, probe, None))
    return bool(getattr(record, _MARK, False))


def _leave_content_out(record: logging.LogRecord) -> None:
    """Keep ``record`` without the words it may quote: a failure's message and traceback (its type stays), and
    the message part autogen-ext's OpenAI client warns it cannot count (:func:`_part_left_out`).

    A failure is the record's own exception (``exc_info``), or, for a record that has none, the exception
    being handled as it is logged, when the record's message holds that exception's text: autogen-ext's
    ChromaDB and mem0 memories log ``f"Failed to add content to ChromaDB: {e}"`` at ERROR, Azure AI Search
    ``f"Error processing search document: {e}"`` at WARNING. A cancellation is a failure like any other (what it
    interrupted, in its context, may quote users' words); :class:`_CancelledIsNotAnError` drops autogen-core's
    record of one by the type kept on the record."""
    try:
        traced = record.exc_info[1] if record.exc_info else None
        error = traced
        if error is None and isinstance(record.msg, str):  # an event object (the metering tap reads them) stays
            error = sys.exc_info()[1]
        if traced is not None:
            setattr(record, _WAS_CANCELLED, isinstance(traced, asyncio.CancelledError))
        if error is not None:
            _type_only(record, error, traced=traced is not None)
        _part_left_out(record)
    except Exception:  # a record whose message does not format: a handler would report it, never the caller
        record.msg, record.args, record.exc_info, record.exc_text = (
            "a record of AutoGen's whose message could not be read (left out: it may quote users' words)",
            None, None, None)


def _type_only(record: logging.LogRecord, error: BaseException, *, traced: bool) -> None:
    """The record with ``error``'s type in place of its message (wherever the record's message quotes it) and of
    its traceback. An exception's message often quotes users' words: a structured output the model got wrong is
    a pydantic error holding the model's reply, a tool's failure its arguments, a provider's refusal the request."""
    # An event object's text is its messages: it is named by its type.
    message = shown = record.getMessage() if isinstance(record.msg, str) else type(record.msg).__name__
    for said in _texts_of(error):  # autogen-core puts some exceptions' text in the message itself
        shown = shown.replace(said, "...")
    if not traced and shown == message:  # logged while handling a failure it does not quote
        return
    what = "its message and traceback are left out: they" if traced else "its message is left out: it"
    record.msg = f"{shown} ({type(error).__name__}; {what} may quote users' words)"
    record.args, record.exc_info, record.exc_text = None, None, None


def _texts_of(error: BaseException) -> list[str]:
    """What a message may quote of ``error``: the text and repr of it, of the failures it was raised from or
    while handling (``__cause__``, ``__context__``) and of an exception group's members, and each of their text
    arguments; longest first, so a quote of one that holds another goes whole."""
    texts: set[str] = set()
    seen: set[int] = set()
    pending = [error]
    while pending and len(seen) < 32:
        each = pending.pop()
        if id(each) in seen:
            continue
        seen.add(id(each))
        texts.update((repr(each), str(each), *(str(a) for a in each.args if isinstance(a, str))))
        pending.extend(e for e in (each.__cause__, each.__context__) if e is not None)
        if isinstance(each, BaseExceptionGroup):
            pending.extend(each.exceptions)
    return sorted((t for t in texts if len(t) > 2), key=len, reverse=True)


_COULD_NOT_CONVERT = ("Could not convert ", " to string, skipping.")


def _part_left_out(record: logging.LogRecord) -> None:
    """The WARNING autogen-ext's OpenAI client logs when it cannot count a message part's tokens (``Could not
    convert {part} to string, skipping.``), without the part: it is a piece of a message, users' words included."""
    said = record.msg
    if isinstance(said, str) and said.startswith(_COULD_NOT_CONVERT[0]) and said.endswith(_COULD_NOT_CONVERT[1]):
        record.msg = ("Could not convert a message part to string, skipping (the part is left out: it may quote "
                      "users' words)")
        record.args = None


class _CancelledIsNotAnError(logging.Filter):
    """Drops autogen-core's ERROR record of a message handler that was cancelled.

    autogen-core logs every exception out of an agent's handler at ERROR, with its traceback, cancellation
    included; a session cancels its team whenever the application does (a stream it stops reading, a request
    timeout) or an erasure stops the run, so each would read as a failure in the service's logs. The run is
    recorded as it went (its transcript's ``error`` names the cancellation); real errors are still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0] if record.exc_info else None
        cancelled = kind is not None and issubclass(kind, asyncio.CancelledError)
        return not (cancelled or getattr(record, _WAS_CANCELLED, False))


_CANCELLED = _CancelledIsNotAnError()


def keep_cancellation_out_of_errors() -> None:
    """Install :class:`_CancelledIsNotAnError` on autogen-core's logger (once per process)."""
    logger = logging.getLogger("autogen_core")
    if _CANCELLED not in logger.filters:
        logger.addFilter(_CANCELLED)
