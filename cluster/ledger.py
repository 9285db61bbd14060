"""The byte ledger: every message's encoded payload size by (round, phase, kind, src role, dst role).

*Logical* bytes are what a real deployment would transmit between participants: the payload of
every message, counted once per recipient, independent of how nodes are packed onto processes.
*Crossed* bytes are what physically travelled between Ray processes (encoded batches whose source
and destination hosts differ); *crossed-node* bytes are those of them whose hosts ran on different
Ray nodes (machines, or raylets), so they went between object stores. Phases whose name starts
with ``eval`` are evaluation traffic and are reported apart from protocol traffic.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

LedgerKey = tuple[int, str, str, str, str]  # (round, phase, kind, src_role, dst_role)


@dataclass(frozen=True)
class LedgerDelta:
    """A ledger's entries as plain lists (:meth:`Ledger.export`): what a host sends the driver
    after a superstep, and what a checkpoint keeps.

    Attributes:
        logical: (key, (bytes, messages)) per :data:`LedgerKey`.
        crossed: ((round, phase), bytes) that travelled between host processes.
        crossed_nodes: ((round, phase), bytes) of those that travelled between Ray nodes.
    """

    logical: list[tuple[LedgerKey, tuple[int, int]]]
    crossed: list[tuple[tuple[int, str], int]]
    crossed_nodes: list[tuple[tuple[int, str], int]]


def is_eval_phase(phase: str) -> bool:
    return phase.startswith("eval")


@dataclass
class Ledger:
    logical: dict[LedgerKey, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    crossed: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    crossed_nodes: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))

    def record(self, key: LedgerKey, nbytes: int, count: int = 1) -> None:
        entry = self.logical[key]
        entry[0] += nbytes
        entry[1] += count

    def record_crossed(self, round_: int, phase: str, nbytes: int) -> None:
        self.crossed[(round_, phase)] += nbytes

    def record_crossed_nodes(self, round_: int, phase: str, nbytes: int) -> None:
        self.crossed_nodes[(round_, phase)] += nbytes

    def merge(self, other: LedgerDelta | dict) -> None:
        """Add a host's delta (:meth:`export`), or a checkpoint's, which may hold it as a dict
        (``logical``, ``crossed`` and optionally ``crossed_nodes``)."""
        if isinstance(other, dict):
            other = LedgerDelta(other["logical"], other["crossed"], other.get("crossed_nodes", []))
        for key, (nbytes, count) in other.logical:
            self.record(tuple(key), nbytes, count)
        for (rnd, phase), nbytes in other.crossed:
            self.record_crossed(rnd, phase, nbytes)
        for (rnd, phase), nbytes in other.crossed_nodes:
            self.record_crossed_nodes(rnd, phase, nbytes)

    def export(self) -> LedgerDelta:
        return LedgerDelta(
            [(k, tuple(v)) for k, v in self.logical.items()],
            list(self.crossed.items()),
            list(self.crossed_nodes.items()),
        )

    # --- queries -------------------------------------------------------------------------------
    def total(self, *, round_: int | None = None, include_eval: bool = False) -> int:
        return sum(
            v[0]
            for k, v in self.logical.items()
            if (round_ is None or k[0] == round_) and (include_eval or not is_eval_phase(k[1]))
        )

    def by_kind(self, *, round_: int | None = None, include_eval: bool = False) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for (rnd, phase, kind, _, _), (nbytes, _) in self.logical.items():
            if (round_ is None or rnd == round_) and (include_eval or not is_eval_phase(phase)):
                out[kind] += nbytes
        return dict(sorted(out.items()))

    def messages(self, *, round_: int | None = None, include_eval: bool = False) -> int:
        return sum(
            v[1]
            for k, v in self.logical.items()
            if (round_ is None or k[0] == round_) and (include_eval or not is_eval_phase(k[1]))
        )

    def eval_total(self) -> int:
        return sum(v[0] for k, v in self.logical.items() if is_eval_phase(k[1]))

    def crossed_total(self, *, round_: int | None = None) -> int:
        return _round_sum(self.crossed, round_)

    def crossed_nodes_total(self, *, round_: int | None = None) -> int:
        return _round_sum(self.crossed_nodes, round_)

    def rows(self) -> list[dict]:
        """Every ledger entry as a JSON-able row, sorted."""
        return [
            {
                "round": k[0],
                "phase": k[1],
                "kind": k[2],
                "src_role": k[3],
                "dst_role": k[4],
                "bytes": v[0],
                "messages": v[1],
            }
            for k, v in sorted(self.logical.items())
        ]


def _round_sum(table: dict[tuple[int, str], int], round_: int | None) -> int:
    """The bytes of a (round, phase) table: of one round, or of all when ``round_`` is None."""
    return sum(v for (rnd, _), v in table.items() if round_ is None or rnd == round_)
