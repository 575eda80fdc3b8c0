"""The dashboard as a web app (issue 43, item 5; that section of docs/guarantees.md), on both wires.

Every response forbids framing and sniffing; a POST from another site's Origin is refused with
nothing written; a token shorter than 16 characters or all whitespace is refused at start, and
``--token`` on the command line is warned of (EMQ_DASHBOARD_TOKEN is not); each wrong token in a
row waits longer for its 401; ``-q`` scopes every route; an out-of-range query value is a 400;
``emq worker --metrics-host`` beyond loopback is allowed and logged as open (decided: its
counters name no job or queue, and a scraper on another host is its use)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import httpx
import pytest
from click.testing import CliRunner

from echomq import Queue
from echomq.cli import main
from echomq.dashboard import Settings, create_app, serving
from echomq.dashboard.auth import SECURITY_HEADERS, TokenRequired, refusal_delay_s
from echomq.errors import ConfigurationError
from echomq.worker.heartbeat import Heartbeat
from support.dashboard import own_servers, secret_of, server, stocked  # noqa: F401 (fixtures)
from support.dataset import queue_unchanged
from support.processes import ROOT
from support.queues import fresh_name

TOKEN = "a-token-of-24-characters"


def framed_nowhere(response: httpx.Response) -> None:
    for name, value in SECURITY_HEADERS:
        assert response.headers.get(name.decode()) == value.decode(), (response.url, name)
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


def test_every_response_forbids_framing_and_sniffing(conn, stocked):
    name = stocked.queue.name
    with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
        page = site.get(f"/queues/{name}")
        for response in (site.get("/"), page, site.get("/metrics"), site.get("/static/dashboard.css"),
                         site.get("/queues/no-such-queue"), site.get("/", headers={"Host": "evil.example"}),
                         site.post(f"/queues/{name}/pause", data={"secret": secret_of(page.text)})):
            framed_nowhere(response)
        assert stocked.queue.counts().paused  # the POST above was the dashboard's own form
    with serving(conn, Settings(token=TOKEN)) as url, httpx.Client(base_url=url) as site:
        refused = site.get("/")
        assert refused.status_code == 401
        framed_nowhere(refused)


def test_a_post_from_another_origin_is_refused_and_writes_nothing(conn, stocked):
    name = stocked.queue.name
    with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
        secret = secret_of(site.get(f"/queues/{name}").text)
        for origin in ("https://evil.example", "null", url.replace("127.0.0.1", "localhost")):
            with queue_unchanged(stocked.queue):
                refused = site.post(f"/queues/{name}/pause", data={"secret": secret}, headers={"Origin": origin})
            assert refused.status_code == 403 and "posted from another site" in refused.text, origin
        done = site.post(f"/queues/{name}/pause", data={"secret": secret}, headers={"Origin": url})
        assert done.status_code == 303 and stocked.queue.counts().paused


@pytest.mark.parametrize("token,says", [("short-token", "of 11 characters"), (" " * 24, "all whitespace")])
def test_a_weak_token_is_refused_at_start(conn, server, token, says):
    with pytest.raises(ConfigurationError, match=says):
        create_app(conn, Settings(token=token))
    for runner, args in ((CliRunner(env={"EMQ_DASHBOARD_TOKEN": token}), []),
                         (CliRunner(env={"EMQ_DASHBOARD_TOKEN": None}), ["--token", token])):
        refused = runner.invoke(main, ["dashboard", "--url", server.url, "--port", "1", *args])
        assert refused.exit_code == 1 and says in refused.stderr, refused.output


def test_a_token_on_the_command_line_is_warned_of_and_the_environment_is_not():
    # nothing answers at port 1: the command stops after its checks, before it would serve
    given = CliRunner(env={"EMQ_DASHBOARD_TOKEN": None}).invoke(
        main, ["dashboard", "--url", "redis://127.0.0.1:1", "--token", TOKEN])
    assert given.exit_code == 1 and "--token is visible to every user of this host" in given.stderr
    assert "EMQ_DASHBOARD_TOKEN" in given.stderr
    from_env = CliRunner(env={"EMQ_DASHBOARD_TOKEN": TOKEN}).invoke(main, ["dashboard", "--url", "redis://127.0.0.1:1"])
    assert from_env.exit_code == 1 and "visible" not in from_env.stderr


def test_each_wrong_token_in_a_row_waits_longer_and_the_right_one_at_once():
    waited: list[float] = []

    async def inner(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def record(seconds: float) -> None:
        waited.append(seconds)

    guarded = TokenRequired(inner, TOKEN, sleep=record)

    async def requests() -> list[int]:
        statuses = []
        for address, header in (("1.2.3.4", None), ("1.2.3.4", "Bearer wrong"), ("1.2.3.4", "Bearer wrong2"),
                                ("1.2.3.4", "Bearer wrong3"), ("5.6.7.8", "Bearer wrong"),
                                ("1.2.3.4", f"Bearer {TOKEN}"), ("1.2.3.4", "Bearer wrong")):
            transport = httpx.ASGITransport(app=guarded, client=(address, 50000))
            async with httpx.AsyncClient(transport=transport, base_url="http://dash") as client:
                answer = await client.get("/", headers={"Authorization": header} if header else {})
                statuses.append(answer.status_code)
        return statuses

    assert asyncio.run(requests()) == [401, 401, 401, 401, 401, 200, 401]
    # none for a request without a token (a browser's first); 1st, 2nd, 3rd wrong in a row; another
    # address counts on its own; the right token ends the row
    assert waited == [refusal_delay_s(1), refusal_delay_s(2), refusal_delay_s(3), refusal_delay_s(1),
                      refusal_delay_s(1)]


def test_pinned_queues_scope_every_route(conn, stocked):
    other = Queue(conn, fresh_name("other"))
    other.enqueue({"n": 1})
    mine = Heartbeat(conn.client, queues=[stocked.queue.name], concurrency=1, wire=conn.wire)
    theirs = Heartbeat(conn.client, queues=[other.name], concurrency=1, wire=conn.wire)
    for beat in (mine, theirs):
        beat.beat(held=0, completed=0, failed=0)
    try:
        with serving(conn, Settings(queues=[stocked.queue.name])) as url, httpx.Client(base_url=url) as site:
            secret = secret_of(site.get(f"/queues/{stocked.queue.name}").text)
            assert site.get(f"/queues/{other.name}").status_code == 404
            assert site.get(f"/parts/queues/{other.name}").status_code == 404
            assert site.get(f"/queues/{other.name}/job", params={"id": "x"}).status_code == 404
            with queue_unchanged(other):
                assert site.post(f"/queues/{other.name}/pause", data={"secret": secret}).status_code == 404
            workers = site.get("/workers").text
            assert mine.id in workers and theirs.id not in workers
            metrics = site.get("/metrics").text
            assert stocked.queue.name in metrics and other.name not in metrics
            assert "echomq_workers_alive 1.0" in metrics
    finally:
        mine.remove()
        theirs.remove()


@pytest.mark.parametrize("path,query", [
    ("", {"state": "dead", "page": "99999999999999999999999"}),  # past i64: was the node's refusal, a 500
    ("", {"state": "dead", "page": "2"}),  # past the last page (2 dead jobs: one page)
    ("", {"state": "dead", "page": "0"}), ("", {"page": "-1"}), ("", {"page": "1e3"}), ("", {"state": "nope"}),
    ("/job", {"id": "bad\\escape"}), ("/job", {"id": "x" * 513}),
])
def test_an_out_of_range_query_value_is_a_400(conn, stocked, path, query):
    with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
        answer = site.get(f"/queues/{stocked.queue.name}{path}", params=query)
        assert answer.status_code == 400, answer.text


@pytest.mark.parametrize("host,warned", [("0.0.0.0", True), ("127.0.0.1", False)])
def test_worker_metrics_beyond_loopback_are_logged_as_open(server, host, warned, tmp_path):
    queue = fresh_name("metrics")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), EMQ_TEST_QUEUE=queue,
               EMQ_TEST_OUT=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "echomq.cli", "worker", "worker_apps:make_app", "--url", server.url,
                           "--metrics-port", "0", "--metrics-host", host, "--burst"],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert ("reachable beyond this host and take no token" in done.stderr) is warned, done.stderr
