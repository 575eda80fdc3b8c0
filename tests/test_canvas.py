"""Chains and groups on flows (echomq/worker/canvas.py, docs/lanes-and-flows.md "Chains and groups"),
both wires: what a canvas admits (one flow, its steps' headers, ids in the members' order), the
refusals before anything is sent, and runs through a worker, sync and asyncio."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import echomq
from echomq import App, Queue, Status, chain, group
from echomq.errors import ConfigurationError
from echomq._protocol import envelope
from echomq._protocol.serializers import RAW
from support.dataset import unchanged
from support.queues import fresh_name, round_trips


def shop(conn, queue: str | None = None) -> tuple[App, Any]:
    app = App(queue=queue or fresh_name("canvas")).connect(conn)

    @app.task
    def add(x, y=0):
        return x + y

    @app.task
    def total(numbers, scale=1):
        return sum(numbers) * scale

    @app.task
    def show(value, ctx):
        return f"{ctx.queue}: {value}"

    return app, (add, total, show)


def row(queue: Queue, job_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    client: Any = queue.connection.client
    fields = {k.decode(): v for k, v in client.hgetall(queue.keys.job(job_id)).items()}
    headers, payload = envelope.read_headers(fields.pop("payload"))
    return {k: v.decode() for k, v in fields.items()}, {"own": headers.own, "payload": payload}


def test_a_chain_is_one_flow_its_last_step_the_root(conn):
    app, (add, total, show) = shop(conn)
    queue = Queue(conn, app.queue)
    handle = chain(add.s(1, 2), add.s(10), show.s()).enqueue(id="the-end")
    assert (handle.id, handle.created, handle.status()) == ("the-end", True, Status.WAITING)
    root, stored = row(queue, "the-end")
    assert (root["state"], root["children"]) == ("waiting", "1")
    assert stored == {"own": {"task": "show", "args": 1, "prev": "one"}, "payload": b'{"args":[],"kwargs":{}}'}
    middle_id = queue.connection.client.smembers(queue.keys.key("flow:children:the-end"))
    (middle_key,) = middle_id
    middle, stored = row(queue, middle_key.decode().rsplit(":job:", 1)[1])
    assert middle["state"] == "waiting" and stored["own"] == {"task": "add", "args": 1, "prev": "one"}
    assert stored["payload"] == b'{"args":[10],"kwargs":{}}'
    (first,) = queue.flow_claim(10, 60_000)  # only the first step is ready
    assert first.headers == {"task": "add", "args": 1} and first.payload == {"args": [1, 2], "kwargs": {}}
    assert chain(add.s(1, 2), add.s(10), show.s()).enqueue(id="the-end").created is False  # the id has a job


def test_a_group_then_a_step_gathers_its_members_in_their_order(conn):
    app, (add, total, show) = shop(conn)
    queue = Queue(conn, app.queue)
    members = [add.s(n) for n in range(5)] + [chain(add.s(7), add.s(1))]
    handle = group(members).then(total.s(scale=2)).enqueue()
    root, stored = row(queue, handle.id)
    assert root["children"] == "6" and stored["own"] == {"task": "total", "args": 1, "prev": "all"}
    children = sorted(k.decode().rsplit(":job:", 1)[1] for k in
                      queue.connection.client.smembers(queue.keys.key(f"flow:children:{handle.id}")))
    # minted in the members' order: the worker lists their results in the order of these ids
    assert [row(queue, child)[1]["own"].get("prev") for child in children] == [None] * 5 + ["one"]
    assert [row(queue, child)[1]["payload"] for child in children[:5]] == [
        b'{"args":[%d],"kwargs":{}}' % n for n in range(5)]


def test_a_group_alone_sends_each_member_in_one_round_trip(conn):
    app, (add, total, show) = shop(conn)
    with round_trips() as sent:
        handles = group(add.s(1, 1), chain(add.s(2), add.s(3)), show.s("x")).enqueue()
    assert [len(verbs) for verbs in sent] == [3]
    assert [h.status() for h in handles] == [Status.PENDING, Status.WAITING, Status.PENDING]


@pytest.mark.parametrize("build, refused", [
    (lambda t: chain(t["add"].s(1), group(t["add"].s(2), t["add"].s(3)), t["total"].s()), "cannot follow a step"),
    (lambda t: chain(t["add"].s(1), group(t["add"].s(2))), "a chain ends with a call"),
    (lambda t: chain(), "an empty chain"),
    (lambda t: group(), "an empty group"),
    (lambda t: chain(t["add"].s(1), "not a call"), "a chain.s step is a call"),  # type: ignore[arg-type]
    (lambda t: chain(t["add"].s(1), t["add"].s(2, 3)), r"add\(x, y=0\): too many positional"),  # 2 + the result
    (lambda t: chain(t["add"].s(), t["add"].s()), "missing a required argument: 'x'"),
    (lambda t: chain(t["add"].s(1), t["raw"].s()), "their serializers differ|share one serializer"),
    (lambda t: chain(t["add"].s(1), t["parted"].s()), "is partitioned"),
    (lambda t: t["add"].s(1).set(max_attempts=0), "max_attempts"),
])
def test_a_canvas_that_cannot_run_is_refused_before_anything_is_sent(conn, build, refused):
    app, (add, total, show) = shop(conn)

    @app.task(queue=fresh_name("raw"), serializer=RAW)
    def raw(data):
        return data

    @app.task(queue=fresh_name("parted"), partitions=2)
    def parted(x):
        return x

    with unchanged(conn.client), pytest.raises(ConfigurationError, match=refused):
        build({"add": add, "total": total, "raw": raw, "parted": parted}).enqueue()


def test_a_step_carries_its_own_options(conn):
    app, (add, total, show) = shop(conn)
    queue = Queue(conn, app.queue)
    handle = chain(add.s(1).set(priority=3, max_attempts=9), show.s().set(timeout=None)).enqueue()
    root = row(queue, handle.id)[1]["own"]
    assert root == {"task": "show", "args": 1, "prev": "one", "timeout": None}
    (first,) = queue.flow_claim(10, 60_000)
    assert first.headers == {"task": "add", "args": 1, "max_attempts": 9}
    assert queue.connection.client.hget(queue.keys.job(first.id), "priority") == b"3"


def test_the_awaitable_canvas_sends_on_the_asyncio_connection(server, wire):
    app = App(url=server.url, wire=wire, queue=fresh_name("acanvas"))

    @app.task
    def add(x, y=0):
        return x + y

    async def main() -> tuple[Any, ...]:
        one = await chain(add.s(1), add.s(2)).aenqueue()
        many = await group(add.s(1), add.s(2)).aenqueue()
        step = await add.s(5).aenqueue(delay=60)
        statuses = (await one.status(), [await h.status() for h in many], await step.status())
        await app.aclose()
        return one, statuses

    one, statuses = asyncio.run(main())
    assert isinstance(one, echomq.AsyncJobHandle)
    assert statuses == (Status.WAITING, [Status.PENDING, Status.PENDING], Status.SCHEDULED)
