"""The queues under test, each as the commands that run its worker and its producer.

EchoMQ's are driven by bench/drive_echomq.py in EchoMQ's venv; each peer by
bench/peers/drive.py in a venv of its own (bench/.peers-venv/<peer>) or, for BullMQ
on Node, by bench/peers/bullmq_node.mjs. Peers are installed on demand from
bench/peers/requirements.txt and package.json, and asynq (Go) is built from bench/peers/asynq
(its module from the Go proxy); one whose install or smoke check fails is skipped with its reason.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .common import ROOT, say

PEERS_DIR = ROOT / "bench" / "peers"
PEERS_VENV = ROOT / "bench" / ".peers-venv"
PY_PEERS = ("bullmq", "arq", "rq", "saq", "celery", "dramatiq")
ALL_PEERS = PY_PEERS + ("bullmq-c10", "bullmq-node", "bullmq-node-c10", "asynq")
ASYNQ_DIR = PEERS_DIR / "asynq"


@dataclass
class System:
    name: str  #: as the tables print it
    kind: str  #: "echomq" or "peer"
    brand: int | None  #: the wire the node is branded for; None for a peer (a plain node)
    base: list[str]  #: argv prefix: [python-or-node, driver, (system)]
    config: str = ""
    version: str = ""
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None  #: where its processes start (an older echomq tree, for a before/after)

    def argv(self, what: str, url: str, queue: str, *rest: object) -> list[str]:
        if self.kind == "echomq":
            return [*self.base[:-1], what, self.base[-1], url, queue, *map(str, rest)]
        if self.base[0].endswith("node") or len(self.base) == 1:  # Node's script, or a built program
            return [*self.base, what, url, queue, *map(str, rest)]
        return [*self.base[:-1], what, self.base[-1], url, queue, *map(str, rest)]


def echomq_system(wire: int, mode: str) -> System:
    if mode.startswith("emq-idle"):
        cap = mode[len("emq-idle"):]
        return System(f"EchoMQ wire {wire} (emq worker, --idle-max-ms {cap})", "echomq", wire,
                      [sys.executable, "-m", "bench.drive_echomq", f"{wire}/{mode}"],
                      f"emq worker defaults but the idle back-off capped at {cap} ms (default 1000)")
    labels = {"emq": "emq worker", "emq-noresult": "emq worker, no results kept",
              "emq-record": "emq worker, results as keys", "loop": "bare loop", "batch": "bare loop, batched",
              "batch-kept": "bare loop, batched, results kept", "fused": "bare loop, batched, settle+claim fused"}
    configs = {
        "emq": "emq worker defaults: concurrency 10, claim batch 10; an idle queue waits on the server "
               "(BZPOPMIN on the wake marker on wire 4, EMQ.BCLAIM on wire 6)",
        "emq-noresult": "emq worker defaults but the task keeps no results (result_ttl=0: plain COMPLETE, "
                        "as the bare loops settle; the default keeps each result with PUBLISH)",
        "emq-record": "emq worker defaults but the queue keeps its results in the record layout (a key done:<id> "
                      "each, as 0.2.0 did; the default is a field of the queue's hash done, docs/spec.md §12)",
        "loop": "claim -> no-op -> complete, one round trip each (not the worker: the verbs' own speed)",
        "batch": "claim_many(10) -> no-ops -> complete_many, pipelined (not the worker)",
        "batch-kept": "as batched, but each no-op's result (None) is kept as the worker keeps it by default "
                      "(PUBLISHES, retention 600 s): the server's work per job the worker's (not the worker)",
        "fused": "as batched, but each batch's completes and the next claims go in one "
                 "Queue.settle_and_claim (one round trip per batch on wire 6, two on wire 4; not the worker)",
    }
    return System(f"EchoMQ wire {wire} ({labels[mode]})", "echomq", wire,
                  [sys.executable, "-m", "bench.drive_echomq", f"{wire}/{mode}"], configs[mode])


@functools.cache  # one extraction a revision: checked at the start (check_revision), run later
def echomq_tree(rev: str) -> tuple[Path, str]:
    """The echomq/ tree of git revision ``rev`` extracted to a temporary directory, and ``rev``'s
    short hash: a process started there (bench/ on its PYTHONPATH) imports that ``echomq`` first."""
    import tempfile

    where = Path(tempfile.mkdtemp(prefix=f"emq-{rev}-"))
    archive = subprocess.run(["git", "archive", rev, "echomq"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    short = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    return where, short


def echomq_at(rev: str, wire: int) -> System:
    """``emq worker`` as of git revision ``rev`` (:func:`echomq_tree`)."""
    where, short = echomq_tree(rev)
    return System(f"EchoMQ wire {wire} (emq worker @ {short})", "echomq", wire,
                  [sys.executable, "-m", "bench.drive_echomq", f"{wire}/emq"],
                  f"emq worker defaults, the echomq package as of {short} (a before/after in the same run)",
                  cwd=where)


def check_revision(rev: str) -> str | None:
    """Why ``emq worker`` as of ``rev`` cannot run this bench's tasks (None: it can), found before
    the run's first section rather than at its worker sections, half an hour in."""
    try:
        where, short = echomq_tree(rev)
    except subprocess.CalledProcessError as exc:
        return f"git cannot extract echomq/ at {rev!r}: {exc.stderr.decode(errors='replace').strip()}"
    probe = subprocess.run([sys.executable, "-c", "import echomq.cli, echomq.worker, bench.echomq_tasks"],
                           cwd=where, env=child_env("", ""), capture_output=True, text=True)
    if probe.returncode:
        last = (probe.stderr.strip().splitlines() or ["(no error output)"])[-1]
        return f"the echomq package as of {short} cannot import bench.echomq_tasks ({last}): pick a later revision"
    return None


def emq_worker_available() -> tuple[bool, str]:
    try:
        from echomq import cli  # noqa: F401
        from echomq.worker.worker import Worker  # noqa: F401
    except Exception as exc:  # not landed yet: the bare loop stands in, labelled so
        return False, f"echomq.cli / echomq.worker not importable ({exc})"
    return True, ""


# -- peers ---------------------------------------------------------------------------
def _requirement(peer: str) -> str | None:
    for line in (PEERS_DIR / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        name = line.split("[", 1)[0].split("=", 1)[0].split()[0] if line else ""
        if line and name == peer:
            return line
    return None


def _venv_python(peer: str) -> Path:
    return PEERS_VENV / peer / "bin" / "python"


def install_asynq() -> tuple[System | None, str]:
    """asynq's driver built with Go (bench/peers/asynq: our main.go, the module from the Go proxy)
    when its sources are newer than the build; (System, "") or (None, why skipped)."""
    go = shutil.which("go")
    if not go:
        return None, "go is not on PATH"
    binary = PEERS_VENV / "asynq" / "asynq-bench"
    sources = [ASYNQ_DIR / name for name in ("main.go", "go.mod", "go.sum")]
    if not binary.exists() or binary.stat().st_mtime < max(f.stat().st_mtime for f in sources):
        say(f"building asynq's driver (go build in {ASYNQ_DIR})")
        binary.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([go, "build", "-o", str(binary), "."], cwd=ASYNQ_DIR, capture_output=True, text=True,
                              timeout=900)
        if done.returncode:
            return None, f"go build failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:200]}"
    check = subprocess.run([str(binary), "config"], capture_output=True, text=True, timeout=60)
    if check.returncode:
        return None, f"driver check failed: {(check.stderr.strip().splitlines() or ['?'])[-1][:200]}"
    version = next((line.split()[-1] for line in (ASYNQ_DIR / "go.mod").read_text().splitlines()
                    if line.strip().startswith("github.com/hibiken/asynq ")), "?")
    return System("asynq (Go), concurrency 10", "peer", None, [str(binary)], json.loads(check.stdout)["config"],
                  f"asynq {version}", env={"BENCH_CONCURRENCY": "10"}), ""


def install_peer(peer: str) -> tuple[System | None, str]:
    """Install the peer if needed, check that its driver imports; (System, "") or (None, why skipped)."""
    if peer == "asynq":
        return install_asynq()
    if peer.startswith("bullmq-node"):
        node, npm = shutil.which("node"), shutil.which("npm")
        if not node or not npm:
            return None, "node or npm is not on PATH"
        if not (PEERS_DIR / "node_modules" / "bullmq").is_dir() or not (PEERS_DIR / "node_modules" / "ioredis").is_dir():
            say("installing BullMQ for Node (npm install in bench/peers)")
            done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent"], cwd=PEERS_DIR,
                                  capture_output=True, text=True, timeout=600)
            if done.returncode:
                return None, f"npm install failed: {done.stderr.strip().splitlines()[-1:]}"
        version = json.loads((PEERS_DIR / "node_modules" / "bullmq" / "package.json").read_text())["version"]
        if peer.endswith("-c10"):
            return System("BullMQ (Node), concurrency 10", "peer", None, [node, str(PEERS_DIR / "bullmq_node.mjs")],
                          "Node; Worker concurrency 10 (EchoMQ's worker default); Queue.addBulk",
                          f"bullmq {version}", env={"BENCH_CONCURRENCY": "10"}), ""
        return System("BullMQ (Node)", "peer", None, [node, str(PEERS_DIR / "bullmq_node.mjs")],
                      "Node; Worker concurrency 1 (its default); Queue.addBulk", f"bullmq {version}"), ""
    variant = {}
    if peer == "bullmq-c10":  # the Python port again, with EchoMQ's worker concurrency
        peer, variant = "bullmq", {"BENCH_CONCURRENCY": "10"}
    requirement = _requirement(peer)
    if requirement is None:
        return None, f"{peer} is not listed in bench/peers/requirements.txt"
    python = _venv_python(peer)
    stamp = PEERS_VENV / peer / ".bench-requirement"
    if not python.exists() or not stamp.exists() or stamp.read_text() != requirement:
        say(f"installing peer {requirement} into {PEERS_VENV / peer}")
        try:
            subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV / peer)], check=True,
                           capture_output=True, timeout=300)
            done = subprocess.run([str(python), "-m", "pip", "install", "-q", *requirement.split(), "hiredis"],
                                  capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"venv/pip failed: {exc}"
        if done.returncode:
            tail = (done.stderr.strip().splitlines() or ["?"])[-1]
            return None, f"pip install {requirement} failed: {tail[:200]}"
        stamp.write_text(requirement)
    driver = str(PEERS_DIR / "drive.py")
    check = subprocess.run([str(python), driver, "config", peer], capture_output=True, text=True, timeout=60)
    if check.returncode:
        return None, f"driver check failed: {(check.stderr.strip().splitlines() or ['?'])[-1][:200]}"
    dist = requirement.split()[0].split("[", 1)[0].split("=", 1)[0]
    version = subprocess.run([str(python), "-c", f"from importlib.metadata import version; print(version({dist!r}))"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    config = json.loads(check.stdout)["config"]
    names = {"bullmq": "BullMQ (Python port)", "arq": "arq", "rq": "RQ", "saq": "SAQ", "celery": "Celery",
             "dramatiq": "Dramatiq"}
    if variant:
        return System(names[peer] + ", concurrency 10", "peer", None, [str(python), driver, peer],
                      config.replace("concurrency 1 (its default)", "concurrency 10 (EchoMQ's worker default)"),
                      f"{dist} {version}", env=variant), ""
    return System(names[peer], "peer", None, [str(python), driver, peer], config, f"{dist} {version}"), ""


def peers(wanted: list[str]) -> tuple[list[System], dict[str, str]]:
    ready, skipped = [], {}
    for peer in wanted:
        if peer not in ALL_PEERS:
            skipped[peer] = "unknown peer"
            continue
        try:
            system, why = install_peer(peer)
        except Exception as exc:  # an install that breaks oddly is a skip, not a failed run
            system, why = None, f"{type(exc).__name__}: {exc}"
        if system is None:
            say(f"skipping peer {peer}: {why}")
            skipped[peer] = why
        else:
            ready.append(system)
    return ready, skipped


def child_env(url: str, queue: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(BENCH_URL=url, BENCH_QUEUE=queue, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    return env
