"""Each node's predicted end in the topology replay (issue 31's `pack` and `drain`).

Per node: the latest predicted end of the jobs on it and their earliest start, so that
issue 28's reading of overdue runs (scores.drain.effective_end: a run past its prediction runs
as long again) gives when the node is predicted to empty.
"""
from __future__ import annotations

import numpy as np

from scheduler_hook.scores.drain import effective_end


class NodeEnds:
    """Predicted end per node from its residents' starts and predicted run times."""

    def __init__(self, n: int) -> None:
        self.on_node: dict[int, dict[int, tuple[float, float]]] = {}  # node -> job: start, end
        self.end = np.full(n, -np.inf)  # the latest predicted end of its jobs
        self.start = np.full(n, np.inf)  # and the earliest start (for overdue ends)

    def occupy(self, j: int, nodes: list[int], start: float, end: float) -> None:
        """Job ``j`` started at ``start`` on ``nodes`` and is predicted to end at ``end``
        (a regrown gang calls again with its new nodes)."""
        for nd in nodes:
            self.on_node.setdefault(nd, {})[j] = (start, end)
            self.end[nd] = max(self.end[nd], end)
            self.start[nd] = min(self.start[nd], start)

    def vacate(self, j: int, nodes: list[int]) -> None:
        for nd in set(nodes):
            left = self.on_node.get(nd, {})
            left.pop(j, None)
            self.end[nd] = max((e for _, e in left.values()), default=-np.inf)
            self.start[nd] = min((s for s, _ in left.values()), default=np.inf)

    def effective(self, now: float) -> np.ndarray:
        """(n,) when each node is predicted to empty, overdue runs read as issue 28 reads them
        (-inf: empty now)."""
        return effective_end(self.end, self.start, now)
