"""`memaware`: the memory-aware placement of the 2024 research paper named in issue 19, as a
replay policy, fed the same telemetry as `foresight`.

The paper's extender ranks nodes by `(1 - GPU memory used share) * (1 - GPU idle-time share)`
from live telemetry: free memory first, and among GPUs with free memory the busy ones (it packs
onto GPUs that are already working). It predicts nothing: memory used is what the GPUs show now
(the measured peaks of the pods running there), idle time is what they show now (here: the
share of the GPU no pod is allocated, the replay's only notion of activity). It has no hard
memory filter: a pod whose true peak is above its request can still overflow a GPU that shows
room, which is what `foresight` predicts and avoids.

Score per GPU slot: (1 - used/1000) * (allocated/1000), with `used` the measured peak memory of
the residents (ColocationMode's true peaks of placed pods, which telemetry shows once they run)
or, without a mode, their allocation. A node scores its best slot; CPU-only and whole-GPU pods
use node-level shares (memory used over the node's GPU memory, allocation over its GPUs).
"""
from __future__ import annotations

import numpy as np

from simulator.replay.cluster import MILLI
from simulator.replay.baselines import Policy, _bestfit_slots, gpu_milli


class MemAware(Policy):
    name = "memaware"

    def _used(self) -> np.ndarray:
        """(N, G) memory in use per GPU slot, in milli of the GPU."""
        c = self.cluster
        alloc = np.where(c.slot_exists, MILLI - c.gpu_free, 0).astype(float)
        m = self.mode
        if m is None or not hasattr(m, "slot_milli"):
            return alloc
        # shared GPUs: the residents' measured peaks; whole-GPU pods: their allocation
        peaks = np.minimum(m.slot_milli * m.ratio, MILLI).sum(axis=2)
        return np.where(m.shared_slot, np.minimum(peaks, MILLI), alloc)

    def score(self, pod, node_ok, slots):
        c = self.cluster
        used = self._used()
        busy = np.where(c.slot_exists, (MILLI - c.gpu_free) / MILLI, 0.0)
        slot = (1.0 - used / MILLI) * busy
        if pod.shared:
            node = np.where(slots, slot, -np.inf).max(axis=1)
            return np.where(node_ok, node, -np.inf), slot + 1e-6 * _bestfit_slots(c, pod)
        cap = gpu_milli(c.nodes)
        node = (1.0 - used.sum(axis=1) / cap) * (busy.sum(axis=1) * MILLI / cap)
        return np.where(node_ok, node, -np.inf), _bestfit_slots(c, pod)


OTHERS = {MemAware.name: MemAware}
