"""``python -m echomq.cli``: the ``emq`` command (the supervisor starts its workers this way)."""

from . import main

main(prog_name="emq")
