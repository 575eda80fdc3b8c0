"""The docs that restate the verb table stay in step with it."""

from pathlib import Path

from echomq.verbs import BUS, CONTROL, VERBS

DOCS = Path(__file__).parent.parent / "docs"


def test_lifecycle_lists_every_verb_with_its_move():
    rows = {}
    for line in (DOCS / "lifecycle.md").read_text().splitlines():
        cells = [cell.strip().replace("\\|", "|") for cell in line.strip().strip("|").split(" | ")]
        if len(cells) == 3 and cells[0] not in ("verb", "---"):
            rows[cells[0]] = cells[1]
    assert rows == {verb.name: verb.move for verb in VERBS + BUS + CONTROL}
