"""Where a job's server µs go on one wire, by command (a script by its name), phase by phase:
``python -m bench.script_costs URL WIRE [JOBS]`` prints JSON. bench/wire_ratio.py runs it in the
tree it measures (its echomq package first on the path), so a before and an after read alike.

The phases are the server's work for one job of the peer harness, as ``emq worker`` asks for it with
its defaults: the producer's ``enqueue_many``, then claims in batches of 10 (CLAIMS; on wire 4 each
after its pause read), then completions keeping the no-op's result as the worker keeps it (a
PUBLISHES of 10, the default retention). Each phase reads INFO commandstats before and after:
every top-level command's calls and µs per job (commandstats counts a script's inner commands
inside its EVALSHA, and again by their own names: they are listed apart, as ``inner``), and the
main thread's CPU per job. The worker's other calls (its heartbeat, its lane probe) are not here.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any

from echomq import Queue, connect
from echomq._protocol.results import DEFAULT_RESULT_TTL_S, encode_result
from echomq._protocol.serializers import JSON
from echomq._protocol.verbs import SCRIPTED

BATCH = 10
LEASE_MS = 30_000


def stats(client) -> dict[str, tuple[int, int]]:
    return {name[len("cmdstat_"):].lower(): (int(v["calls"]), int(v["usec"]))
            for name, v in client.info("commandstats").items()}


def cpu(client) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def phase(client, run, n: int, names: dict[str, str]) -> dict[str, Any]:
    """``run()``'s commands per job, by name (its EVALSHAs by the script it ran: ``run`` answers its
    sha), and the main thread's CPU per job."""
    before, cpu0 = stats(client), cpu(client)
    script = run()
    after, cpu1 = stats(client), cpu(client)
    delta = {name: (c - before.get(name, (0, 0))[0], u - before.get(name, (0, 0))[1])
             for name, (c, u) in after.items() if name not in ("info",)}
    commands = {}
    for name, (calls, usec) in delta.items():
        if calls:
            label = f"script {names.get(script, script)}" if name == "evalsha" and script else name
            commands[label] = {"calls_per_job": calls / n, "us_per_job": usec / n}
    return {"cpu_us_per_job": (cpu1 - cpu0) * 1e6 / n, "commands": commands}


def main(argv: list[str]) -> int:
    url, wire = argv[0], int(argv[1])
    n = int(argv[2]) if len(argv) > 2 else 20_000
    q = Queue(connect(url, wire=wire), "costs" + os.urandom(4).hex())
    client = q.connection.client
    names = {hashlib.sha1(verb.source()).hexdigest(): verb.name for verb in SCRIPTED}
    # a phase's script, as the client sends it: the one script the phase's EVALSHAs ran
    kinds = {"enqueue": ("enqueues", "enqueue"), "claim": ("claims",), "settle": ("publishes", "publish")}

    def script_of(phase_name: str) -> str | None:
        if wire != 4:
            return None
        shas = {name: sha for sha, name in names.items()}
        return next((shas[k] for k in kinds[phase_name] if k in shas and q.codec.supports(k)), None)

    payloads = [{"t": None}] * n
    held: list = []
    nothing = encode_result(JSON, None, None)
    keep_ms = int(DEFAULT_RESULT_TTL_S * 1000)

    def enqueue() -> str | None:
        for start in range(0, n, 1000):  # the producer's pipelines (bench/drive_echomq.py)
            q.enqueue_many(payloads[start:start + 1000])
        return script_of("enqueue")

    def claim() -> str | None:
        while len(held) < n:
            held.extend(q.claim_many(BATCH, LEASE_MS))
        return script_of("claim")

    def settle() -> str | None:
        for start in range(0, n, BATCH):
            jobs = held[start:start + BATCH]
            q.settle_many(q.completion_calls([p for job in jobs for p in (job.id, job.token, nothing)], keep_ms))
        return script_of("settle")

    out = {name: phase(client, run, n, names) for name, run in (("enqueue", enqueue), ("claim", claim),
                                                               ("settle", settle))}
    assert q.counts().total == 0, "a phase left jobs behind"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
