"""The tests' own helpers (tests/support/) where they could be wrong: ``unchanged`` proves a block
wrote nothing on a shared server (on each primary of a cluster: ``cluster_unchanged``), so it must
catch a write and must not be fooled by what earlier tests left to expire; ``wait_until`` fails
saying what it waited for."""

from __future__ import annotations

import itertools

import pytest

from support.cluster import cluster_unchanged
from support.dataset import forget_idle_waiter_counts, mask_times, unchanged
from support.waiting import server_ms, wait_server_past, wait_until


def test_unchanged_catches_a_write_anywhere_on_the_node(queue):
    client = queue.connection.client
    with pytest.raises(AssertionError):
        with unchanged(client, queue.keys):
            client.set(f"elsewhere-{queue.name}", "x")  # not one of the queue's keys: the digest sees it
    client.delete(f"elsewhere-{queue.name}")


def test_a_waiter_count_an_earlier_test_left_to_expire_does_not_change_the_digest(queue):
    """A waiter that timed out leaves its 0 in meta, expiring 30 s on (here 200 ms): DEBUG DIGEST
    reads the field as gone once it expires, so the block below, which writes nothing, would fail."""
    client = queue.connection.client
    job = queue.enqueue({"n": 1})
    with pytest.raises(TimeoutError):
        queue.result(job.id, timeout=0.01)
    assert client.hget(queue.keys.meta, "waiters") == b"0"
    client.execute_command("HPEXPIRE", queue.keys.meta, 200, "FIELDS", 1, "waiters")
    with unchanged(client, queue.keys):
        wait_server_past(client, server_ms(client) + 300)
    assert client.hget(queue.keys.meta, "waiters") is None


def test_a_completed_record_kept_as_a_field_that_expires_inside_the_block_does_not_change_the_digest(queue):
    """A record of the fields layout (docs/spec.md §12) has its own expiry, which no switch holds: a
    short retention ending inside the block, which writes nothing, would change DEBUG DIGEST."""
    client = queue.connection.client
    client.execute_command("HSETEX", queue.keys.done_hash, "PXAT", server_ms(client) + 200, "FIELDS", 1, "j",
                           b"1,5,,,r")
    with unchanged(client, queue.keys):
        wait_server_past(client, server_ms(client) + 300)
    assert client.hget(queue.keys.done_hash, "j") == b"1,5,,,r"  # kept for good: only its end was taken away


def test_snap_masks_a_packed_record_s_times_as_a_row_s():
    now = 1_733_400_000_000
    state = {b"emq:{q}:done": ("hash", {b"a": b"1,%d,%d,,r,1" % (now, now - 5), b"b": b"junk"})}
    assert mask_times(state, now) == {b"emq:{q}:done": ("hash", {b"a": b"1,<time>,<time>,,r,1", b"b": b"junk"})}
    with pytest.raises(AssertionError):  # a time from outside the window is no server time of the call
        mask_times({b"emq:{q}:done": ("hash", {b"a": b"1,5,,,r"})}, now)


def test_a_live_waiters_count_is_kept_and_forgotten_once_it_leaves(queue):
    client = queue.connection.client
    client.hset(queue.keys.meta, "waiters", 1)
    client.execute_command("HEXPIRE", queue.keys.meta, 30, "FIELDS", 1, "waiters")
    forget_idle_waiter_counts(client)
    assert client.hget(queue.keys.meta, "waiters") == b"1"
    client.hincrby(queue.keys.meta, "waiters", -1)  # as the waiter counts itself out: the expiry stays
    forget_idle_waiter_counts(client)  # the node is not scanned again, the count it kept is read
    assert client.hget(queue.keys.meta, "waiters") is None


def test_wait_until_returns_what_it_found_or_names_what_it_waited_for():
    assert wait_until(lambda: 42, 1) == 42
    with pytest.raises(AssertionError, match="timed out after 0.05s waiting for the impossible"):
        wait_until(lambda: False, 0.05, "the impossible")


def test_cluster_unchanged_catches_a_write_on_any_primary(cluster4):
    last = cluster4.nodes[-1]
    key = next(f"elsewhere-{i}" for i in itertools.count() if cluster4.node_for(f"elsewhere-{i}") is last)
    with last.client() as client:
        with pytest.raises(AssertionError):
            with cluster_unchanged(cluster4):
                client.set(key, "x")
        client.delete(key)
