"""Named experiments that reproduce the papers' figures; ``fedjax-avail run NAME``."""

from fedjax_avail.experiments._analysis import dominant_period, oscillation_amplitude
from fedjax_avail.experiments._experiment import (
    Experiment,
    RunOutcome,
    Setup,
    format_summary,
    parse_value,
    run,
)
from fedjax_avail.experiments._fedlaavg import DEFAULT, FEDLAAVG_MNIST

REGISTRY: dict[str, Experiment] = {e.name: e for e in (DEFAULT, FEDLAAVG_MNIST)}


def get(name: str) -> Experiment:
    """The registered experiment called ``name``."""
    if name not in REGISTRY:
        raise ValueError(f"no experiment {name!r}; registered: {sorted(REGISTRY)}")
    return REGISTRY[name]


__all__ = [
    "DEFAULT",
    "FEDLAAVG_MNIST",
    "REGISTRY",
    "Experiment",
    "RunOutcome",
    "Setup",
    "dominant_period",
    "format_summary",
    "get",
    "oscillation_amplitude",
    "parse_value",
    "run",
]
