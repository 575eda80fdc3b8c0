"""bench/report.py's page assembly, on hand-made inputs (no server, no run).

The page is generated, so what a person writes lives in bench/NOTES.md: its first section must
land right after the headline and the rest at the end, and a worker mode that did not run (an
earlier revision the bench cannot start) must leave a gap on the page, not a crash.
"""

from __future__ import annotations

from bench import report


def test_notes_first_section_leads_and_the_rest_closes(tmp_path, monkeypatch):
    notes = tmp_path / "NOTES.md"
    notes.write_text("## Where the targets stand\n\nlead text\n\n## Reading these numbers\n\nrest\n\n## More\n\nx\n")
    monkeypatch.setattr(report, "NOTES", notes)
    lead, rest = report.notes()
    assert lead[0].startswith("## Where the targets stand") and "Reading" not in lead[0]
    assert rest[0].startswith("## Reading these numbers") and rest[0].endswith("x")


def test_notes_of_one_section_or_none(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "NOTES", tmp_path / "absent.md")
    assert report.notes() == ([], [])
    only = tmp_path / "NOTES.md"
    only.write_text("## Just one\n\ntext\n")
    monkeypatch.setattr(report, "NOTES", only)
    assert report.notes() == (["## Just one\n\ntext", ""], [])


def test_a_before_mode_that_did_not_run_leaves_no_row():
    ran = {"throughput:1": {"median": 2000.0}, "server_cpu_us_per_job:1": {"median": 30.0}}
    failed = {"throughput:1": {"median": None}, "server_cpu_us_per_job:1": {"median": None},
              "failed": "a worker exited with 2"}
    idle = {"jobs": 3, "gap_ms": [20, 300], "delay_ms": 200, "idle_s": 10.0,
            "table": {"EchoMQ wire 6 (emq worker @ abc1234)": {"failed": "a worker exited with 2"}}}
    e2e = {"processes": [1], "table": {"EchoMQ wire 6 (emq worker)": ran,
                                       "EchoMQ wire 6 (emq worker @ abc1234)": failed}}
    page = "\n".join(report.idle_section(idle, e2e))
    assert "jobs/s after/before" in page  # the pair is found ...
    assert "| wire 6 (emq worker) | 1 |" not in page  # ... and its row left out, with nothing to divide


def _sample(*values: float) -> dict:
    return {"median": sorted(values)[len(values) // 2], "min": min(values), "max": max(values), "n": len(values),
            "values": list(values)}


def _results(e2e_table: dict, processes: list[int]) -> dict:
    machine = {"cpu": "cpu", "cores": 2, "memory_gib": 4, "os": "linux", "loadavg_at_start": [1, 1, 1],
               "started_at": "2026-12-05 09:00:00 UTC", "git_commit": "abc1234", "git_dirty": False,
               "trafikey_commit": "abc1234", "python": "3.12", "node": "v20"}
    return {"meta": {"command": "python -m bench --only e2e --processes 2", "machine": machine, "valkey": "9.1.2",
                     "clients": {}, "trafikey": None, "trafikey_skipped": "not built", "results_path": "r.json",
                     "args": {"peers": "bullmq-node-c10"}},
            "e2e": {"n": 20000, "bulk_n": 50000, "rounds": 2, "processes": processes, "window_s": 8.0,
                    "latency_jobs": 0, "latency_gap_ms": [20, 300], "table": e2e_table}}


def test_targets_read_only_what_the_run_measured():
    """Issue 44 item 5: a run of 2 processes and no asynq, no cost section, gets figures for 2
    processes and BullMQ only; every other target says it was not measured here."""
    ours = {"kind": "echomq", "config": "", "throughput:2": _sample(30000, 33000),
            "server_cpu_us_per_job:2": _sample(20.0, 22.0), "bulk_enqueue": _sample(90000, 95000)}
    bullmq = {"kind": "peer", "config": "", "throughput:2": _sample(10000, 10000),
              "server_cpu_us_per_job:2": _sample(100.0, 100.0), "bulk_enqueue": _sample(20000, 20000)}
    figures = dict(report.target_figures(_results({report.OURS: ours, report.BULLMQ: bullmq}, [2])))
    vs_bullmq = next(v for k, v in figures.items() if k.startswith("end to end") and report.BULLMQ in k)
    assert vs_bullmq == "2 proc: **3.15× (3.00–3.30)** (met)"  # round by round: 30000/10000, 33000/10000
    cpu = next(v for k, v in figures.items() if k.startswith("server CPU"))
    assert cpu.startswith("2 proc: **0.21×") and cpu.endswith("(not met)")
    not_here = [k for k, v in figures.items() if v.startswith("not measured here")]
    assert len(not_here) == len(figures) - 2  # asynq twice, both workers / loops, both cost ratios
    assert all("1 proc" not in v and "4 proc" not in v for v in figures.values())
    assert "asynq (Go), concurrency 10" in figures[next(k for k in not_here if "bulk" in k)]


def test_the_page_marks_every_hand_written_part(tmp_path, monkeypatch):
    notes = tmp_path / "NOTES.md"
    notes.write_text("## Where the targets stood (2026-12-03)\n\n0.94× in that run\n\n## Reading\n\nrest\n")
    monkeypatch.setattr(report, "NOTES", notes)
    page = report.render(_results({}, [2]))
    generated = page.index("## Where the targets stand in this run")
    lead, rest = page.index("## Where the targets stood"), page.index("## Reading")
    assert generated < lead < rest
    assert page[:lead].endswith(report.HAND_WRITTEN + "\n\n") and page[:rest].endswith(report.HAND_WRITTEN + "\n\n")


def test_the_notes_never_claim_the_page_run():
    """bench/NOTES.md is included in whatever run renders the page, so it names its own runs:
    "this page's run" there would pass another run's figures off as the page's (issue 44 item 5)."""
    import re

    text = report.NOTES.read_text()
    claims = re.findall(r"(?:in|from|by medians in) this page's run|this page was regenerated", text, re.I)
    assert claims == []
