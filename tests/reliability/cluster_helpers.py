"""Helpers for the tests on a local cluster: queue names placed on chosen primaries, node digests,
the blocked waiters on each node, and a slot moved between primaries."""

from __future__ import annotations

import itertools

from valkey.crc import key_slot

from echomq.local.cluster import LocalCluster, node_id, slot_ranges
from echomq._protocol.keys import Keyspace
from echomq.local.server import EmbeddedServer
from echomq.worker.waiter import LANES_WAKE
from worker_helpers import wait_until

_n = itertools.count()


def slot_of(name: str) -> int:
    return key_slot(Keyspace(name).pending.encode())


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
            return [n for names in found.values() for n in names]


def digests(cluster: LocalCluster) -> list[bytes]:
    out = []
    for node in cluster.nodes:
        with node.client() as client:
            out.append(client.execute_command("DEBUG", "DIGEST"))
    return out


def blocked_clients(node: EmbeddedServer) -> list[dict]:
    """Connections blocked in a waiter's claiming wait (BZPOPMIN or EMQ.BCLAIM) on ``node``; a wire-6
    worker's BZPOPMIN on the wake markers, its lanes' wake (named ``LANES_WAKE``), is not counted."""
    with node.client() as client:
        return [c for c in client.client_list() if "b" in c["flags"] and c["cmd"].lower() in ("bzpopmin", "emq.bclaim")
                and c.get("name") != LANES_WAKE]


def blocked_waiters(node: EmbeddedServer) -> int:
    return len(blocked_clients(node))


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
