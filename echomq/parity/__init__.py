"""The parity instrument (SPEC §8): the same case on a script node and a native node,
every key of both compared after every step, every difference named by SPEC §5 or
reported UNEXPECTED. ``python -m echomq.parity`` runs it; see docs/parity.md.

An application on top of the library: it may import every layer but ``cli`` (docs/architecture.md).
"""

from .cases import CATALOGUE
from .observation import CaseResult, Verdict
from .runner import Pair

__all__ = ["CATALOGUE", "CaseResult", "Pair", "Verdict", "main"]


def main(argv=None, out=None, prog=None) -> int:
    """The command's entry point (``emq parity`` calls this): parse ``argv``, run, print to ``out``;
    ``prog`` is the command its usage lines name (default: ``python -m echomq.parity``)."""
    from .__main__ import PROG, main as _main

    return _main(argv, out, prog or PROG)
