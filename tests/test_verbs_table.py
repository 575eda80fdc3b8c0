"""The verb table against SPEC §3/§6, the scripts on disk, and the states each language defines.

No server: these read ``echomq._protocol.verbs``, ``echomq/scripts/*.lua`` and (when it exists)
``trafikey/src``. A drift between them fails here before any server is started.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from echomq._protocol import verbs
from echomq._core.flows import FLOW_STATE_SETS
from echomq._protocol.keys import STATE_SETS, Keyspace, State
from echomq._protocol.verbs import (ARGUMENT_TOKENS, BASE, BUS, BY_NAME, FLOWS, JOB_CORE_TOKENS, LANES, OPTIONAL,
                                    OPTIONAL_TOKENS, READS, SCRIPTED, VERBS)
from echomq.scripts import FLOW_LIBRARY, SCRIPTS_DIR, library_definitions

#: scripts/lib/<name>.lua: the rules several scripts share, each said once (docs/spec.md §4)
LIBRARIES = ("clock", "events", "held", "pending", "due", "delete", "unique", "done", "lanes", "flow", "claim",
             "append", "reap", "complete", "failure")
REGISTERED = VERBS + OPTIONAL  # trafikey's rows: the job core, then the optional verbs in order (SPEC §9.4)

ROOT = Path(__file__).resolve().parent.parent
RUST_SRC = ROOT / "trafikey" / "src"

# SPEC §6, pinned: the job-core tokens in registration order.
SPEC_TOKENS = "enqueue claim claim.pause extend extends complete.flat schedule promote reschedule delay fail.flat reprocess requeue stalled.check"

# SPEC §3, pinned: command, KEYS (base = the queue's base), ARGV (EXTENDS: its first pair).
SPEC_VERBS = [
    ("EMQ.ENQUEUE", ["pending", "base"], ["id", "payload", "priority"]),
    ("EMQ.CLAIM", ["pending", "active", "base"], ["lease_ms"]),
    ("EMQ.EXTEND", ["active", "base"], ["id", "token", "lease_ms"]),
    ("EMQ.EXTENDS", ["active", "base"], ["lease_ms", "id", "token"]),
    ("EMQ.COMPLETE", ["active", "base"], ["id", "token"]),
    ("EMQ.SCHEDULE", ["schedule", "base"], ["id", "payload", "delay_ms", "priority"]),
    ("EMQ.PROMOTE", ["schedule", "pending", "base"], ["limit"]),
    ("EMQ.RESCHEDULE", ["schedule", "base"], ["id", "delay_ms"]),
    ("EMQ.DELAY", ["active", "schedule", "base"], ["id", "token", "delay_ms"]),
    ("EMQ.FAIL", ["active", "pending", "schedule", "dead", "base"], ["id", "token", "error", "max_attempts", "backoff_ms"]),
    ("EMQ.REPROCESS", ["dead", "pending", "base"], ["id"]),
    ("EMQ.REQUEUE", ["active", "pending", "base"], ["id", "token"]),
    ("EMQ.STALLED.CHECK", ["active", "pending", "dead", "base"], ["max_stalled", "limit"]),
]
# SPEC §9.1: every job-core verb has its script since requeue.lua and reschedule.lua; BCLAIM
# blocks, which a script cannot (§9.3: wire 4 waits on the wake marker instead)
UNSCRIPTED = {"bclaim"}

# SPEC §6, §9.3/§9.4, pinned: the optional native verbs, registered after the job core, in order:
# the bus (docs/spec.md §12) first.
SPEC_OPTIONAL = [
    ("EMQ.APPEND", ["active", "base"], ["id", "token", "progress"], ("append",)),
    ("EMQ.FAILURES.INCR", ["active", "pending", "schedule", "dead", "base"],
     ["id", "token", "error", "max_attempts", "backoff_ms"], ("failures.incr",)),
    ("EMQ.PUBLISH", ["active", "base"], ["id", "token", "result", "retention_ms"], ("publish",)),
    ("EMQ.BCLAIM", ["pending", "active", "base"], ["lease_ms", "timeout_ms"], ("claim.block",)),
    ("EMQ.REMOVE", ["pending", "schedule", "dead", "base"], ["id"], ("remove",)),
    ("EMQ.CANCEL", ["active", "dead", "base"], ["id"], ("cancel",)),
    ("EMQ.PURGE", ["dead", "base"], ["age_ms", "limit"], ("purge",)),
    ("EMQ.DRAIN", ["pending", "base"], ["limit"], ("drain",)),
    ("EMQ.ENQUEUE.UNIQUE", ["pending", "schedule", "base"], ["id", "payload", "priority", "unique_ms", "replace"],
     ("enqueue.unique",)),
    ("EMQ.CLAIMS", ["pending", "active", "base"], ["lease_ms", "count"], ("claims",)),
    ("EMQ.COMPLETES", ["active", "base"], ["id", "token"], ("completes",)),
    ("EMQ.PUBLISHES", ["active", "base"], ["retention_ms", "id", "token", "result"], ("publishes",)),
    ("EMQ.ENQUEUES", ["pending", "base"], ["id", "payload", "priority"], ("enqueues",)),
]


def _named(keys):
    return ["base" if k == BASE else k for k in keys]


def test_tokens_are_the_spec_list_in_registration_order():
    assert " ".join(JOB_CORE_TOKENS) == SPEC_TOKENS
    assert len(JOB_CORE_TOKENS) == 14 and len(set(JOB_CORE_TOKENS)) == 14


def test_optional_verbs_are_spec_section_9_and_not_required():
    assert [(v.command, _named(v.keys), list(v.argv), v.tokens) for v in OPTIONAL] == SPEC_OPTIONAL
    assert OPTIONAL_TOKENS == ("append", "failures.incr", "publish", "claim.block", "remove", "cancel", "purge", "drain",
                               "enqueue.unique", "fail.traceback", "claim.rate", "claims", "completes",
                               "publishes", "enqueues")
    assert ARGUMENT_TOKENS == ("fail.traceback", "claim.rate")
    late = {token for verb in REGISTERED for _, token in verb.late if token not in verb.tokens}
    assert set(ARGUMENT_TOKENS) == late and len(set(ARGUMENT_TOKENS)) == len(ARGUMENT_TOKENS)
    assert not set(OPTIONAL_TOKENS) & set(JOB_CORE_TOKENS), "a wire-6 connection requires only the fourteen"
    for verb in OPTIONAL:
        assert verb.scripted == (verb.name not in UNSCRIPTED) and not verb.read_only and verb.keys[-1] == BASE
        assert verb.command == "EMQ." + verb.name.upper().replace("_", "."), verb
        assert BY_NAME[verb.name] is verb


def test_verb_rows_are_spec_section_3():
    assert [(v.command, _named(v.keys), list(v.argv)) for v in VERBS] == SPEC_VERBS


def test_late_arguments_are_the_traceback_rated_and_the_unique_delay():
    """docs/spec.md §11.6: FAIL's optional sixth ARGV, behind its own token; FAILURES.INCR takes the
    same one (§12), born with the verb, so behind the verb's own token; so is ENQUEUE.UNIQUE's
    delay_ms, which makes it a schedule. CLAIM's, BCLAIM's and CLAIMS' `rated`, behind one token,
    `claim.rate`."""
    assert {v.name: v.late for v in REGISTERED if v.late} == {
        "fail": (("traceback", "fail.traceback"),), "failures_incr": (("traceback", "failures.incr"),),
        "claim": (("rated", "claim.rate"),), "bclaim": (("rated", "claim.rate"),),
        "claims": (("rated", "claim.rate"),), "enqueue_unique": (("delay_ms", "enqueue.unique"),)}


def test_verb_names_match_their_commands():
    for verb in REGISTERED:
        assert verb.command == "EMQ." + verb.name.upper().replace("_", "."), verb
        assert not verb.read_only
        assert verb.keys[-1] == BASE, f"{verb.name}: the base comes last, the row is derived from it"
        assert len(set(verb.keys)) == len(verb.keys)
        assert verb.scripted == (verb.name not in UNSCRIPTED)


def test_declared_reads():
    assert [(r.name, _named(r.keys), list(r.argv)) for r in READS] == [
        ("counts", ["pending", "active", "schedule", "dead", "meta", "base"], []),
        ("state", ["base"], ["id"]),
    ]
    assert all(r.read_only and r.command is None and r.tokens == () and r.scripted for r in READS)
    assert set(BY_NAME) == {v.name for v in REGISTERED + FLOWS + LANES + READS}


def test_flow_scripts_run_on_both_wires_and_no_emq_command():
    """SPEC §9.6: flows are scripts on both wires; docs/lanes-and-flows.md "Flows" lists them."""
    assert [(v.name, _named(v.keys), list(v.argv)) for v in FLOWS] == [
        ("flow_enqueue", [], ["queue", "id", "payload", "priority", "parent", "children", "on_child_failure"]),
        ("flow_claim", ["flow:pending", "flow:active", "flow:schedule", "base"], ["lease_ms", "limit"]),
        ("flow_extends", ["flow:active", "base"], ["lease_ms", "id", "token"]),
        ("flow_complete", ["flow:active", "base"], ["id", "token", "result", "retention_ms"]),
        ("flow_fail", ["flow:active", "flow:pending", "flow:schedule", "base"],
         ["id", "token", "error", "max_attempts", "backoff_ms", "traceback"]),
        ("flow_release", ["flow:active", "flow:pending", "base"], ["id", "token"]),
        ("flow_reap", ["flow:active", "flow:pending", "base"], ["max_stalled", "limit"]),
        ("flow_append", ["flow:active", "base"], ["id", "token", "progress"]),
        ("flow_delay", ["flow:active", "flow:schedule", "base"], ["id", "token", "delay_ms"]),
        ("flow_cancel", ["base"], ["id"]),
        ("flow_adopt", ["base"], ["id", "child"]),
    ]
    for verb in FLOWS:
        assert verb.flow and verb.scripted and verb.command is None and verb.tokens == () and not verb.read_only
        assert "flow" in verb.libraries and "lanes" not in verb.libraries


def test_lane_scripts_run_on_both_wires_and_no_emq_command():
    """SPEC §9.6 (docs/spec.md §15): lanes are scripts on both wires, after the lanes' library."""
    for verb in LANES:
        assert verb.script_only and not verb.flow and verb.command is None and verb.tokens == () and not verb.read_only
        assert "lanes" in verb.libraries


def test_every_verb_but_bclaim_is_scripted_plus_two_reads():
    scripted_verbs = [v.name for v in SCRIPTED if not v.read_only and not v.script_only]
    # the job core, the bus, the four control verbs, enqueue_unique, claims, completes, publishes, enqueues
    assert len(scripted_verbs) == 13 + len(BUS) + 9
    assert set(scripted_verbs) == {v.name for v in REGISTERED} - UNSCRIPTED
    assert [v.name for v in SCRIPTED if v.read_only] == ["counts", "state"]


def test_each_library_is_its_definitions_and_each_serves_a_script():
    """A library is top-level definitions only (the loader keeps those a script uses), each
    starting at the first column; every one is loaded by some script."""
    used = b"".join(verb.source() for verb in SCRIPTED).decode()
    for name in LIBRARIES:
        text = (SCRIPTS_DIR / "lib" / f"{name}.lua").read_text()
        definitions = library_definitions(name)
        assert "".join(text for _, text in definitions) == text
        starts = [line for line in text.splitlines() if line[:1].strip() and not line.startswith(("--", "end"))]
        assert len(starts) == len(definitions), (name, starts)
        for names, definition in definitions:
            assert definition in used, f"lib/{name}.lua: no script uses {sorted(names)}"


def test_scripts_dir_holds_exactly_one_lua_per_scripted_verb():
    on_disk = sorted(p.name for p in SCRIPTS_DIR.glob("*.lua"))  # beside the loader, scripts/__init__.py
    # the libraries scripts are loaded after: each a rule several scripts share, said once
    assert sorted(p.name for p in (SCRIPTS_DIR / "lib").iterdir()) == sorted(f"{name}.lua" for name in LIBRARIES)
    assert {name for v in SCRIPTED for name in v.libraries} == set(LIBRARIES)
    assert {v.name for v in SCRIPTED if "claim" in v.libraries} == {"claim", "claims", "lane_claim", "flow_claim"}
    assert {v.name for v in SCRIPTED if "append" in v.libraries} == {"append", "lane_append", "flow_append"}
    # the verb's label as VERB when it is used, then of the libraries in their order, the definitions
    # the script uses, then its own file
    for verb in SCRIPTED:
        definitions = [text for name in verb.libraries for _, text in library_definitions(name)]
        source = verb.source().decode()
        assert source.endswith(verb.script_path.read_text())
        kept = source[: len(source) - len(verb.script_path.read_text())]
        preamble = f"local VERB = '{verb.label}'\n"
        if re.search(r"\bVERB\b", kept.removeprefix(preamble) + verb.script_path.read_text()):
            assert kept.startswith(preamble), verb.name
            kept = kept.removeprefix(preamble)
        else:
            assert "VERB" not in kept, verb.name
        assert kept == "".join(text for text in definitions if text in kept), verb.name
        for function in re.findall(r"^local function (\w+)", kept, re.M):  # each closure made is called
            assert len(re.findall(rf"\b{function}\b", re.sub(r"--[^\n]*", "", source))) > 1, (verb.name, function)
    assert on_disk == sorted(f"{v.name}.lua" for v in SCRIPTED)
    for verb in SCRIPTED:
        assert verb.script_path.is_file() and verb.script_path.parent == SCRIPTS_DIR
    assert SCRIPTS_DIR == ROOT / "echomq" / "scripts"


# --------------------------------------------------------------------------- the scripts' own text


def _source(verb) -> str:
    return verb.script_path.read_text()


def _header(source: str) -> str:
    lines = []
    for line in source.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line.lstrip("- "))
    return " ".join(lines)


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if "..." in text:  # EXTENDS: "lease_ms, id1, token1, ... idk, tokenk": the lead, then its pairs
        names = [re.sub(r"(\d+|k)$", "", n.replace("...", "").strip()) for n in names]
        names = list(dict.fromkeys(names))
    return names


# FLOW_ENQUEUE's KEYS are the flow's queues' bases and its ARGV seven per job: its header says so
FIXED = [verb for verb in SCRIPTED if verb.name != "flow_enqueue"]


def test_flow_enqueue_header_and_keys():
    verb = BY_NAME["flow_enqueue"]
    header = _header(_source(verb))
    assert "KEYS: the base of every queue the flow uses, one slot." in header
    assert f"ARGV: seven per job, each parent before its children: {verb.argv[0]} (" in header
    for name in verb.argv:
        assert name in header
    code = _source(verb)
    assert "KEYS[tonumber(ARGV[" in code and not re.findall(r"KEYS\[\d", code)  # a base by its index only


@pytest.mark.parametrize("verb", FIXED, ids=lambda v: v.name)
def test_script_header_names_the_tables_keys_and_argv(verb):
    header = _header(_source(verb))
    keys = re.search(r"KEYS: ([^.]+)\.", header)
    assert keys, f"{verb.name}.lua: no KEYS line in its header"
    assert _names(keys.group(1)) == _named(verb.keys)
    argv = re.search(r"ARGV: (.+?)(?<!\.)\.(?!\.)(?:\s|$)", header)
    if verb.argv:
        assert argv, f"{verb.name}.lua: no ARGV line in its header"
        assert _names(argv.group(1)) == list(verb.argv) + [f"{name} (optional)" for name, _ in verb.late]
    else:
        assert argv is None


@pytest.mark.parametrize("verb", FIXED, ids=lambda v: v.name)
def test_script_uses_exactly_its_declared_keys(verb):
    # the script as it is loaded: FAIL's and FAILURES.INCR's keys are read by the body they share
    code = "\n".join(l for l in verb.source().decode().splitlines() if not l.lstrip().startswith("--"))
    used = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", code)}
    assert used == set(range(1, len(verb.keys) + 1)), f"{verb.name}.lua uses KEYS {sorted(used)}"
    argv_used = {int(n) for n in re.findall(r"ARGV\[(\d+)\]", code)}
    if verb.name in ("extends", "flow_extends", "lane_extends"):  # lib/held.lua's renew walks the pairs
        assert set(range(1, len(verb.argv) - 1)) <= argv_used and "renew(" in code
        assert re.search(r"ARGV\[i\]", verb.source().decode()) and re.search(r"ARGV\[i \+ 1\]", verb.source().decode())
    elif verb.name == "flow_adopt":  # the parent's id, then its children's row keys
        assert argv_used == {1} and "for i = 2, #ARGV do" in code
    elif verb.per_pair:  # COMPLETES walks its pairs, PUBLISHES its triples after its lead
        lead, width = verb.repeated
        assert argv_used == set(range(1, lead + 1)) and f"for i = {lead + 1}, #ARGV, {width} do" in code
        assert all(f"ARGV[i + {n}]" in code for n in range(1, width)) and "ARGV[i]" in code
    else:
        want = set(range(1, len(verb.argv) + len(verb.late) + 1))
        assert argv_used == want, f"{verb.name}.lua uses ARGV {sorted(argv_used)}"
    # the only key the script builds itself is derived from the base, never a literal queue key (the
    # flow library reads a row key's base out of it: lib/flow.lua's flow_split)
    own = "\n".join(l for l in _source(verb).splitlines() if not l.lstrip().startswith("--"))
    assert "emq:" not in own
    assert not re.search(r"redis\.call\('(?:EVAL|FLUSH|KEYS|SCAN)", code)


# --------------------------------------------------------------------------- states, in every language

#: a state written: in an HSET, or in a row's fields gathered for one (``{'state', 'pending', …}``)
STATE_WRITE = re.compile(r"(?:'HSET',[^)\n]*?|\{)'state',\s*'([^']*)'")
#: FAIL's move, written once for FAIL and FAILURES.INCR (lib/failure.lua): the states it moves a job to
_FAIL_JOB = re.search(r"\nlocal function fail_job\(.*?\nend\n", (SCRIPTS_DIR / "lib" / "failure.lua").read_text(), re.S)
assert _FAIL_JOB, "lib/failure.lua defines fail_job"
FAIL_JOB = _FAIL_JOB.group(0)
FAIL_STATES = set(re.findall(r"\bstate(?:, \w+)? = '(\w+)'", FAIL_JOB))


def _lua_states() -> dict[str, set[str]]:
    """The states each script writes, its own text's and, for FAIL and FAILURES.INCR, fail_job's."""
    return {v.name: set(STATE_WRITE.findall(_source(v))) | (FAIL_STATES if "fail_job(" in _source(v) else set())
            for v in SCRIPTED}


def test_lua_writes_exactly_the_four_python_states():
    written = set().union(*(states for name, states in _lua_states().items() if not BY_NAME[name].flow))
    assert written == {s.value for s in State}


@pytest.mark.parametrize("verb", [v for v in SCRIPTED if not v.flow], ids=lambda v: v.name)
def test_each_script_writes_only_states_whose_set_it_declares(verb):
    """A script that writes ``state X`` must hold X's set among its KEYS (the state is always its set).
    A lane row's ``pending`` is its lane (derived from the base), its ``active`` is ``lanes:active``."""
    sets = dict(STATE_SETS, **({State.PENDING: BASE, State.ACTIVE: "lanes:active"} if verb.script_only else {}))
    for state in _lua_states()[verb.name]:
        assert sets[State(state)] in verb.keys, f"{verb.name}.lua writes {state!r} without its set"


@pytest.mark.parametrize("verb", [v for v in FLOWS if v.name != "flow_enqueue"], ids=lambda v: v.name)
def test_each_flow_script_writes_only_states_whose_flow_set_it_declares(verb):
    """The same for a flow job, whose states are its flow sets' (flow_enqueue: waiting and pending)."""
    for state in _lua_states()[verb.name]:
        assert FLOW_STATE_SETS[state] in verb.keys, f"{verb.name}.lua writes {state!r} without its set"
    library = set(STATE_WRITE.findall(FLOW_LIBRARY.read_text()))
    assert _lua_states()["flow_enqueue"] == {"waiting", "pending"} and library == {"pending", "dead"}
    assert set(FLOW_STATE_SETS) == {s.value for s in State} | {"waiting"}


def test_fail_replies_are_state_names():
    """FAIL and FAILURES.INCR run one body (lib/failure.lua's fail_job, as trafikey's fail.rs runs both),
    which answers the state it moved the job to."""
    assert FAIL_STATES == {"pending", "scheduled", "dead"} and "\n  return state\nend\n" in FAIL_JOB
    for name, always in (("fail", "false"), ("failures_incr", "true")):
        code = [line for line in _source(BY_NAME[name]).splitlines() if not line.startswith("--")]
        assert code == [f"return fail_job({always})"], name


def _rust_sources() -> dict[Path, str]:
    if not RUST_SRC.is_dir():
        return {}
    return {p: p.read_text() for p in sorted(RUST_SRC.rglob("*.rs"))}


RUST_STATES = RUST_SRC / "state.rs"
RUST_STATE_ARM = re.compile(r'State::(\w+)\s*=>\s*b?"([^"]*)"')
RUST_RAW_STATE_WRITE = re.compile(r'b"state"(?:\.to_vec\(\))?\s*,\s*b"(pending|active|scheduled|dead)"')


def test_rust_states_match_python():
    """trafikey/src/state.rs defines the four states once: the same field values and sets as Python."""
    text = RUST_STATES.read_text()
    field_fn, set_fn = text.split("pub const fn set")
    fields = dict(RUST_STATE_ARM.findall(field_fn))
    sets = dict(RUST_STATE_ARM.findall(set_fn))
    assert set(fields.values()) == {s.value for s in State}
    assert {fields[variant]: sets[variant] for variant in fields} == {s.value: STATE_SETS[s] for s in State}


def test_rust_writes_states_only_through_its_state_module():
    """No verb writes a state as a raw literal: drift would slip past the comparison above."""
    raw = {p.name: RUST_RAW_STATE_WRITE.findall(text) for p, text in _rust_sources().items() if p != RUST_STATES}
    assert {name: found for name, found in raw.items() if found} == {}


RUST_ROW = re.compile(r'row!\(\s*(?:"(?P<name>[^"]+)"\s*,\s*)?(?P<handler>\w+)\s*,[^\[]*\[(?P<tokens>[^\]]*)\]')


def test_rust_registration_table_matches_the_verb_table():
    """trafikey's table.rs is its only list of commands: same rows, order, tokens; one file per verb
    naming its command and numkeys as the verb table does."""
    table = RUST_SRC / "table.rs"
    if not table.is_file():
        pytest.skip("trafikey/src/table.rs does not exist yet")
    text = table.read_text()
    rows = list(RUST_ROW.finditer(text))
    assert rows, "no row!(...) entries found in table.rs"
    assert [r["handler"] for r in rows] == [v.name for v in REGISTERED], "rows in SPEC §3 then §9 order, named as the verbs"
    for row, verb in zip(rows, REGISTERED):
        assert tuple(re.findall(r'"([^"]+)"', row["tokens"])) == verb.tokens, verb.name
        if row["name"]:
            assert row["name"] == verb.command
        source = RUST_SRC / "verbs" / f"{verb.name}.rs"
        assert source.is_file(), f"verbs/{verb.name}.rs"
        code = source.read_text()
        named = re.search(r'const VERB\s*:\s*&str\s*=\s*"([^"]+)"', code)
        if named:
            assert named.group(1) == verb.command, f"verbs/{verb.name}.rs registers {named.group(1)}"
        numkeys = re.search(r"const NUMKEYS\s*:\s*\w+\s*=\s*(\d+)", code)
        if numkeys:
            assert int(numkeys.group(1)) == len(verb.keys), f"verbs/{verb.name}.rs NUMKEYS"
    version = text.find('"EMQ.VERSION"')
    assert version > rows[-1].end(), "EMQ.VERSION is registered, after the job-core rows"
    on_disk = {p.stem for p in (RUST_SRC / "verbs").glob("*.rs")} - {"mod"}
    assert on_disk == {v.name for v in REGISTERED}
    late = re.search(r"pub static ARGUMENT_TOKENS: &\[&str\] = &\[(.*?)\];", text, re.S)
    assert late and tuple(re.findall(r'^\s*"([^"]+)"', late.group(1), re.M)) == ARGUMENT_TOKENS
    # a late argument's verb takes it: shape Late(n, k) with its ARGV count and late count (in the
    # file of the verb whose steps it runs: FAILURES.INCR runs FAIL's, fail::settle)
    for verb in REGISTERED:
        if verb.late:
            code = (RUST_SRC / "verbs" / f"{verb.name}.rs").read_text()
            runs = re.search(r"\b(\w+)::settle\(", code)
            if runs:
                code = (RUST_SRC / "verbs" / f"{runs.group(1)}.rs").read_text()
            assert f"Argc::Late({len(verb.argv)}, {len(verb.late)})" in code, verb.name


# --------------------------------------------------------------------------- SPEC §3 limits, defined once


def _rust_consts() -> dict[str, int]:
    """``pub const NAME: i64|usize = value;`` from trafikey's grammar.rs, evaluated."""
    source = (RUST_SRC / "grammar.rs").read_text()
    found = {}
    for name, expr in re.findall(r"pub const (\w+): (?:i64|usize) = ([^;]+);", source):
        found[name] = eval(expr.replace("_", ""), {})  # integer literals and shifts only
    return found


def test_every_limit_in_trafikeys_grammar_is_pythons():
    """Each ``pub const`` of grammar.rs (argument ranges, byte bounds, batch sizes) has its equal in
    echomq.verbs, by name: a limit added to one language and not the other fails here."""
    rust = _rust_consts()
    assert rust, "no constants read from grammar.rs"
    missing = sorted(name for name in rust if not hasattr(verbs, name))
    assert not missing, f"grammar.rs limits with no equal in echomq/verbs.py: {missing}"
    assert rust == {name: getattr(verbs, name) for name in rust}


def _rust_bound(expr: str, consts: dict[str, int]) -> int:
    """A bound as grammar.rs writes it: a literal, a constant (``as i64`` dropped), or ``i64::MAX``."""
    expr = expr.replace(" as i64", "").strip()
    return verbs.I64_MAX if expr == "i64::MAX" else consts[expr] if expr in consts else int(expr)


def _rust_argument_bounds() -> dict[str, tuple[int, int]]:
    """Every numeric ARGV trafikey parses, with the range it accepts: the grammar's readers
    (``number("name", raw, MIN, MAX)``, or ``number(name, …)`` under the name each verb passes), as the
    verb files call them."""
    consts = _rust_consts()
    grammar = (RUST_SRC / "grammar.rs").read_text()
    readers = {}  # reader -> (its fixed name or None, (low, high))
    for reader, body in re.findall(r"pub fn (\w+)\((?:name: &'static str, )?raw: (?:Option<)?&\[u8\]>?\)[^{]*\{(.*?)\n\}",
                                   grammar, re.S):
        call = re.search(r'number\((?:"(\w+)"|name), \w+, ([^,]+), ([^)]+?)\)', body)
        if call:
            fixed, low, high = call.groups()
            readers[reader] = (fixed, (_rust_bound(low, consts), _rust_bound(high, consts)))
    found: dict[str, set[tuple[int, int]]] = {}
    for path in (RUST_SRC / "verbs").glob("*.rs"):
        code = path.read_text()
        for reader, named in re.findall(r"grammar::(\w+)\((?:\"(\w+)\")?", code):
            if reader in readers:
                fixed, bounds = readers[reader]
                found.setdefault(fixed or named, set()).add(bounds)
        for named, low, high in re.findall(r'grammar::number\("(\w+)", [^,]+, ([^,]+), ([^)]+?)\)', code):
            found.setdefault(named, set()).add((_rust_bound(low, consts), _rust_bound(high, consts)))
    for name, ranges in found.items():
        assert len(ranges) == 1, f"trafikey reads {name} with two ranges: {ranges}"
    return {name: ranges.pop() for name, ranges in found.items()}


def test_every_argument_range_is_trafikeys_grammar():
    """The range each numeric ARGV is checked against, read off trafikey's grammar and verb files, is
    verbs.BOUNDS'; the only names trafikey does not read are the lane scripts' (never an EMQ command)."""
    rust = _rust_argument_bounds()
    assert rust == {name: verbs.BOUNDS[name] for name in rust}
    lane_only = {name for verb in LANES for name in verb.argv} - {name for verb in REGISTERED
                                                                   for name in verb.argv + tuple(n for n, _ in verb.late)}
    assert set(verbs.BOUNDS) - set(rust) == lane_only & set(verbs.BOUNDS)


def test_the_byte_bounds_are_trafikeys_grammar_and_the_scripts():
    """The bounds on the bytes the server keeps, said once per language: Python's, trafikey's grammar
    and the Lua libraries that check them on wire 4 (and for the lane and flow scripts)."""
    rust = _rust_consts()
    python = {"PROGRESS_MAX_LEN": verbs.PROGRESS_MAX_LEN, "TRACEBACK_MAX_LEN": verbs.TRACEBACK_MAX_LEN,
              "ERROR_MAX_LEN": verbs.ERROR_MAX_LEN, "EVENT_VALUE_MAX_LEN": verbs.EVENT_VALUE_MAX_LEN,
              "EVENTS_MAX": verbs.EVENTS_MAX}
    assert {name: rust[name] for name in python} == python
    lua = {name: int(value) for path in ("failure", "events", "lanes")
           for names, values in re.findall(r"^local ([A-Z_]+(?:, [A-Z_]+)*) = ([\d, ]+)$",
                                           (SCRIPTS_DIR / "lib" / f"{path}.lua").read_text(), re.M)
           for name, value in zip(names.split(", "), values.split(", "))}
    assert lua == {"ERROR_MAX": verbs.ERROR_MAX_LEN, "TRACEBACK_MAX": verbs.TRACEBACK_MAX_LEN,
                   "EVENTS_MAX": verbs.EVENTS_MAX, "EVENT_VALUE_MAX": verbs.EVENT_VALUE_MAX_LEN,
                   "GROUP_SETTINGS_MAX": verbs.GROUP_SETTINGS_MAX, "GROUP_MAX_LEN": 128}


def test_every_numeric_argument_has_its_bounds():
    numeric = {name for verb in VERBS + OPTIONAL + LANES + READS
               for name in verb.argv + tuple(n for n, _ in verb.late)} - {
        "id", "token", "payload", "error", "progress", "result", "traceback", "group", "scope"}
    assert numeric == set(verbs.BOUNDS)


@pytest.mark.parametrize("name,low,high", [(n, lo, hi) for n, (lo, hi) in verbs.BOUNDS.items()])
def test_the_builders_refuse_one_past_each_bound(name, low, high):
    from echomq import ConfigurationError
    from echomq._protocol.keys import Keyspace

    verb = next(v for v in VERBS + OPTIONAL + LANES if name in v.argv + tuple(n for n, _ in v.late))
    good = {"id": "a", "token": "1", "payload": b"p", "error": "e", "progress": b"1", "result": b"r", "group": "g",
            "scope": "", **{n: lo for n, (lo, _) in verbs.BOUNDS.items()}}
    names = verb.argv + tuple(n for n, _ in verb.late)[: 1 if name not in verb.argv else 0]  # a late one: with it
    argv = [good[n] for n in names]
    at = names.index(name)
    for value, ok in ((low, True), (high, True), (low - 1, False), (high + 1, False), (True, False)):
        argv[at] = value
        if ok:
            assert verb.build(Keyspace("q"), *argv).argv[at] == value
        else:
            with pytest.raises(ConfigurationError, match=name):
                verb.build(Keyspace("q"), *argv)


def test_extends_takes_one_to_a_thousand_pairs():
    from echomq import ConfigurationError
    from echomq._protocol.keys import Keyspace

    extends = BY_NAME["extends"]
    assert len(extends.build(Keyspace("q"), 1, *["a", "1"] * verbs.EXTENDS_MAX_PAIRS).argv) == 2001
    for bad in ([1], [1, "a"], [1, *["a", "1"] * (verbs.EXTENDS_MAX_PAIRS + 1)]):
        with pytest.raises(ConfigurationError, match="EXTENDS"):
            extends.build(Keyspace("q"), *bad)


def test_the_lane_and_flow_keys_are_the_keyspaces():
    """The lanes' and flows' key suffixes are named once in Python (``Keyspace``), and each is the one the
    Lua scripts spell; no Python module spells one itself."""
    named = {value for name, value in vars(Keyspace).items() if name.startswith(("LANE", "FLOW_"))}
    lua = "\n".join(p.read_text() for p in SCRIPTS_DIR.rglob("*.lua"))
    assert set(re.findall(r"'((?:lanes:|flow:)\w+:?|lane:)'", lua)) == named
    spelled = {p.name: found for p in (ROOT / "echomq").rglob("*.py") if p.name != "keys.py"
               if (found := re.findall(r"""["'](lanes:\w+|lane:|flow:\w+:?)["']""", p.read_text()))}
    assert spelled == {}


# --------------------------------------------------------------------------- what a script loads, said once

#: What a script may call without defining it: Lua's own and the server's (redis.*, string.*, ...).
LUA_BUILTINS = {"tonumber", "tostring", "type", "unpack", "ipairs", "pairs", "next", "select", "error", "assert",
                "pcall", "setmetatable", "getmetatable", "rawget", "rawset"}


def test_a_script_names_its_libraries_in_its_header_and_nothing_else_does():
    """Each script's header says what it is loaded after (one ``-- Loaded after lib/….lua.`` line); the
    verb table declares none, and every function the loaded text calls is defined in it."""
    assert "libraries=" not in (ROOT / "echomq" / "_protocol" / "verbs.py").read_text()
    for verb in SCRIPTED:
        header = [line for line in _source(verb).splitlines() if line.startswith("--")]
        named = [line for line in header if line.startswith("-- Loaded after")]
        assert len(named) <= 1 and verb.libraries == tuple(re.findall(r"lib/(\w+)\.lua", "".join(named))), verb.name
        code = re.sub(r"--[^\n]*|'(?:[^'\\]|\\.)*'", "", verb.source().decode())
        defined = {a or b for a, b in re.findall(r"\blocal function (\w+)|^(\w+) = function", code, re.M)}
        defined |= {p.strip() for params in re.findall(r"function \w*\(([^)]*)\)", code) for p in params.split(",")}
        called = set(re.findall(r"(?<![.:\w])([A-Za-z_]\w*)\(", code)) - {"function", "if", "and", "or", "not", "return"}
        assert called - defined - LUA_BUILTINS == set(), f"{verb.name}.lua calls what its libraries do not define"


def test_each_rule_the_scripts_share_is_said_once():
    """The TIME-to-ms formula (lib/clock.lua), the wake marker's write (lib/events.lua), a row's
    priority read as its pending score (lib/pending.lua) and the read of the switches an outcome needs
    (lib/events.lua) each have one place; every script reaches them through it."""
    texts = {p.relative_to(SCRIPTS_DIR).as_posix(): p.read_text() for p in SCRIPTS_DIR.rglob("*.lua")}
    code = {name: re.sub(r"--[^\n]*", "", text) for name, text in texts.items()}
    for rule, home in ((r"redis\.call\('TIME'\)", "lib/clock.lua"), (r"'wake', 0, 'w'", "lib/events.lua"),
                       (r"priority\W* or '0'", "lib/pending.lua"), (r"'events', 'waiters'", "lib/events.lua")):
        assert [name for name, text in code.items() if re.search(rule, text)] == [home], rule


def test_a_refusal_names_its_verb_by_its_label():
    """Every EMQSTATE a script words names its verb as VERB, the verb table's label (the loader hands it
    over): no script spells a verb's name in a refusal (they once read EMQ.FAIL, lane_fail, flow_fail)."""
    for name, text in ((p.name, p.read_text()) for p in SCRIPTS_DIR.rglob("*.lua")):
        spelled = re.findall(r"'EMQSTATE (?!lane row is not native|flow child is not native|flow job )([^']+)'", text)
        assert spelled == [], f"{name}: {spelled}"
    for verb in REGISTERED:
        assert verb.label == verb.command
    assert BY_NAME["lane_fail"].label == "EMQ.LANE.FAIL" and BY_NAME["flow_fail"].label == "EMQ.FLOW.FAIL"
