"""fedjax_avail: a JAX federated-learning simulator for intermittent client availability.

All N clients live on a leading array axis; a round is a pure function, a run is a compiled
``lax.scan`` over rounds. See ``README.md`` and ``docs/guide/architecture.md`` for the architecture.
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
    mesh,
    runs,
    selection,
    server,
    tables,
    tasks,
    testing,
    timeline,
)
from fedjax_avail._lock import DirectoryBusyError
from fedjax_avail._version import __version__
from fedjax_avail.compilation_cache import enable_compilation_cache
from fedjax_avail.data import FederatedData
from fedjax_avail.engine import simulate
from fedjax_avail.history import History
from fedjax_avail.memory import MemoryEstimate, estimate_memory
from fedjax_avail.results import DivergenceError, Interrupted, Result, StalledError
from fedjax_avail.run import Run
from fedjax_avail.tasks import Task

mesh.use_cpu_cores()  # one CPU device per core (importing the package starts no JAX backend)

__all__ = [
    "DirectoryBusyError",
    "DivergenceError",
    "FederatedData",
    "History",
    "Interrupted",
    "MemoryEstimate",
    "Result",
    "Run",
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
    "mesh",
    "runs",
    "selection",
    "server",
    "simulate",
    "tables",
    "tasks",
    "testing",
    "timeline",
]
