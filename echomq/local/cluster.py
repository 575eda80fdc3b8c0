"""A local Valkey Cluster for tests, benchmarks and trying EchoMQ on a cluster.

``LocalCluster(primaries=3)`` starts that many ``valkey-server --cluster-enabled
yes`` processes on free loopback ports, client and bus (each an :class:`EmbeddedServer`,
which chooses again if another process takes a port first, and each can be
restarted or killed on its own), gives each primary one contiguous range of
the 16384 slots (``CLUSTER ADDSLOTSRANGE``), introduces them (``CLUSTER MEET``)
and waits until every node reports ``cluster_state:ok`` and knows every other.
With ``replicas=N`` each primary gets N replicas (``CLUSTER REPLICATE``), and
:meth:`LocalCluster.failover` promotes one (``CLUSTER FAILOVER``).
Branding is one write of ``{emq}:version`` through the cluster client (the key has
its own hashtag, so one node holds it for the whole cluster).

    with LocalCluster(primaries=3, module=module_path(), brand=6) as cluster:
        conn = echomq.connect(cluster.url, wire=6, cluster=True)
"""

from __future__ import annotations

import time
from typing import Sequence

import valkey
import valkey.cluster
from valkey.crc import key_slot

from ..errors import ServerStartError
from .server import EmbeddedServer

SLOTS = 16384
READY_TIMEOUT_S = 30.0


def node_id(node: EmbeddedServer) -> str:
    with node.client() as client:
        return client.execute_command("CLUSTER", "MYID").decode()


def slot_ranges(primaries: int) -> list[tuple[int, int]]:
    """Contiguous, inclusive slot ranges, one per primary, covering all 16384 slots."""
    bounds = [round(i * SLOTS / primaries) for i in range(primaries + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(primaries)]


class LocalCluster:
    """``primaries`` cluster nodes on 127.0.0.1 (``nodes``, in slot order), each with ``replicas``
    replicas (``replicas_of[i]``), owned by this object."""

    def __init__(
        self,
        primaries: int = 3,
        *,
        replicas: int = 0,
        module: str | None = None,
        brand: int | None = None,
        aof: bool = False,
        appendfsync: str = "everysec",
        extra_args: Sequence[str] = (),
    ) -> None:
        if primaries < 1:
            raise ValueError("a cluster needs at least one primary")
        self.brand = brand

        def node() -> EmbeddedServer:
            return EmbeddedServer(module=module, aof=aof, appendfsync=appendfsync, cluster=True,
                                  extra_args=("--repl-diskless-sync-delay", "0", *extra_args))  # replicas sync at once

        self.nodes = [node() for _ in range(primaries)]
        self.replicas_of = [[node() for _ in range(replicas)] for _ in range(primaries)]

    @property
    def every_node(self) -> list[EmbeddedServer]:
        return self.nodes + [replica for replicas in self.replicas_of for replica in replicas]

    @property
    def url(self) -> str:
        """Any node's URL: the cluster client discovers the rest."""
        return self.nodes[0].url

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def start(self) -> "LocalCluster":
        try:
            for node in self.every_node:
                node.start()
            for node, (first, last) in zip(self.nodes, slot_ranges(len(self.nodes))):
                with node.client() as client:
                    client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
            with self.nodes[0].client() as first_node:
                for node in self.every_node[1:]:
                    first_node.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, node.cluster_port)
            self.wait_ok()
            for primary, replicas in zip(self.nodes, self.replicas_of):
                for replica in replicas:
                    with replica.client() as client:
                        client.execute_command("CLUSTER", "REPLICATE", node_id(primary))
            self.wait_ok()
            if self.brand is not None:
                from ..admin.steps import brand_node

                with self.client() as client:
                    brand_node(client, self.brand)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ok(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Poll every node until it reports ``cluster_state:ok`` and knows all its peers, and every
        replica's link to its primary is up."""
        deadline = time.monotonic() + timeout_s
        pending = list(self.every_node)
        while pending:
            node = pending[0]
            if self._node_ok(node):
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"cluster node on port {node.port} not ok after {timeout_s}s: {self._node_state(node)}"
                )
            time.sleep(0.02)

    def _node_state(self, node: EmbeddedServer) -> str:
        try:
            with node.client(socket_timeout=2) as client:
                info = client.execute_command("CLUSTER", "INFO")
        except valkey.ValkeyError as exc:
            return f"unreachable ({exc})"
        return info.decode() if isinstance(info, bytes) else str(info)

    def _node_ok(self, node: EmbeddedServer) -> bool:
        fields = dict(
            line.split(":", 1) for line in self._node_state(node).splitlines() if ":" in line
        )
        ok = (
            fields.get("cluster_state", "").strip() == "ok"
            and fields.get("cluster_known_nodes", "").strip() == str(len(self.every_node))
            and fields.get("cluster_slots_assigned", "").strip() == str(SLOTS)
        )
        if not ok or node in self.nodes:
            return ok
        with node.client(socket_timeout=2) as client:
            replication = client.info("replication")
        return replication.get("role") != "slave" or replication.get("master_link_status") == "up"

    def client(self, **kwargs) -> valkey.cluster.ValkeyCluster:
        """A plain cluster client (bytes in, bytes out) routed as EchoMQ routes its verbs."""
        from .._client.connection import EchoCluster

        return EchoCluster(host="127.0.0.1", port=self.nodes[0].port, **kwargs)

    def node_for(self, key: str | bytes) -> EmbeddedServer:
        """The node that serves ``key``'s slot (slots are assigned in order, one range per node)."""
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for node, (first, last) in zip(self.nodes, slot_ranges(len(self.nodes))):
            if first <= slot <= last:
                return node
        raise AssertionError(f"slot {slot} is not assigned")

    def restart_node(self, index: int, *, crash: bool = False) -> None:
        """Restart one node (its nodes.conf keeps its slots and peers), then wait for ok again."""
        self.nodes[index].restart(crash=crash)
        self.wait_ok()

    def failover(self, index: int, *, kill: bool = False) -> None:
        """Promote the first replica of primary ``index``, wait until every live node agrees, then
        swap the two so ``nodes`` still lists the primaries in slot order. ``CLUSTER FAILOVER``: the
        primary stops writes and the replica catches up first (nothing lost). ``kill=True``: SIGKILL
        the primary, then ``CLUSTER FAILOVER TAKEOVER`` (what is not replicated yet is lost; the
        killed node stays down, listed among the replicas)."""
        primary, replica = self.nodes[index], self.replicas_of[index][0]
        if kill:
            primary.kill()
        with replica.client() as client:
            client.execute_command("CLUSTER", "FAILOVER", *(["TAKEOVER"] if kill else []))
        live = [node for node in self.every_node if node is not primary or not kill]
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._serves_slots(replica, index, live):
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"the replica on port {replica.port} did not take over within {READY_TIMEOUT_S}s")
            time.sleep(0.02)
        self.nodes[index], self.replicas_of[index][0] = replica, primary
        if not kill:
            self.wait_ok()

    def _serves_slots(self, node: EmbeddedServer, index: int, nodes: Sequence[EmbeddedServer]) -> bool:
        """Whether the map of every one of ``nodes`` gives ``node`` the first slot of range ``index``."""
        first, _ = slot_ranges(len(self.nodes))[index]
        for other in nodes:
            with other.client(socket_timeout=2) as client:
                holder = next((entry for entry in client.execute_command("CLUSTER", "SLOTS")
                               if entry[0] <= first <= entry[1]), None)
            if holder is None or int(holder[2][1]) != node.port:
                return False
        return True

    def stop(self) -> None:
        for node in self.every_node:
            node.cleanup()

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
