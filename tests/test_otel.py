"""echomq.otel and the trace envelope: the enqueue -> run spans of one trace across two processes
(the SDK's in-memory exporter on each side), and jobs that cross between traced and untraced
producers and workers in both directions."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from contextlib import contextmanager

import httpx
import pytest

from echomq import App, Queue, Worker, WorkerConfig
from echomq._protocol import envelope
from echomq.dashboard import Settings, serving
from echomq.admin.inventory import job_view
from support.processes import ROOT
from support.queues import fresh_name
from support.waiting import wait_until
from test_worker import running

sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is in the test extra")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from echomq import otel  # noqa: E402


@contextmanager
def traced():
    """This process traced into an in-memory exporter, for the block."""
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    stop = otel.instrument(provider)
    try:
        yield exporter, provider.get_tracer("the app")
    finally:
        stop()


#: a worker process: traced into memory, runs the queue in burst mode, prints its finished spans
WORKER = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from echomq import App, Worker, WorkerConfig, connect, otel

url, wire, queue = sys.argv[1], int(sys.argv[2]), sys.argv[3]
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
otel.instrument(provider)
app = App()
seen = []

@app.task(queue=queue, max_attempts=1)
def handle(payload):
    seen.append(payload)
    if payload.get("fail"):
        raise ValueError("no such mailbox")

with connect(url, wire=wire) as conn:
    Worker(app, conn, config=WorkerConfig(burst=True)).run(install_signals=False)
spans = [{"name": s.name, "kind": s.kind.name, "trace": s.context.trace_id, "parent": s.parent and s.parent.span_id,
          "remote": bool(s.parent and s.parent.is_remote), "status": s.status.status_code.name,
          "outcome": s.attributes.get("echomq.outcome"), "id": s.attributes.get("messaging.message.id")}
         for s in exporter.get_finished_spans()]
print(json.dumps({"spans": spans, "seen": seen}))
"""


def run_worker_process(server, wire, queue: str) -> dict:
    done = subprocess.run([sys.executable, "-c", WORKER, server.url, str(wire), queue], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_enqueue_and_run_are_one_trace_across_two_processes(conn, server, wire):
    name = fresh_name("otel")
    queue = Queue(conn, name)
    with traced() as (exporter, tracer):
        with tracer.start_as_current_span("signup") as request:
            ok = queue.enqueue({"to": "a@example.com"}).id
            failing = queue.enqueue({"to": "b@example.com", "fail": True}).id
    mine = exporter.get_finished_spans()
    creates = [s for s in mine if s.name == f"create {name}"]
    sends = [s for s in mine if s.name == "emq enqueue"]
    assert len(creates) == 2 and len(sends) == 2
    assert all(s.kind == SpanKind.PRODUCER and s.parent.span_id == request.context.span_id for s in creates)
    assert all(s.kind == SpanKind.CLIENT and s.attributes["echomq.verbs"] == ("enqueue",) for s in sends)

    worker = run_worker_process(server, wire, name)
    assert worker["seen"] == [{"to": "a@example.com"}, {"to": "b@example.com", "fail": True}]  # unwrapped
    runs = {s["id"]: s for s in worker["spans"] if s["name"] == f"process {name}"}
    assert set(runs) == {ok, failing}
    for job_id, create in zip((ok, failing), creates):
        run = runs[job_id]
        assert run["kind"] == "CONSUMER" and run["remote"]  # its parent is in the producer's process
        assert run["trace"] == request.context.trace_id and run["parent"] == create.context.span_id
    assert (runs[ok]["status"], runs[ok]["outcome"]) == ("OK", "completed")
    assert (runs[failing]["status"], runs[failing]["outcome"]) == ("ERROR", "dead")
    # the worker's own round trips (claim, complete, fail) are not traced by default
    assert {s["name"] for s in worker["spans"]} == {f"process {name}"}


def test_a_traced_job_runs_on_an_untraced_worker_and_reads_clean_everywhere(conn):
    name = fresh_name("otel-mixed")
    queue = Queue(conn, name)
    with traced() as (_, tracer), tracer.start_as_current_span("producer"):
        job_id = queue.enqueue({"n": 1}).id
    assert envelope.producer is None  # instrumentation is off again: this process is an untraced worker now
    stored = conn.client.hget(queue.keys.job(job_id), "payload")
    carrier, inner = envelope.unwrap(stored)
    assert stored.startswith(envelope.MAGIC) and inner == b'{"n":1}' and carrier["traceparent"].startswith("00-")
    assert queue.job(job_id)["payload"] == {"n": 1}
    view = job_view(queue, job_id)
    assert view.payload == b'{"n":1}' and view.trace == carrier
    with serving(conn, Settings(queues=[name])) as url:
        page = httpx.get(f"{url}/queues/{name}/job", params={"id": job_id}).text
    assert f'traceparent: {carrier["traceparent"]}' in page and "&#34;n&#34;: 1" in page
    app, seen = App(), []

    @app.task(queue=name)
    def handle(payload):
        seen.append(payload)

    with running(Worker(app, conn, config=WorkerConfig(concurrency=1))):
        wait_until(lambda: seen, what="the untraced worker to run the traced job")
    assert seen == [{"n": 1}]


def test_an_untraced_job_starts_its_own_trace_on_a_traced_worker(conn):
    name = fresh_name("otel-plain")
    queue = Queue(conn, name)
    job_id = queue.enqueue({"n": 2}).id
    assert conn.client.hget(queue.keys.job(job_id), "payload") == b'{"n":2}'  # nothing wrapped when untraced
    app, seen = App(), threading.Event()

    @app.task(queue=name)
    def handle(payload):
        seen.set()

    with traced() as (exporter, _):
        with running(Worker(app, conn, config=WorkerConfig(concurrency=1))) as worker:
            wait_until(lambda: worker.tally.completed == 1, what="the job to complete")
        (run,) = [s for s in exporter.get_finished_spans() if s.name == f"process {name}"]
    assert run.parent is None and run.status.status_code == StatusCode.OK
    assert run.attributes["messaging.message.id"] == job_id and run.attributes["echomq.attempt"] == 1


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_handlers_own_spans_and_the_jobs_it_produces_are_in_its_runs_trace(conn, kind):
    """While a handler runs, its `process` span is the current one on the handler's own thread
    (or task): a span it opens is a child, and a job it enqueues carries the run's trace on."""
    name = fresh_name("otel-handler")
    queue, app = Queue(conn, name), App()
    with traced() as (exporter, tracer):
        if kind == "sync":
            @app.task(queue=name)
            def handle(payload, ctx):
                with tracer.start_as_current_span("send the email"):
                    if payload["n"] == 1:
                        ctx.producer().enqueue({"n": 2})
        else:
            @app.task(queue=name)
            async def handle(payload, ctx):
                with tracer.start_as_current_span("send the email"):
                    if payload["n"] == 1:
                        await ctx.producer().enqueue({"n": 2})

        with tracer.start_as_current_span("signup"):
            queue.enqueue({"n": 1})
        with running(Worker(app, conn, config=WorkerConfig(concurrency=2))) as worker:
            wait_until(lambda: worker.tally.completed == 2, what="the job and the one it produced to complete")
        spans = exporter.get_finished_spans()
    (signup,) = [s for s in spans if s.name == "signup"]
    first, second = sorted((s for s in spans if s.name == f"process {name}"), key=lambda s: s.start_time)
    work = sorted((s for s in spans if s.name == "send the email"), key=lambda s: s.start_time)
    creates = sorted((s for s in spans if s.name == f"create {name}"), key=lambda s: s.start_time)
    assert [w.parent.span_id for w in work] == [first.context.span_id, second.context.span_id]
    assert [c.parent.span_id for c in creates] == [signup.context.span_id, work[0].context.span_id]
    assert second.parent.span_id == creates[1].context.span_id  # the produced job ran in the same trace
    assert {s.context.trace_id for s in spans} == {signup.context.trace_id}  # the round trips too


def test_the_envelope_unwraps_only_its_own_shape():
    envelope.set_producer(lambda queue: {"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"})
    try:
        wrapped = envelope.wrap("q", b"\x80binary")
    finally:
        envelope.set_producer(None)
    assert envelope.wrap("q", b"plain") == b"plain"
    assert envelope.unwrap(wrapped) == ({"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"}, b"\x80binary")
    for payload in (b"", b"{}", envelope.MAGIC, envelope.MAGIC + b"not json\x00x", envelope.MAGIC + b"[1]\x00x",
                    envelope.MAGIC + b'{"a":1}\x00x', envelope.MAGIC + b'{"a":"b"}'):
        assert envelope.unwrap(payload) == (None, payload), payload
