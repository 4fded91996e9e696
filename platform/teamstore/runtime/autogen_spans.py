"""Where AutoGen's own spans go for teamstore's teams: never to a tracer provider the host installed.

    from teamstore.runtime.autogen_spans import autogen_spans_to, provider_for_autogen

    route = provider_for_autogen(teamstore_provider, capture_content=False)
    with autogen_spans_to(route):
        team = Team.load_component(definition)   # its runtime keeps the route for good
        await team.run(task="...")               # agent and tool spans started here follow it too

AutoGen 0.7 records users' words in its spans: runtime spans copy each serialized message into a
``message`` attribute, and its agent and tool spans record exceptions (a tool's arguments in a pydantic
error, say) as events and status text. It finds its tracer in two places, both resolving to the global
tracer provider: the runtime's ``TraceHelper`` calls ``get_tracer_provider()`` once, when the runtime is
built (unless given a provider), and the agent and tool span helpers call ``trace.get_tracer()`` on every
span. A host service that installed its own global provider would export all of it, unscrubbed.

Inside :func:`autogen_spans_to`, both lookups answer with the route instead: teamstore's provider, whose
exporter scrubs every span, or, when teamstore exports nothing, OpenTelemetry's no-op provider, whose spans
record nothing and carry their parent's context on, so the host's own spans inside a run keep their
parent. Outside it, AutoGen finds the global provider as before: AutoGen used by the host itself is left
alone. A span processor on the host's provider could not do this (it cannot take attributes or events
off a span the host's own processors export), nor could a sampler (it is the host's, and would drop the
host's spans under AutoGen's too).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from types import ModuleType
from typing import Any

from opentelemetry import trace

from teamstore.errors import ConfigurationError

# The two modules in which AutoGen looks its tracer up, and the names it looks up there.
_RUNTIME_SEAM = ("autogen_core._telemetry._tracing", "get_tracer_provider")
_SPAN_HELPER_SEAM = ("autogen_core._telemetry._genai", "trace")

_route: ContextVar[trace.TracerProvider | None] = ContextVar("teamstore_autogen_spans", default=None)
_installed = False
_install_lock = threading.Lock()


def provider_for_autogen(
    provider: trace.TracerProvider | None, *, capture_content: bool
) -> trace.TracerProvider | None:
    """The provider AutoGen's spans of teamstore's teams should use.

    Args:
        provider: teamstore's own (scrubbing) provider, or ``None`` when it exports nothing.
        capture_content: The operator's opt-in to message content in telemetry.

    Returns:
        ``provider`` when there is one; otherwise a no-op provider, or ``None`` (AutoGen's own choice,
        the global provider) when content capture is opted in.
    """
    if provider is not None:
        return provider
    return None if capture_content else trace.NoOpTracerProvider()


def _tracer_provider() -> trace.TracerProvider:
    """AutoGen's lookup of the global provider, answered with the route while one is set."""
    routed = _route.get()
    return routed if routed is not None else trace.get_tracer_provider()


class _SpanHelperTraceApi(ModuleType):
    """``opentelemetry.trace`` as AutoGen's agent and tool span helpers see it: ``get_tracer`` routed."""

    def __getattr__(self, name: str) -> Any:
        return getattr(trace, name)

    @staticmethod
    def get_tracer(name: str, *args: Any, **kwargs: Any) -> trace.Tracer:
        """A tracer from the route while one is set, else from the global provider."""
        return _tracer_provider().get_tracer(name, *args, **kwargs)


def _module_at(seam: tuple[str, str], expected: object) -> ModuleType:
    """The module of ``seam``, checked to hold ``expected`` there (so what is replaced is what is meant)."""
    module_name, attribute = seam
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        module = None
    if module is None or getattr(module, attribute, None) is not expected:
        raise ConfigurationError(
            f"this autogen-core no longer looks its tracer up as {module_name}.{attribute}; its spans, which "
            "copy users' messages, could reach the host's tracer provider unscrubbed",
            hint="install the autogen-core version teamstore supports (0.7.x), or opt in to content in "
            "telemetry with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true",
        )
    return module


def install() -> None:
    """Point AutoGen's two tracer lookups at the route (once per process; idempotent).

    Raises:
        ConfigurationError: AutoGen does not look its tracer up where this version of teamstore expects;
            nothing is changed then.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        runtime_seam = _module_at(_RUNTIME_SEAM, trace.get_tracer_provider)
        span_helper_seam = _module_at(_SPAN_HELPER_SEAM, trace)
        setattr(runtime_seam, _RUNTIME_SEAM[1], _tracer_provider)
        setattr(span_helper_seam, _SPAN_HELPER_SEAM[1], _SpanHelperTraceApi("opentelemetry.trace"))
        _installed = True


@contextlib.contextmanager
def autogen_spans_to(provider: trace.TracerProvider | None) -> Iterator[None]:
    """Send the spans of AutoGen objects built, and of AutoGen work done, inside the block to ``provider``.

    A runtime built inside the block keeps ``provider`` for its life; agent and tool spans follow the
    block's context, which tasks started inside it (the runtime's message loop) inherit.

    Args:
        provider: From :func:`provider_for_autogen`; ``None`` leaves AutoGen's own choice.

    Raises:
        ConfigurationError: See :func:`install`.
    """
    if provider is None:
        yield
        return
    install()
    token = _route.set(provider)
    try:
        yield
    finally:
        _route.reset(token)
