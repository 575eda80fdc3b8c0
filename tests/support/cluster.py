"""The tests on a local cluster: queue names placed on chosen primaries, node digests, the blocked
waiters on each node, a slot moved between primaries, and a module's connection to the cluster."""

from __future__ import annotations

import itertools
from contextlib import ExitStack, contextmanager
from typing import Iterator

import pytest

from echomq import connect
from echomq._protocol.keys import slot_of
from echomq.local.cluster import LocalCluster, node_id, slot_ranges
from echomq.local.server import EmbeddedServer

from .dataset import digest, unchanged
from .waiting import wait_until
from .workers import blocked_waiters

_n = itertools.count()


@pytest.fixture
def conn(cluster, wire):
    """The test's connection, to its wire's cluster: a module imports it to run on the cluster
    (tests it imports from a standalone module too)."""
    with connect(cluster.url, wire=wire, cluster=True) as connection:
        yield connection


def names_on_every_node(cluster: LocalCluster, per_node: int = 2) -> list[str]:
    """Queue names chosen so that every primary serves ``per_node`` of them."""
    found: dict[int, list[str]] = {i: [] for i in range(len(cluster.nodes))}
    ranges = slot_ranges(len(cluster.nodes))
    for i in itertools.count():
        name = f"spread-{next(_n)}-{i}"
        slot = slot_of(name)
        node = next(k for k, (lo, hi) in enumerate(ranges) if lo <= slot <= hi)
        if len(found[node]) < per_node:
            found[node].append(name)
        if all(len(v) == per_node for v in found.values()):
            break
    return [n for names in found.values() for n in names]


def digests(cluster: LocalCluster) -> list[bytes]:
    """Each primary's DEBUG DIGEST, in node order."""
    out = []
    for node in cluster.nodes:
        with node.client() as client:
            out.append(digest(client))
    return out


@contextmanager
def cluster_unchanged(cluster: LocalCluster) -> Iterator[None]:
    """:class:`support.dataset.unchanged` on every primary (DEBUG DIGEST): the block wrote nothing anywhere."""
    with ExitStack() as held:
        for node in cluster.nodes:
            held.enter_context(unchanged(held.enter_context(node.client()), dump_keys=False))
        yield


def blocked_on(node: EmbeddedServer) -> int:
    """Workers' waiters blocked on ``node`` (:func:`support.workers.blocked_waiters`)."""
    with node.client() as client:
        return blocked_waiters(client)


def migrate_slot(slot: int, source: EmbeddedServer, target: EmbeddedServer, everyone: list[EmbeddedServer],
                 batch: int = 1000) -> int:
    """Move ``slot`` from ``source`` to ``target`` the classic way: IMPORTING on the target, MIGRATING
    on the source, MIGRATE its keys (all a GETKEYSINSLOT lists, in one MIGRATE, until none is left),
    then SETSLOT NODE on every node. Returns how many keys moved."""
    target_id, source_id = node_id(target), node_id(source)
    moved = 0
    with source.client() as src, target.client() as dst:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 10_000, "KEYS", *keys)
            moved += len(keys)
        dst.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    for node in everyone:
        if node not in (source, target):
            with node.client() as client:
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    return moved


def slot_owner(node: EmbeddedServer, slot: int) -> int | None:
    """The port ``node``'s map gives ``slot`` to."""
    with node.client() as client:
        for first, last, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if first <= slot <= last:
                return int(primary[1])
    return None


def migrate_slot_atomically(slot: int, source: EmbeddedServer, target: EmbeddedServer,
                            everyone: list[EmbeddedServer]) -> None:
    """Valkey 9's atomic slot migration (CLUSTER MIGRATESLOTS): the slot's keys stream to the target
    and ownership changes in one step once it has them all; returns when every node agrees."""
    with source.client() as client:
        client.execute_command("CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", slot, slot, "NODE", node_id(target))
    wait_until(lambda: all(slot_owner(node, slot) == target.port for node in everyone), 20,
               f"slot {slot} owned by {target.port} everywhere")
