"""fedjax_avail: a JAX federated-learning simulator for intermittent client availability.

All N clients live on a leading array axis; a round is a pure function, a run is a compiled
``lax.scan`` over rounds. See ``README.md`` and ``DESIGN.md`` for the architecture.
"""

from fedjax_avail import (
    algorithms,
    availability,
    callbacks,
    clock,
    cohort,
    data,
    fairness,
    local,
    runs,
    selection,
    server,
    tasks,
    testing,
)
from fedjax_avail._lock import DirectoryBusyError
from fedjax_avail.compilation_cache import enable_compilation_cache
from fedjax_avail.data import FederatedData
from fedjax_avail.engine import simulate
from fedjax_avail.history import History
from fedjax_avail.memory import MemoryEstimate, estimate_memory
from fedjax_avail.results import DivergenceError, Interrupted, Result, StalledError
from fedjax_avail.tasks import Task

__version__ = "0.1.0"

__all__ = [
    "DirectoryBusyError",
    "DivergenceError",
    "FederatedData",
    "History",
    "Interrupted",
    "MemoryEstimate",
    "Result",
    "StalledError",
    "Task",
    "__version__",
    "algorithms",
    "availability",
    "callbacks",
    "clock",
    "cohort",
    "data",
    "enable_compilation_cache",
    "estimate_memory",
    "fairness",
    "local",
    "runs",
    "selection",
    "server",
    "simulate",
    "tasks",
    "testing",
]
