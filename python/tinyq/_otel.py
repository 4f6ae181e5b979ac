"""OpenTelemetry, when `opentelemetry-api` is installed: trace context in meta, attempt spans.

Only the API: spans go to whatever tracer provider the application set up (none: the API's
no-op one), never an SDK or exporter of tinyq's own. Without the package every function
here does nothing. What the helpers call:

- `with_trace(meta)`: an add's meta with the current trace context (`traceparent`, and
  `tracestate` when there is one: W3C Trace Context) when a span is active;
- `with attempt(queue, run) as span: ...; span.ended(outcome, value)`: the attempt as a
  consumer span `<queue> process` (messaging semantic conventions), child of the context
  the add carried, its status the outcome (ERROR for an error or a fail);
- `with step(name):` a kept step's computation as a child span `step <name>`.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional

try:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:   # optional: tinyq works the same without it
    trace = None

from ._version import __version__

W3C = None if trace is None else TraceContextTextMapPropagator()
FAILED = ("error", "fail")


def with_trace(meta: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """`meta` plus the active span's context (a `traceparent` the caller put there stays)."""
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return meta
    carrier: Dict[str, str] = {}
    W3C.inject(carrier)
    return {**carrier, **(meta or {})}


class _Attempt:
    def __init__(self, span: Any = None):
        self.span = span

    def ended(self, outcome: Optional[str], value: Any) -> None:
        """The attempt's outcome as the span's status: ERROR (with the error) for an error
        or a fail; OK for done; unset for the rest (retry, snooze, waits, nothing settled)."""
        if self.span is None:
            return
        self.span.set_attribute("tinyq.outcome", outcome or "none")
        if outcome in FAILED:
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, str(value)))
        elif outcome == "done":
            self.span.set_status(trace.Status(trace.StatusCode.OK))


_NO_ATTEMPT = _Attempt()


@contextlib.contextmanager
def attempt(queue: str, run: Any) -> Iterator[_Attempt]:
    """The attempt of `run` as the current span while its handler runs."""
    if trace is None:
        yield _NO_ATTEMPT
        return
    meta = run.meta
    parent = W3C.extract(meta) if isinstance(meta.get("traceparent"), str) else None
    tracer = trace.get_tracer("tinyq", __version__)
    attributes = {"messaging.system": "tinyq", "messaging.operation.type": "process",
                  "messaging.operation.name": "process", "messaging.destination.name": queue,
                  "messaging.message.id": run.id, "tinyq.attempt": run.attempt}
    with tracer.start_as_current_span("%s process" % queue, context=parent, kind=trace.SpanKind.CONSUMER,
                                      attributes=attributes, record_exception=False,
                                      set_status_on_exception=False) as span:
        yield _Attempt(span)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    """A step's computation (its answer not kept yet) as a child span of the attempt's."""
    if trace is None:
        yield
        return
    with trace.get_tracer("tinyq", __version__).start_as_current_span(
            "step %s" % name, attributes={"tinyq.step": name}):
        yield
