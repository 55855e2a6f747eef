"""Availability processes: which clients can be selected in each time slot."""

from fedjax_avail.availability._combine import Combined, all_of, any_of
from fedjax_avail.availability._dropout import (
    Dropout,
    check_reports_forwarded,
    dropout,
    reports_of,
)
from fedjax_avail.availability._fedscale import (
    example_fedscale_trace,
    from_fedscale,
    load_fedscale_pickle,
)
from fedjax_avail.availability._gaps import longest_gap, minimal_availability
from fedjax_avail.availability._hour_of_day import HourOfDay
from fedjax_avail.availability._intervals import Intervals, IntervalsState
from fedjax_avail.availability._markov import Markov, MarkovState
from fedjax_avail.availability._periodic import Periodic, diurnal
from fedjax_avail.availability._plot import plot_availability
from fedjax_avail.availability._process import (
    AlwaysOn,
    AvailabilityProcess,
    Bernoulli,
    ended,
    skip,
)
from fedjax_avail.availability._sample import sample
from fedjax_avail.availability._trace import Trace

__all__ = [
    "AlwaysOn",
    "AvailabilityProcess",
    "Bernoulli",
    "Combined",
    "Dropout",
    "HourOfDay",
    "Intervals",
    "IntervalsState",
    "Markov",
    "MarkovState",
    "Periodic",
    "Trace",
    "all_of",
    "any_of",
    "check_reports_forwarded",
    "diurnal",
    "dropout",
    "ended",
    "example_fedscale_trace",
    "from_fedscale",
    "load_fedscale_pickle",
    "longest_gap",
    "minimal_availability",
    "plot_availability",
    "reports_of",
    "sample",
    "skip",
]
