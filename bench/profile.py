"""Where a native verb's server time goes: ``python -m bench.profile claim [--jobs 20000]``.

Runs one verb's phase (as bench/cost.py does, the state it needs prepared first) on an
embedded server with trafikey while ``perf record --call-graph dwarf`` samples the
server, then prints the inclusive share of the functions that matter: the verb's
handler, the host glue (key opens, hash and zset calls, replication, ACL fence) and
the allocator. Needs ``perf`` (Debian: linux-perf) and perf_event_paranoid ≤ 2. It is a
tool for reading, not a benchmark: the shares are what to cut first.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time

from .common import BenchServer, trafikey_module
from .cost import open_executor

WATCH = (
    r"trafikey::table::\w+$", r"trafikey::host::Host::\w+$", r"trafikey::host::Fence::check",
    r"trafikey::ffi::Key::\w+$", r"trafikey::ffi::Caller::of", r"valkey_module::raw::replicate",
    r"^VM_\w+$", r"lookupCommandBySdsLogic", r"moduleCreateArgvFromUserFormat", r"lookupKey$",
    r"^(malloc|_int_malloc|_int_free|malloc_consolidate|realloc)$",
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("verb", choices=["enqueue", "claim", "complete", "extend", "extends", "fail", "schedule",
                                    "promote"])
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args(argv)
    if not shutil.which("perf"):
        print("perf is not installed (apt-get install linux-perf)", file=sys.stderr)
        return 2
    module, why = trafikey_module()
    if module is None:
        print(f"no trafikey: {why}", file=sys.stderr)
        return 2
    data = tempfile.mktemp(prefix="emq-perf-", suffix=".data")
    with BenchServer(module) as server:
        executor = open_executor(server, "native")
        phases = executor.phases(args.jobs)
        before = {"claim": ["enqueue"], "complete": ["enqueue", "claim"], "extend": ["enqueue", "claim"],
                  "extends": ["enqueue", "claim"], "fail": ["enqueue", "claim"], "promote": ["schedule"]}
        runs = dict(phases)
        for verb in before.get(args.verb, []):
            runs[verb]()
        perf = subprocess.Popen(["perf", "record", "-F", "2999", "--call-graph", "dwarf,16384", "-o", data,
                                 "-p", str(server.server._process.pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        runs[args.verb]()
        perf.send_signal(2)
        perf.wait()
        executor.close()
    report = subprocess.run(["perf", "report", "-i", data, "--children", "--sort", "symbol", "--stdio", "-g", "none"],
                            capture_output=True, text=True).stdout
    rows = []
    for line in report.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+([\d.]+)%\s+\[\.\]\s+(\S+)", line)
        if m and any(re.search(w, m.group(3)) for w in WATCH):
            rows.append((float(m.group(1)), float(m.group(2)), m.group(3)))
    print(f"EMQ.{args.verb.upper()}: inclusive % / self % of the server's samples ({args.jobs} calls)")
    for total, own, name in rows[: args.top]:
        print(f"{total:6.1f} {own:6.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
