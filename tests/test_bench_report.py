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
