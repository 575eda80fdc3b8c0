"""Server µs per verb call: the scripts (wire 4) beside two trafikey builds (wire 6), in one run.

    .venv/bin/python trafikey/tools/side_by_side.py BEFORE.so AFTER.so [--jobs 3000] [--rounds 9]

Three embedded servers side by side, rounds interleaved (the same noise for all three); each
round is bench/server_cost.py's measure(): its verb phases and INFO commandstats (EVALSHA on wire 4,
the EMQ.* command on wire 6; looked up case-insensitively). Prints the median and the min of
the rounds, µs per call, and each build's ratio to the scripts. To compare with a build of an
older commit: `git worktree add /tmp/old <commit>` and
`cargo build --release --manifest-path /tmp/old/trafikey/Cargo.toml`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.server_cost import measure  # noqa: E402
from echomq import EmbeddedServer  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"4": [], "b": [], "a": []}
    with EmbeddedServer(brand=4) as s4, EmbeddedServer(module=args.before, brand=6) as sb, \
            EmbeddedServer(module=args.after, brand=6) as sa:
        for _ in range(args.rounds):
            for key, server, wire in (("4", s4, 4), ("b", sb, 6), ("a", sa, 6)):
                runs[key].append(measure(server, wire, args.jobs))
    print(f"{args.rounds} rounds x {args.jobs} calls; server µs per call (commandstats)")
    for label, agg in (("median", statistics.median), ("min", min)):
        print(f"-- {label} of rounds")
        print(f"{'verb':<10} {'scripts':>8} {'before':>8} {'after':>8} {'before/4':>9} {'after/4':>8}")
        for verb in runs["4"][0]:
            m = {k: agg(r[verb] for r in runs[k]) for k in runs}
            print(f"{verb:<10} {m['4']:>8.2f} {m['b']:>8.2f} {m['a']:>8.2f} "
                  f"{m['b'] / m['4']:>9.2f} {m['a'] / m['4']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
