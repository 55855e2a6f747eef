"""Named experiments that reproduce the papers' figures; ``fedjax-avail run NAME``."""

from fedjax_avail.experiments._analysis import dominant_period, oscillation_amplitude
from fedjax_avail.experiments._async import ASYNC_MNIST
from fedjax_avail.experiments._availability_sweep import (
    AVAILABILITY_MNIST,
    AVAILABILITY_SWEEP_MNIST,
)
from fedjax_avail.experiments._compare import compare_runs, read_histories, read_runs
from fedjax_avail.experiments._experiment import Experiment, Setup, parse_value
from fedjax_avail.experiments._fedlaavg import (
    DEFAULT,
    FEDLAAVG_MNIST,
    FEDLAAVG_MNIST_FIG4,
    FEDLAAVG_MNIST_FIG5_BETA,
    FEDLAAVG_MNIST_FIG5_N,
)
from fedjax_avail.experiments._folder import RESUMABLE
from fedjax_avail.experiments._parts import Part, Setting, describe_parts, part
from fedjax_avail.experiments._parts import describe_fields as part_settings
from fedjax_avail.experiments._programs import program_shape, shared_program
from fedjax_avail.experiments._run import (
    DEFAULT_CHECKPOINT_SECONDS,
    RunOutcome,
    plan,
    run,
    run_together,
)
from fedjax_avail.experiments._sentiment140 import (
    FEDLAAVG_SENTIMENT140,
    FEDLAAVG_SENTIMENT140_FIG6,
    FEDLAAVG_SENTIMENT140_FIG7_BETA,
    FEDLAAVG_SENTIMENT140_FIG7_N,
)
from fedjax_avail.experiments._settings import optional
from fedjax_avail.experiments._shakespeare import SHAKESPEARE, SHAKESPEARE_AVAILABILITY
from fedjax_avail.experiments._subtrunc import (
    SUBTRUNC_MNIST,
    SUBTRUNC_MNIST_LAMBDA,
    SUBTRUNC_MNIST_PHI,
    SUBTRUNC_MNIST_WINDOW,
)
from fedjax_avail.experiments._summary import format_summary
from fedjax_avail.experiments._sweep import (
    Sweep,
    best_lines,
    criterion,
    programs,
    rescore_sweep,
    run_sweep,
    sweep_settings,
    with_grid,
)
from fedjax_avail.experiments._time_to_accuracy import (
    TIME_TO_ACCURACY_MNIST,
    TIME_TO_ACCURACY_STRAGGLERS_MNIST,
)
from fedjax_avail.experiments._wkafl import (
    WKAFL_MNIST,
    WKAFL_MNIST_ABLATION,
    WKAFL_MNIST_TABLE2,
    WKAFL_MNIST_TABLE3,
)

REGISTRY: dict[str, Experiment | Sweep] = {
    e.name: e
    for e in (
        DEFAULT,
        FEDLAAVG_MNIST,
        FEDLAAVG_MNIST_FIG4,
        FEDLAAVG_MNIST_FIG5_N,
        FEDLAAVG_MNIST_FIG5_BETA,
        FEDLAAVG_SENTIMENT140,
        FEDLAAVG_SENTIMENT140_FIG6,
        FEDLAAVG_SENTIMENT140_FIG7_N,
        FEDLAAVG_SENTIMENT140_FIG7_BETA,
        AVAILABILITY_MNIST,
        AVAILABILITY_SWEEP_MNIST,
        WKAFL_MNIST,
        WKAFL_MNIST_TABLE2,
        WKAFL_MNIST_TABLE3,
        WKAFL_MNIST_ABLATION,
        ASYNC_MNIST,
        TIME_TO_ACCURACY_MNIST,
        TIME_TO_ACCURACY_STRAGGLERS_MNIST,
        SUBTRUNC_MNIST,
        SUBTRUNC_MNIST_LAMBDA,
        SUBTRUNC_MNIST_WINDOW,
        SUBTRUNC_MNIST_PHI,
        SHAKESPEARE,
        SHAKESPEARE_AVAILABILITY,
    )
}


def get(name: str) -> Experiment | Sweep:
    """The registered experiment called ``name``."""
    if name not in REGISTRY:
        raise ValueError(f"no experiment {name!r}; registered: {sorted(REGISTRY)}")
    return REGISTRY[name]


__all__ = [
    "AVAILABILITY_MNIST",
    "AVAILABILITY_SWEEP_MNIST",
    "DEFAULT",
    "DEFAULT_CHECKPOINT_SECONDS",
    "FEDLAAVG_MNIST",
    "REGISTRY",
    "RESUMABLE",
    "Experiment",
    "RunOutcome",
    "Setup",
    "Sweep",
    "best_lines",
    "criterion",
    "dominant_period",
    "compare_runs",
    "format_summary",
    "get",
    "optional",
    "oscillation_amplitude",
    "parse_value",
    "part_settings",
    "Part",
    "Setting",
    "describe_parts",
    "part",
    "plan",
    "read_histories",
    "read_runs",
    "rescore_sweep",
    "run",
    "run_sweep",
    "run_together",
    "programs",
    "program_shape",
    "shared_program",
    "sweep_settings",
    "with_grid",
]
