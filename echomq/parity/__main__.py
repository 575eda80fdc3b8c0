"""``python -m echomq.parity``: run the catalogue (and random sequences) on two fresh nodes.

    python -m echomq.parity                      the catalogue, the full table, a one-line total
    python -m echomq.parity --brief              only the steps that are not equal
    python -m echomq.parity --random 20          plus 20 random sequences (fixed --seed)
    python -m echomq.parity --long               plus random sequences until >= 10,000 steps ran
    python -m echomq.parity --plants             the planted defects, each with the first case that caught it
    python -m echomq.parity --self               script node against script node (no module needed)

Exit status 0 when nothing is UNEXPECTED, no case missed its edge and every plant was caught.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import time
from typing import Sequence, TextIO

from ..errors import WireError
from ..local.module import module_path
from .cases import CATALOGUE
from .observation import CaseResult
from .plants import NATIVE_PLANTS, SCRIPT_PLANTS, NativePlant, ScriptPlant
from .report import by_kind, plants_table, table, total
from .runner import Pair, Tally
from .steps import Case, Do

LONG_STEPS = 10_000
#: the command its usage lines name, unless a caller (emq parity) names another
PROG = "python -m echomq.parity"


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    p.add_argument("--module", help="the trafikey .so for the native node (default: emq module-path)")
    p.add_argument("--self", dest="self_test", action="store_true",
                   help="put a second script node in the native seat (tests the instrument, needs no module)")
    p.add_argument("--case", action="append", default=[], metavar="GLOB", help="only cases matching GLOB (repeatable)")
    p.add_argument("--no-catalogue", action="store_true", help="skip the catalogue")
    p.add_argument("--brief", action="store_true", help="print only the steps that are not equal")
    p.add_argument("--random", type=int, default=0, metavar="N", help="run N random sequences")
    p.add_argument("--steps", type=int, default=40, metavar="M", help="rule draws per random sequence (default 40)")
    p.add_argument("--seed", type=int, default=20260, help="hypothesis seed for the random sequences")
    p.add_argument("--long", action="store_true", help=f"random sequences until at least {LONG_STEPS} steps ran")
    p.add_argument("--plants", action="store_true", help="run the planted defects and print which case caught each")
    p.add_argument("--planted-module", help="a trafikey build with --features planted (default: trafikey/target/planted)")
    return p


def run_catalogue(pair: Pair, patterns: Sequence[str] = ()) -> list[CaseResult]:
    cases = [c for c in CATALOGUE if not patterns or any(fnmatch.fnmatch(c.name, p) for p in patterns)]
    return [pair.run_case(c) for c in cases]


def likeliest_first(plant: ScriptPlant | NativePlant) -> list[Case]:
    """The catalogue in the order a plant is likeliest to show in: the cases that call its verb,
    then the rest of its family's, then every other case (stable: each group keeps its order)."""
    def distance(case: Case) -> tuple[bool, bool]:
        calls = any(isinstance(step, Do) and step.verb == plant.verb for step in case.steps)
        return (not calls, case.family != plant.family)
    return sorted(CATALOGUE, key=distance)


def first_catch(pair: Pair, plant: ScriptPlant | NativePlant | None = None) -> str:
    """Run the catalogue until a step is UNEXPECTED; name that case and step. With ``plant``
    the likeliest cases run first; every case still runs before a plant is called unnoticed."""
    for case in likeliest_first(plant) if plant else CATALOGUE:
        result = pair.run_case(case, stop_at_unexpected=True)
        if result.unexpected:
            return f"{case.name} #{result.unexpected[0].index}"
    return "NOT CAUGHT"


def run_plants(module: str | None, planted_module: str | None, out: TextIO) -> bool:
    rows = []
    with Pair(module=module) as pair:
        for plant in SCRIPT_PLANTS:
            pair.set_script_plants([plant])
            rows.append((plant.name, plant.family, plant.what, first_catch(pair, plant)))
    if NATIVE_PLANTS and module is not None:
        from .plants import planted_module_path

        path = planted_module or planted_module_path()
        if path is None:
            rows.append(("native plants", "-", "no planted build: cargo build --release --features planted "
                                              "--target-dir trafikey/target/planted", "NOT RUN"))
        else:
            # the control: the planted build with no plant switched on must be clean
            with Pair(module=path) as pair:
                control = first_catch(pair)
            rows.append(("(planted build, no plant on)", "control", "must stay clean",
                         "clean" if control == "NOT CAUGHT" else f"FALSE ALARM at {control}"))
            for plant in NATIVE_PLANTS:
                with Pair(module=path, plant=plant.name) as pair:
                    rows.append((plant.name, plant.family, plant.what, first_catch(pair, plant)))
    plants_table(rows, out)
    plants = [r for r in rows if r[1] != "control"]
    caught = sum(1 for r in plants if r[3] not in ("NOT CAUGHT", "NOT RUN"))
    clean = all(r[3] == "clean" for r in rows if r[1] == "control")
    out.write(f"plants: {caught} of {len(plants)} caught" + ("" if clean else "; the control run was NOT clean") + "\n")
    return caught == len(plants) and clean


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, prog: str = PROG) -> int:
    out = out or sys.stdout
    args = parser(prog).parse_args(argv)
    if args.self_test:
        module = None
    else:
        try:
            module = args.module or module_path()
        except WireError as exc:
            out.write(f"parity needs the trafikey module for its native node: {exc}\n")
            return 2
    ok = True
    started = time.monotonic()
    with Pair(module=module) as pair:
        if not args.no_catalogue:
            results = run_catalogue(pair, args.case)
            table(results, out, brief=args.brief)
            catalogue_tally = pair.tally
            out.write(total(results, catalogue_tally) + "\n")
            ok = catalogue_tally.unexpected == 0 and (module is None or not any(r.missed for r in results))
        if args.random or args.long:
            from .sequences import run_random, run_until

            pair.tally = Tally()
            failure = None
            try:
                if args.random:
                    run_random(pair, examples=args.random, steps=args.steps, seed=args.seed)
                if args.long:
                    run_until(pair, min_steps=LONG_STEPS, steps=args.steps, seed=args.seed)
            except AssertionError as exc:
                failure = exc
            out.write(f"random: seed {args.seed}, {by_kind(pair.tally)}\n")
            if failure is not None:
                out.write(f"random: minimal failing sequence ends with\n{failure}\n")
                ok = False
    if args.plants:
        ok = run_plants(module, args.planted_module, out) and ok
    out.write(f"parity: {'OK' if ok else 'FAILED'} in {time.monotonic() - started:.1f}s\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
