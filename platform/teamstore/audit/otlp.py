"""OTLP exporters for spans and metrics, over the protocol the standard ``OTEL_*`` variables name.

    from teamstore.audit.otlp import metric_exporter, resource, span_exporter

    exporter = span_exporter()      # OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL
    reader = PeriodicExportingMetricReader(metric_exporter())
    provider = TracerProvider(resource=resource())   # service.name as OTEL_* say, else "teamstore"

``http/protobuf`` (the default, port 4318) and ``grpc`` (port 4317) both work, for each signal on its own;
any other value is refused at start with :class:`ConfigurationError` rather than ignored, so a collector
that listens on the other protocol is never sent nothing silently; so is an OTLP/HTTP endpoint that is no
``http(s)://`` URL, and a timeout that is no number of seconds above 0. Endpoints, headers, compression,
certificates and temporality are read by the exporters themselves from the same variables.
"""

from __future__ import annotations

import importlib
import math
import os
import re
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import SERVICE_NAME, Resource

from teamstore.errors import ConfigurationError, MissingExtra
from teamstore.logs import keep_query_values_out_of_logs

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricExporter
    from opentelemetry.sdk.trace.export import SpanExporter

Signal = Literal["traces", "metrics"]
Protocol = Literal["grpc", "http/protobuf"]
PROTOCOLS: tuple[Protocol, ...] = ("http/protobuf", "grpc")
DEFAULT_SERVICE_NAME = "teamstore"
EXPORT_TIMEOUT_S = 2.0
"""The exporters' deadline unless ``OTEL_EXPORTER_OTLP(_SIGNAL)_TIMEOUT`` sets one: they retry within it,
in the processor's or reader's thread, never a run's."""


def resource() -> Resource:
    """The resource of teamstore's spans and metrics: what ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``
    say (the SDK reads both, the latter winning for ``service.name``), named ``teamstore`` when neither names
    the service."""
    detected = Resource.create()
    # Resource.create names a service nobody named "unknown_service[:<executable>]": only then is it ours to name.
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        return detected.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return detected


def protocol(signal: Signal) -> Protocol:
    """The OTLP protocol for ``signal``: ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf``.

    Raises:
        ConfigurationError: The variable names a protocol teamstore cannot export over.
    """
    name = f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"
    variable = name if os.environ.get(name) else "OTEL_EXPORTER_OTLP_PROTOCOL"
    value = os.environ.get(variable, "").strip().lower() or "http/protobuf"
    for known in PROTOCOLS:
        if value == known:
            return known
    why = "the Python OTLP exporter has no http/json" if value == "http/json" else "it is not an OTLP protocol"
    raise ConfigurationError(
        f"{variable}={value!r}: {why}, so {signal} would not be exported",
        hint="set it to http/protobuf (a collector's port 4318) or grpc (port 4317), or unset it",
    )


def check_endpoint(signal: Signal, chosen: Protocol) -> None:
    """Refuse an OTLP/HTTP endpoint that is no ``http(s)://host`` URL: the exporter would fail at every export,
    a warning at a time, and no span or point would ever arrive. (gRPC's exporter also takes ``host:port``.)

    Raises:
        ConfigurationError: The endpoint is not such a URL. The value is not repeated: it may carry credentials.
    """
    name = f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
    variable = name if os.environ.get(name) else "OTEL_EXPORTER_OTLP_ENDPOINT"
    value = os.environ.get(variable, "").strip()
    if not value:
        return
    if _UNSENDABLE.search(value):  # a space, a tab, a control character: no client sends it
        raise ConfigurationError(
            f"{variable} holds a space or a control character, so {signal} would not be exported",
            hint="set it to the collector's URL, e.g. http://otel-collector:4318 (URL-encode what its path or "
            "query needs), or unset it",
        )
    if chosen == "grpc":
        return
    try:
        parts = urlsplit(value)
        fine = (parts.scheme.lower() in ("http", "https") and bool(parts.hostname) and parts.port != 0
                and _HOST.fullmatch(parts.hostname or "") is not None)
    except ValueError:  # a port that is not a number, an unclosed [
        fine = False
    if not fine:
        raise ConfigurationError(
            f"{variable} is not an http:// or https:// URL with a host, so {signal} would not be exported",
            hint="set it to the collector's URL, e.g. http://otel-collector:4318, or unset it",
        )


_UNSENDABLE = re.compile(r"[\s\x00-\x1f\x7f]")
# A host name, an IPv4 address or (without its brackets) an IPv6 one, as a URL may give it.
_HOST = re.compile(r"[A-Za-z0-9._~%-]+|[0-9A-Fa-f:.]+(%[A-Za-z0-9._~-]+)?")


def refused_settings(what: str, variables: tuple[str, ...], rule: str, exc: ValueError) -> ConfigurationError:
    """The error for settings the OpenTelemetry SDK refuses when ``what`` is built (it raises a bare
    ``ValueError`` that names none of the variables), with the variables and their values.

    Args:
        what: What the SDK refused to build. variables: The ``OTEL_*`` variables it read.
        rule: What their values must be. exc: The SDK's refusal.
    """
    given = ", ".join(f"{name}={os.environ[name]!r}" for name in variables if name in os.environ)
    return ConfigurationError(
        f"the OpenTelemetry SDK refuses the {what}'s settings ({given or 'its defaults'}): {exc}",
        hint=f"set {' and '.join(variables)} to {rule}, or unset {'them' if len(variables) > 1 else 'it'}",
    )


def positive_number(variable: str, unit: str, *, whole: bool = False) -> float | None:
    """The number ``variable`` gives, ``None`` when it is unset or blank.

    The SDK reads a value that is no number as its own default, with a warning (a traceback for the batch
    sizes): for the exporters' and the metric reader's timeouts, 10 or 30 s in place of teamstore's 2 s.

    Raises:
        ConfigurationError: The value is no number (``whole``: no whole number) of ``unit`` above 0.
    """
    value = os.environ.get(variable, "").strip()
    if not value:
        return None
    try:
        number = float(int(value) if whole else float(value))
    except ValueError:
        number = math.nan
    if not 0 < number < math.inf:
        kind = "whole number" if whole else "number"
        raise ConfigurationError(f"{variable}={value!r} is not a {kind} of {unit} above 0",
                                 hint=f"set {variable} to a {kind} of {unit}, or unset it")
    return number


def export_timeout(signal: Signal) -> float:
    """The ``signal`` exporter's deadline in seconds: ``OTEL_EXPORTER_OTLP_<SIGNAL>_TIMEOUT``, else
    ``OTEL_EXPORTER_OTLP_TIMEOUT``, else :data:`EXPORT_TIMEOUT_S`. (The Python exporters read seconds, where
    the OpenTelemetry specification says milliseconds.)

    Raises:
        ConfigurationError: The variable is no number of seconds above 0.
    """
    name = f"OTEL_EXPORTER_OTLP_{signal.upper()}_TIMEOUT"
    variable = name if os.environ.get(name, "").strip() else "OTEL_EXPORTER_OTLP_TIMEOUT"
    seconds = positive_number(variable, "seconds")
    return EXPORT_TIMEOUT_S if seconds is None else seconds


def _check_blank_timeout(signal: Signal, chosen: Protocol) -> None:
    """Refuse a signal's timeout variable set to nothing over gRPC, whose exporter reads it itself (a bare
    ``ValueError`` then, as it builds): a deployment template often sets a variable it has no value for."""
    name = f"OTEL_EXPORTER_OTLP_{signal.upper()}_TIMEOUT"
    if chosen == "grpc" and name in os.environ and not os.environ[name].strip():
        raise ConfigurationError(f"{name} is set but empty, which the gRPC exporter cannot read",
                                 hint=f"unset {name}, or set it to a number of seconds")


def _missing(what: str) -> MissingExtra:
    return MissingExtra(what, "otel", "opentelemetry-exporter-otlp")


# Per signal: the exporter's module (the same name under ``proto.grpc`` and ``proto.http``) and class.
_EXPORTERS: dict[Signal, tuple[str, str]] = {
    "traces": ("trace_exporter", "OTLPSpanExporter"),
    "metrics": ("metric_exporter", "OTLPMetricExporter"),
}


def _exporter(signal: Signal, what: str) -> Any:
    chosen = protocol(signal)
    check_endpoint(signal, chosen)
    _check_blank_timeout(signal, chosen)
    module, name = _EXPORTERS[signal]
    package = "grpc" if chosen == "grpc" else "http"
    try:
        exporter = getattr(importlib.import_module(f"opentelemetry.exporter.otlp.proto.{package}.{module}"), name)
    except ImportError as exc:
        raise _missing(f"OTLP {what} export over {chosen}") from exc
    keep_query_values_out_of_logs()  # a failed export's line quotes the collector's URL, a key in its query too
    return exporter(timeout=export_timeout(signal))


def span_exporter() -> SpanExporter:
    """An OTLP span exporter over the configured protocol.

    Raises:
        ConfigurationError: An unknown protocol, an endpoint that is no URL, a timeout that is no number.
        MissingExtra: The exporter package is not installed.
    """
    return cast("SpanExporter", _exporter("traces", "span"))


def metric_exporter() -> MetricExporter:
    """An OTLP metric exporter over the configured protocol.

    Raises:
        ConfigurationError: An unknown protocol, an endpoint that is no URL, a timeout that is no number.
        MissingExtra: The exporter package is not installed.
    """
    return cast("MetricExporter", _exporter("metrics", "metric"))
