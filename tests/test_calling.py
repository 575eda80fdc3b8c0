"""How a task is called, decided without a server (echomq/worker/calling.py, the envelope's headers):
the calling convention read from a handler's signature, a call checked before it is sent, the
per-job options and their refusals, the headers a job carries and the worker's reading of them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

import echomq
from echomq import AsyncJobContext, Backoff, JobContext
from echomq.errors import ConfigurationError
from echomq._protocol import envelope
from echomq.worker import calling
from echomq.worker.calling import (PREV_ALL, PREV_ONE, UNSET, BadHeaders, JobOptions, bind, call_form, handler_call,
                                   job_options, overrides_of, own_headers, previous, stored_arguments, stored_call)
from echomq.worker.tasks import check_timeout


def options(**given):
    return job_options("t", check_timeout=check_timeout, **given)


# -- the envelope's own headers -----------------------------------------------------------------
def test_own_headers_ride_beside_the_trace_carrier_and_unknown_ones_are_kept():
    envelope.set_producer(lambda queue: {"traceparent": "00-abc"})
    try:
        stored = envelope.wrap("q", b'{"n":1}', {"task": "add", "args": 1, "future": [1, 2]})
    finally:
        envelope.set_producer(None)
    headers, payload = envelope.unwrap(stored)
    assert payload == b'{"n":1}'
    assert envelope.trace_of(headers) == {"traceparent": "00-abc"}  # the carrier alone: no "emq" in it
    read, inner = envelope.read_headers(stored)
    assert (read.task, read.trace, inner) == ("add", {"traceparent": "00-abc"}, b'{"n":1}')
    assert read.own == {"task": "add", "args": 1, "future": [1, 2]}  # a header nobody knows is kept as it was
    # an older reader took an envelope's values for strings only: it sees none here, so it does not unwrap
    assert not all(isinstance(value, str) for value in headers.values())


def test_a_job_without_headers_is_stored_as_the_serializer_wrote_it():
    assert envelope.wrap("q", b'{"n":1}', None) == b'{"n":1}' == envelope.wrap("q", b'{"n":1}', {})
    read, payload = envelope.read_headers(b'{"n":1}')
    assert (read.task, read.trace, read.own, read.all, payload) == (None, None, {}, {}, b'{"n":1}')
    assert envelope.read_headers(None)[1] is None


@pytest.mark.parametrize("stored", [
    envelope.MAGIC + b'{"emq":"not an object"}\x00x',  # EchoMQ's own headers are an object
    envelope.MAGIC + b'{"emq":{},"n":1}\x00x',  # the carrier's values are strings
])
def test_an_envelope_of_another_shape_is_the_payload_itself(stored):
    assert envelope.unwrap(stored) == (None, stored)


@pytest.mark.parametrize("named, shown", [("add", "add"), (7, "7"), ("", '""'), ("x" * 201, json.dumps("x" * 201)[:200]),
                                          (None, "null")])
def test_a_task_name_read_from_a_job_is_its_string_or_its_json_text(named, shown):
    assert envelope.task_named({"task": named}) == shown
    assert envelope.task_named({}) is None and envelope.task_named(None) is None


# -- the calling convention ----------------------------------------------------------------------
def payload_only(payload): ...
def payload_and_ctx(payload, ctx): ...
def annotated(data: dict, job: JobContext): ...
def annotated_async(data: dict, job: "AsyncJobContext"): ...
def add(x, y=1): ...
def keyword_context(x, *, ctx): ...
def positional_context(x, ctx, y, /): ...
def nothing(): ...
def context_first(ctx, url, depth=1): ...  # arq's order
def context_last(x, y=0, ctx=None): ...
def spread(*args, **kwargs): ...


@pytest.mark.parametrize("fn, context, at, single", [
    (payload_only, None, None, "payload"),
    (payload_and_ctx, "ctx", 1, "payload"),
    (annotated, "job", 1, "data"),
    (annotated_async, "job", 1, "data"),
    (add, None, None, None),
    (keyword_context, "ctx", None, "x"),
    (positional_context, "ctx", 1, None),
    (nothing, None, None, None),
    (spread, None, None, None),
    (print, None, None, None),  # a builtin's signature is not read: any call is taken
])
def test_the_form_of_a_call_is_read_from_the_handlers_signature(fn, context, at, single):
    form = call_form(fn)
    assert (form.context, form.context_at, form.single) == (context, at, single)


def test_a_call_is_checked_against_the_handlers_parameters_before_it_is_sent():
    assert bind(call_form(add), "add", (2,), {"y": 3}) == ((2, 3), {})
    assert bind(call_form(spread), "spread", (1,), {"k": 2}) == ((1,), {"k": 2})
    with pytest.raises(ConfigurationError, match=r"task add is called as add\(x, y=1\): too many positional"):
        bind(call_form(add), "add", (1, 2, 3), {})
    with pytest.raises(ConfigurationError, match="missing a required argument: 'job'.*named ctx or annotated"):
        bind(call_form(lambda data, job: None), "f", ({},), {})
    # the context is never the caller's to give
    with pytest.raises(ConfigurationError, match="too many positional"):
        bind(call_form(payload_and_ctx), "p", ({}, "ctx"), {})


def test_a_call_of_one_argument_stores_it_as_the_payload_and_any_other_as_args_and_kwargs():
    assert stored_call(call_form(payload_and_ctx), ({"to": "a"},), {}) == ({"to": "a"}, False)
    assert stored_call(call_form(payload_only), (), {"payload": 5}) == (5, False)
    assert stored_call(call_form(add), (2, 3), {}) == ({"args": [2, 3], "kwargs": {}}, True)
    assert stored_call(call_form(spread), (), {"k": 1}) == ({"args": [], "kwargs": {"k": 1}}, True)


@pytest.mark.parametrize("fn, args, kwargs, called", [
    (payload_and_ctx, [{"a": 1}], {}, ([{"a": 1}], {"ctx": "CTX"})),
    (positional_context, [1, 2], {}, ([1, "CTX", 2], {})),
    (context_first, ["u", 2], {}, (["CTX", "u", 2], {})),  # a positional argument after it: passed in its place
    (context_first, [], {"url": "u"}, ([], {"url": "u", "ctx": "CTX"})),
    (context_last, [1], {}, ([1], {"ctx": "CTX"})),  # y left to its default: by name
    (add, [1, 2], {}, ([1, 2], {})),
])
def test_the_worker_puts_the_context_where_the_handler_takes_it(fn, args, kwargs, called):
    assert handler_call(call_form(fn), args, kwargs, "CTX") == called


# -- per-job options ------------------------------------------------------------------------------
def test_options_are_turned_into_what_the_verbs_take():
    eta = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=timezone(timedelta(hours=2)))
    assert options(eta=eta).at_ms == 1893546245678
    assert options(delay=1.5).delay_ms == 1500 and options(delay=timedelta(minutes=1)).delay_ms == 60_000
    assert options(delay=0).delay_ms is None  # now
    assert options(timeout=None).timeout is None and options().timeout is UNSET
    assert options(max_attempts=5, backoff=Backoff(base_ms=10)).max_attempts == 5


@pytest.mark.parametrize("given, refused", [
    ({"eta": datetime(2030, 1, 1)}, "naive datetime"),
    ({"eta": "2030-01-01"}, "bad eta"),
    ({"eta": datetime.now(timezone.utc), "delay": 1}, "delay= and eta= both given"),
    ({"delay": -1}, "bad delay"),
    ({"delay": True}, "bad delay"),
    ({"priority": -1}, "priority"),
    ({"id": ""}, "id"),
    ({"unique_for": 10}, "unique_for= needs the job's id="),
    ({"unique_for": -1, "id": "a"}, "bad unique_for"),
    ({"group": "g", "delay": 5}, "lane job .* cannot be delayed"),
    ({"max_attempts": 0}, "bad max_attempts"),
    ({"backoff": {"base_ms": 1}}, "bad backoff"),
    ({"timeout": 0}, "bad timeout"),
])
def test_a_bad_option_is_refused_naming_it(given, refused):
    with pytest.raises(ConfigurationError, match=refused):
        options(**given)


# -- the headers a job carries, and the worker's reading of them ------------------------------------
def test_own_headers_carry_the_name_the_form_and_the_overrides():
    chosen = JobOptions(max_attempts=4, backoff=Backoff(base_ms=5, max_ms=50), timeout=None)
    own = own_headers("add", True, chosen, PREV_ONE)
    assert own == {"task": "add", "args": 1, "prev": "one", "max_attempts": 4, "timeout": None,
                   "backoff": {"base_ms": 5, "factor": 2.0, "max_ms": 50, "jitter": 0.2}}
    assert overrides_of(own, check_timeout) == calling.Overrides(4, Backoff(base_ms=5, max_ms=50), None)
    assert own_headers("send", False) == {"task": "send"}
    assert overrides_of({"task": "send"}, check_timeout) is calling.NO_OVERRIDES


@pytest.mark.parametrize("own", [{"max_attempts": 0}, {"max_attempts": "3"}, {"backoff": {"base": 1}},
                                 {"backoff": [1]}, {"backoff": {"base_ms": -1}}, {"timeout": -1}, {"timeout": "1"}])
def test_malformed_overrides_in_a_job_are_refused(own):
    with pytest.raises(BadHeaders, match="own headers cannot be read"):
        overrides_of(own, check_timeout)


def test_a_job_s_stored_call_and_its_previous_results_are_read_back():
    assert stored_arguments({"to": "a"}, {"task": "s"}) == ([{"to": "a"}], {})
    assert stored_arguments({"args": [1], "kwargs": {"y": 2}}, {"args": 1}) == ([1], {"y": 2})
    with pytest.raises(BadHeaders, match="it is not one"):
        stored_arguments([1, 2], {"args": 1})
    assert previous({}, None) == []
    assert previous({"prev": PREV_ONE}, {"c1": 5}) == [5]
    assert previous({"prev": PREV_ALL}, {"b": 2, "a": 1, "c": 3}) == [[1, 2, 3]]  # in the children's id order
    with pytest.raises(BadHeaders, match="not a flow parent"):
        previous({"prev": PREV_ONE}, None)
    with pytest.raises(BadHeaders, match="2 children left one"):
        previous({"prev": PREV_ONE}, {"a": 1, "b": 2})


def test_a_job_runs_the_task_it_names_or_its_queues_one_task():
    one, two = {"only": "ONLY"}, {"a": "A", "b": "B"}
    assert calling.task_for(one, "q", None) == "ONLY" == calling.task_for(one, "q", {"task": "only"})
    assert calling.task_for(two, "q", {"task": "b"}) == "B"
    with pytest.raises(echomq.UnknownTask, match=r"no task \"c\" on queue 'q' in this worker's app \(it has a, b\)"):
        calling.task_for(two, "q", {"task": "c"})
    with pytest.raises(echomq.UnknownTask, match='no task "other"'):
        calling.task_for(one, "q", {"task": "other"})  # one task, but not the one named
    with pytest.raises(echomq.UnknownTask, match=r"names no task, and queue 'q' has 2 \(a, b\)"):
        calling.task_for(two, "q", None)
    with pytest.raises(echomq.UnknownTask, match=r'no task "\\x1b\[2J"'):  # a name from a job is shown escaped
        calling.task_for(two, "q", {"task": "\x1b[2J"})


def test_a_named_job_is_called_with_its_stored_call_its_previous_results_first():
    form = call_form(add)
    assert calling.named_call(form, {"args": 1, "prev": PREV_ONE}, {"args": [], "kwargs": {"y": 5}}, "CTX",
                              {"c": 10}) == ([10], {"y": 5})
    assert calling.named_call(call_form(payload_and_ctx), {"task": "p"}, {"to": "a"}, "CTX", None) == (
        [{"to": "a"}], {"ctx": "CTX"})


def test_what_a_worker_runs_for_a_job_its_task_its_overrides_and_its_form_of_call():
    one, two = {"only": "ONLY"}, {"a": "A", "b": "B"}
    # no headers of ours, or none naming a task: the queue's one task, as ever ((payload, ctx)[:arity])
    assert calling.job_run(one, "q", None, check_timeout) == ("ONLY", calling.NO_OVERRIDES, False)
    assert calling.job_run(one, "q", {"a-later-header": 1}, check_timeout) == ("ONLY", calling.NO_OVERRIDES, False)
    # a job naming its task: that one, with the job's stored call and its overrides
    assert calling.job_run(two, "q", {"task": "b", "max_attempts": 7, "timeout": None}, check_timeout) == (
        "B", calling.Overrides(max_attempts=7, timeout=None), True)
    with pytest.raises(echomq.UnknownTask):
        calling.job_run(two, "q", {"a-later-header": 1}, check_timeout)
    with pytest.raises(BadHeaders, match="bad max_attempts"):
        calling.job_run(one, "q", {"task": "only", "max_attempts": "7"}, check_timeout)
