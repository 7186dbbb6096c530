"""openb cluster replay (FGD ATC'23 protocol) with baseline, FGD and Foresight policies."""
from simulator.replay.data import Nodes, Pods, build_workload, load_nodes, load_pods
from simulator.replay.engine import ReplayResult, replay
from simulator.replay.policies import POLICIES

__all__ = ["Nodes", "Pods", "build_workload", "load_nodes", "load_pods", "ReplayResult",
           "replay", "POLICIES"]
