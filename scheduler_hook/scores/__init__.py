"""Score components, one per module; `ALL` lists them in the order explanations show them."""
from scheduler_hook.scores.carbon import CarbonWindow
from scheduler_hook.scores.colocation import ColocationSafety
from scheduler_hook.scores.drain import Drain
from scheduler_hook.scores.fragmentation import Fragmentation
from scheduler_hook.scores.health import GpuHealth
from scheduler_hook.scores.memory_fit import MemoryFit
from scheduler_hook.scores.mig import MigPlacement
from scheduler_hook.scores.packing import Packing
from scheduler_hook.scores.power import PowerHeadroom
from scheduler_hook.scores.reservation import Reservation
from scheduler_hook.scores.topology import TopologyGang

ALL = (MemoryFit, ColocationSafety, Fragmentation, Reservation, Drain, PowerHeadroom,
       CarbonWindow, GpuHealth, Packing, MigPlacement, TopologyGang)

__all__ = ["ALL", "CarbonWindow", "ColocationSafety", "Drain", "Fragmentation", "GpuHealth",
           "MemoryFit", "MigPlacement", "Packing", "PowerHeadroom", "Reservation", "TopologyGang"]
