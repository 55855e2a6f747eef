"""Availability processes: which clients can be selected at each step."""

from fedjax_avail.availability._periodic import Periodic, diurnal
from fedjax_avail.availability._process import AlwaysOn, AvailabilityProcess, Bernoulli
from fedjax_avail.availability._sample import sample
from fedjax_avail.availability._trace import Trace

__all__ = ["AlwaysOn", "AvailabilityProcess", "Bernoulli", "Periodic", "Trace", "diurnal", "sample"]
