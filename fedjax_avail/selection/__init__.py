"""Cohort selection: who trains among the available clients.

Every strategy subclasses :class:`Selection` (``selection/_base.py``) and returns a fixed-size
``[K]`` index vector of distinct clients and a ``[K]`` validity mask (False for padding when
fewer than K clients are available). Synchronous algorithms take ``selection=``. The functions
``uniform`` and ``least_recent`` are the stateless rules behind ``Uniform`` and ``LeastRecent``.
"""

from fedjax_avail.selection._base import (
    FullBatchPass,
    Selection,
    SelectionContext,
    check_selection,
)
from fedjax_avail.selection._facility import coverage_value, greedy, greedy_facility_location
from fedjax_avail.selection._least_recent import LeastRecent, least_recent
from fedjax_avail.selection._submodular import (
    NORMALIZE,
    PHIS,
    DivFL,
    FacilityState,
    PowerOfChoice,
    SubTrunc,
    UnionFL,
)
from fedjax_avail.selection._uniform import Uniform, uniform

__all__ = [
    "NORMALIZE",
    "PHIS",
    "DivFL",
    "FacilityState",
    "FullBatchPass",
    "LeastRecent",
    "PowerOfChoice",
    "Selection",
    "SelectionContext",
    "SubTrunc",
    "Uniform",
    "UnionFL",
    "check_selection",
    "coverage_value",
    "greedy",
    "greedy_facility_location",
    "least_recent",
    "uniform",
]
