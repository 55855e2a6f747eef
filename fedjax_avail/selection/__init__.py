"""Cohort selection: who trains among the available clients.

Every rule returns a fixed-size ``[K]`` index vector of distinct clients and a ``[K]`` validity
mask (False for padding when fewer than K clients are available).
"""

from fedjax_avail.selection._least_recent import least_recent
from fedjax_avail.selection._uniform import uniform

__all__ = ["least_recent", "uniform"]
