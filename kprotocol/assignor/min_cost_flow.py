"""Exact min-cost flow for the rack-aware optimizations, solved as a network LP by HiGHS (scipy).

Why not cycle cancelling (KIP-925's sketch) or successive shortest paths? Both run in Python loops over a
task x client graph and take seconds at 1000 tasks x 100 clients. The rack-aware graphs are tiny once tasks
with the same costs are merged (see `rack_aware`), and a node-arc incidence matrix is totally unimodular, so
the dual simplex returns an integral optimal vertex: the same optimum as any min-cost-flow algorithm, in a few
milliseconds, deterministically for identical input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _scipy():
    """scipy's LP solver and sparse matrices: only the rack-aware assignor needs them (`kprotocol[rack]`)."""
    try:
        from scipy.optimize import linprog
        from scipy.sparse import coo_matrix
    except ImportError:
        raise ImportError("the rack-aware assignor needs scipy: pip install 'kprotocol[rack]'") from None
    return linprog, coo_matrix


@dataclass
class FlowNetwork:
    """Nodes with supplies (positive = source, negative = demand) and capacitated, costed arcs."""

    supply: list[int] = field(default_factory=list)
    tails: list[int] = field(default_factory=list)
    heads: list[int] = field(default_factory=list)
    capacities: list[float] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)

    def add_node(self, supply: int = 0) -> int:
        self.supply.append(supply)
        return len(self.supply) - 1

    def add_arc(self, tail: int, head: int, cost: float, capacity: float = np.inf) -> int:
        self.tails.append(tail)
        self.heads.append(head)
        self.costs.append(cost)
        self.capacities.append(capacity)
        return len(self.tails) - 1

    def solve(self) -> list[int] | None:
        """Integral min-cost flow per arc, or None when the supplies cannot be routed."""
        n_arcs = len(self.tails)
        if n_arcs == 0:
            return [] if not any(self.supply) else None
        linprog, coo_matrix = _scipy()
        arcs = np.arange(n_arcs)
        incidence = coo_matrix(
            (np.concatenate([np.ones(n_arcs), -np.ones(n_arcs)]),
             (np.concatenate([self.tails, self.heads]), np.concatenate([arcs, arcs]))),
            shape=(len(self.supply), n_arcs)).tocsr()
        bounds = np.column_stack([np.zeros(n_arcs), np.array(self.capacities, dtype=float)])
        result = linprog(np.array(self.costs, dtype=float), A_eq=incidence, b_eq=np.array(self.supply, dtype=float),
                         bounds=bounds, method="highs-ds")
        if result.status != 0:
            return None
        return np.rint(result.x).astype(int).tolist()
