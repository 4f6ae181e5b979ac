"""OpenTelemetry in the Python helper (python/tinyq/_otel.py), through the SDK's in-memory
exporter: add() under an active span carries its W3C `traceparent` in the job's meta;
each attempt (threads and asyncio) is a consumer span `<queue> process` whose parent is
that context, with the messaging attributes, a kept step as its child span, and the
outcome as its status. Without a span nothing goes into meta; without opentelemetry-api
installed (Debian's Python, the rest of the suite) the helper works as before.

The SDK comes from PyPI into a venv cached under target/venvs/otel (skipped when pip
cannot reach it), so `make test-all` runs this file.
"""
import json
import os
import shutil
import subprocess
import textwrap

import pytest

from helpers import ROOT

VENV = os.path.join(ROOT, "target", "venvs", "otel")

SCRIPT = textwrap.dedent("""
    import asyncio, json, tinyq
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("app")

    def handler(payload, run):
        run.step("render", lambda: payload["n"] * 2)
        if payload["n"] == 2:
            raise ValueError("no")
        return "sent"

    q = tinyq.Queue("app.db", "mail")
    with tracer.start_as_current_span("request"):
        q.add({"n": 1}, id="ok", meta={"tenant": "acme"})
        q.add({"n": 2}, id="bad", attempts=1)
    q.add({"n": 3}, id="untraced")
    q.drain(handler)

    async def main():
        aq = tinyq.AsyncQueue("app.db", "amail")
        with tracer.start_as_current_span("arequest"):
            await aq.add({"n": 4}, id="aok")
            await aq.add_many([{"n": 5}], ids=["amany"])
        async def ahandler(payload, run):
            async def render():
                return payload["n"] * 2
            await run.step("render", render)
            return "sent"
        await aq.drain(ahandler)
        await aq.close()
    asyncio.run(main())

    def hexid(n):
        return None if n is None else "%032x" % n
    spans = [{"name": s.name, "kind": s.kind.name, "trace": hexid(s.context.trace_id),
              "span": "%016x" % s.context.span_id,
              "parent": None if s.parent is None else "%016x" % s.parent.span_id,
              "attributes": dict(s.attributes), "status": s.status.status_code.name,
              "description": s.status.description} for s in exporter.get_finished_spans()]
    metas = {id: q.get(id)["meta"] for id in ("ok", "bad", "untraced", "aok", "amany")}
    print(json.dumps({"spans": spans, "metas": metas}))
""")


def otel_venv():
    if os.path.exists(os.path.join(VENV, ".ready")):
        return VENV
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run(["/usr/bin/python3", "-m", "venv", VENV], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_NO_INDEX")}
    proc = subprocess.run([os.path.join(VENV, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check",
                           "opentelemetry-sdk"], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        pytest.skip("pip could not install opentelemetry-sdk from PyPI (offline?): %s" % proc.stderr[-300:])
    open(os.path.join(VENV, ".ready"), "w").close()
    return VENV


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    venv = otel_venv()
    folder = tmp_path_factory.mktemp("otel")
    env = {k: v for k, v in os.environ.items() if k != "TINYQ_EXT"}
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    proc = subprocess.run([os.path.join(venv, "bin", "python"), "-c", SCRIPT], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    spans = out["spans"]
    return out["metas"], {s["name"]: s for s in spans if "process" not in s["name"] and "step" not in s["name"]}, spans


def traceparent_of(span):
    """The W3C traceparent of `span` up to its flags (the SDK's flags: sampled, and random)."""
    return "00-%s-%s-" % (span["trace"], span["span"])


def process_span(spans, job_id):
    [span] = [s for s in spans if s["kind"] == "CONSUMER" and s["attributes"]["messaging.message.id"] == job_id]
    return span


def test_otel_add_under_a_span_carries_its_traceparent_in_meta(traced):
    metas, roots, _ = traced
    request = roots["request"]
    assert metas["ok"]["traceparent"].startswith(traceparent_of(request))
    assert int(metas["ok"]["traceparent"][-2:], 16) & 1, "sampled"
    assert metas["ok"]["tenant"] == "acme", "the caller's meta is kept beside it"
    assert metas["bad"]["traceparent"] == metas["ok"]["traceparent"]
    assert metas["untraced"] is None, "no active span: nothing added to meta"
    arequest = roots["arequest"]
    assert metas["aok"]["traceparent"].startswith(traceparent_of(arequest)), \
        "AsyncQueue.add reads the caller task's context"
    assert metas["amany"]["traceparent"] == metas["aok"]["traceparent"]


def test_otel_each_attempt_is_a_consumer_span_child_of_the_added_context(traced):
    _, roots, spans = traced
    ok = process_span(spans, "ok")
    assert ok["name"] == "mail process"
    assert (ok["trace"], ok["parent"]) == (roots["request"]["trace"], roots["request"]["span"])
    assert ok["attributes"] == {"messaging.system": "tinyq", "messaging.operation.type": "process",
                                "messaging.operation.name": "process", "messaging.destination.name": "mail",
                                "messaging.message.id": "ok", "tinyq.attempt": 1, "tinyq.outcome": "done"}
    assert ok["status"] == "OK"
    untraced = process_span(spans, "untraced")
    assert untraced["parent"] is None and untraced["trace"] != roots["request"]["trace"]
    aok = process_span(spans, "aok")
    assert aok["name"] == "amail process"
    assert (aok["trace"], aok["parent"]) == (roots["arequest"]["trace"], roots["arequest"]["span"])


def test_otel_a_failed_attempt_is_an_error_span(traced):
    _, _, spans = traced
    bad = process_span(spans, "bad")
    assert bad["status"] == "ERROR" and bad["description"] == "ValueError: no"
    assert bad["attributes"]["tinyq.outcome"] == "error"


def test_otel_a_kept_step_is_a_child_span_of_its_attempt(traced):
    _, _, spans = traced
    for job_id in ("ok", "aok"):
        attempt = process_span(spans, job_id)
        [step] = [s for s in spans if s["name"] == "step render" and s["parent"] == attempt["span"]]
        assert step["trace"] == attempt["trace"] and step["attributes"] == {"tinyq.step": "render"}
