"""The chaos harness in its CI size: every wire, both fsync policies, a few thousand jobs.

The long mode (100k jobs) is ``python -m tests.reliability.chaos --long``; its figures
are in docs/guarantees.md. Each run prints its report (``pytest -s`` shows it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from chaos import Config, run, whole_commands
from support.waiting import wait_until

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]  # thousands of jobs through crashes, kills, restarts


def show(report) -> None:
    figures = {k: v for k, v in report.__dict__.items() if k != "config"}
    print(json.dumps(figures, sort_keys=True))


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_chaos_ledger_accounts_for_every_job(wire, fsync, tmp_path):
    report = run(Config(wire=wire, fsync=fsync, jobs=1500, slow_every=100, seed=11 + wire), str(tmp_path))
    show(report)
    assert report.violations == []
    assert report.enqueued == 1500
    held_back = report.regressions.get("enqueues_held_back_from_the_aof", 0)
    assert report.completed + sum(report.dead.values()) + held_back == 1500
    assert report.lost == report.in_two_sets == report.row_set_mismatch == report.unknown_keys == 0
    assert report.stale_settles_tried > 0  # slow first runs settle after their job was claimed again
    assert report.restarts == 3 and report.worker_kills >= 6
    if not report.held_back_crashes:  # else a crash was a short power cut (everysec, a slow disk): measured
        assert held_back == 0
        assert report.stale_settles_accepted == 0 and report.tokens_settled_twice == 0
        assert report.metrics == {"completed": report.completed, "failed": sum(report.dead.values())}
    if wire == 6:
        assert report.crossed_restart_counted == 0  # restart-caused expiries never count as stalls
    else:
        assert report.crossed_restart_exempt == 0  # the scripts have no exemption: every expiry counts


def test_power_loss_under_everysec_is_measured_not_silent_corruption(wire, tmp_path):
    """A power cut under everysec, modelled as losing the AOF's last second: states regress
    (a prefix of history survives), but the keyspace stays consistent: no id in two sets, no
    row that disagrees with its set, nothing the ledger does not know. What regressed is
    counted in ``report.regressions`` and documented."""
    report = run(Config(wire=wire, fsync="everysec", power_loss=True, jobs=1500, seed=21 + wire), str(tmp_path))
    show(report)
    assert report.violations == []
    assert report.in_two_sets == report.row_set_mismatch == report.unknown_keys == 0
    assert report.regressions["aof_bytes_cut"] > 0


def test_waitaof_confirms_an_acknowledged_enqueue_is_on_disk_under_everysec(wire, tmp_path):
    """The remedy docs/guarantees.md gives for everysec: WAITAOF 1 0 <ms> after the writes that
    must survive a power cut answers once the local AOF is fsynced past them."""
    from echomq import EmbeddedServer, Queue, connect, module_path

    module = module_path() if wire == 6 else None
    with EmbeddedServer(module=module, brand=wire, aof=True, appendfsync="everysec", directory=tmp_path) as server:
        with connect(server.url, wire=wire) as conn:
            q = Queue(conn, "durable")
            q.enqueue_many([{"n": n} for n in range(100)])
            local, replicas = conn.client.execute_command("WAITAOF", 1, 0, 5000)
            assert (local, replicas) == (1, 0)


@pytest.fixture(scope="module")
def slow_fsync_shim(tmp_path_factory) -> Path:
    shim = tmp_path_factory.mktemp("shim") / "slow_fsync.so"
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o", str(shim),
                    str(Path(__file__).with_name("slow_fsync.c")), "-ldl"], check=True)
    return shim


def test_a_slow_disk_under_everysec_holds_acknowledged_writes_back_from_a_crash(wire, tmp_path, monkeypatch,
                                                                                   slow_fsync_shim):
    """Why the chaos harness reads ``aof_pending_bio_fsync`` before each crash (``F`` in its ledger,
    docs/guarantees.md §2): while the background fsync of the last second still runs, everysec
    holds new writes back from the AOF for up to 2 s and answers them all the same. A crash of
    the process, not only of the machine, then loses them. The disk is made slow by an
    LD_PRELOAD shim that delays only the server's background fsync thread."""
    from chaos import Run

    from echomq import EmbeddedServer, Queue, connect, module_path

    monkeypatch.setenv("LD_PRELOAD", str(slow_fsync_shim))
    monkeypatch.setenv("SLOW_FSYNC_MS", "4000")
    server = EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire, aof=True,
                            appendfsync="everysec", directory=tmp_path / "data").start()
    monkeypatch.delenv("LD_PRELOAD")  # the server's first run only
    try:
        with connect(server.url, wire=wire) as conn, server.client() as client:
            q = Queue(conn, "held")
            # an earlier write's fsync (the brand's) would hold this one back too
            wait_until(lambda: not Run.fsync_running(server), 10, "the start-up fsync to end", every=0.02)
            q.enqueue({"n": 0})  # written; everysec starts its fsync within the second
            # in the file before the crash: a background fsync that began between the wait above and
            # this enqueue (another second's) would hold it back too, and the crash would take it
            wait_until(lambda: client.info("persistence")["aof_buffer_length"] == 0, 10,
                       "the first job to reach the file", every=0.02)
            wait_until(lambda: Run.fsync_running(server), 10, "a background fsync to start", every=0.02)
            q.enqueue_many([{"n": n} for n in range(1, 101)])  # answered, yet held back
            assert q.counts().pending == 101
            assert client.info("persistence")["aof_buffer_length"] > 0
        server.kill()
        server.start()
        with connect(server.url, wire=wire) as conn:
            assert Queue(conn, "held").counts().pending == 1  # the 100 acknowledged enqueues are gone
    finally:
        server.cleanup()


@pytest.mark.parametrize("fsync_running", [True, False])
def test_the_checker_excuses_only_enqueues_a_held_back_crash_could_lose(tmp_path, fsync_running):
    """The checker alone, on a ledger written here (no server): an everysec crash that found the
    fsync running excuses a vanished enqueue answered in its window on that node's queues, and
    nothing else; a crash that found it idle excuses nothing."""
    from chaos import Config, check

    s = 1_000_000_000  # the ledger's clock is in ns
    c = Config(fsync="everysec", jobs=4, queues=2, poison_every=0, seed=5)
    ids = [f"c5-{n:07d}" for n in range(4)]
    (tmp_path / "main.log").write_text("\n".join([
        f"E {1 * s} chaos5-0 {ids[0]} ok:1",  # long before the crash: a loss
        f"E {9 * s} chaos5-0 {ids[1]} ok:1",  # in the window, on the crashed node's queue
        f"E {9 * s} chaos5-1 {ids[2]} ok:1",  # in the window, but another node's queue
        f"P {2 * s} run-a",
        f"F {10 * s} {int(fsync_running)} chaos5-0",
        f"D {10 * s + 1000} crash",
        f"E {10 * s + 2000} chaos5-0 {ids[3]} ok:1",  # answered by the old process after the reading
        f"P {11 * s} run-b",
    ]) + "\n")
    dump = {"keys": {}, "metrics": {"chaos5-0": {"completed": 0, "failed": 0},
                                    "chaos5-1": {"completed": 0, "failed": 0}}}
    report = check(tmp_path, c, dump)
    lost = sorted(line.split()[1] for line in report.violations if line.startswith("lost:"))
    if fsync_running:
        assert lost == [ids[0], ids[2]]
        assert report.regressions["enqueues_held_back_from_the_aof"] == 2 and report.held_back_crashes == 1
    else:
        assert lost == ids
        assert "enqueues_held_back_from_the_aof" not in report.regressions and report.held_back_crashes == 0


def test_a_power_cut_keeps_whole_commands_of_the_aof():
    """The power-loss model's cut (no server): a size that ends a command keeps it (a CI run once cut
    the file's only SET, the brand, and the node came back unbranded); a size inside a command cuts
    back to its start; a size at or past the end keeps the file."""
    select, brand = b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n", b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$1\r\nv\r\n"
    aof = select + brand + brand
    ends_brand = len(select + brand)
    assert whole_commands(aof[:ends_brand + 1], ends_brand, len(aof)) == ends_brand
    assert whole_commands(aof[:ends_brand + 6], ends_brand + 5, len(aof)) == ends_brand
    assert whole_commands(aof[:ends_brand], ends_brand - 1, len(aof)) == len(select)
    assert whole_commands(aof, len(aof), len(aof)) == len(aof)
    assert whole_commands(aof[:1], 0, len(aof)) == 0
