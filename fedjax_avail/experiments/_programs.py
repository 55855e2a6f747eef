"""Which points of an experiment can share one compiled program, on the runs axis.

Points whose settings differ only in real numbers, whose data, task and rounds are equal, and
whose parts differ only where one program can vary them (real-valued hyperparameters of the
algorithms, the availability parameters a process holds in its state: :mod:`fedjax_avail.runs`)
run as one program (:func:`fedjax_avail.experiments.run_together`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from fedjax_avail.algorithms import Algorithm
from fedjax_avail.availability import AvailabilityProcess
from fedjax_avail.checkpoint import fingerprint
from fedjax_avail.experiments._experiment import Experiment, Setup
from fedjax_avail.runs import check_processes, same, swept_values


class ProgramShape(NamedTuple):
    """What points of an experiment must share to run in one compiled program.

    Attributes:
      settings: the point's settings other than real numbers (``float``), which must be equal.
      rest: a fingerprint of its setup's data, task, rounds and budget, which must be equal.
      algorithms: its algorithms, which may differ in real-valued fields only.
      availability: its availability process, which may differ in its ``run_parameters``.
    """

    settings: dict[str, Any]
    rest: str
    algorithms: dict[str, Algorithm]
    availability: AvailabilityProcess


def fixed_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``config`` that points sharing a program must share: all but the real
    numbers (``float``)."""
    return {k: v for k, v in config.items() if type(v) is not float}


def program_shape(config: Mapping[str, Any], setup: Setup) -> ProgramShape:
    """The :class:`ProgramShape` of a point (its checked ``config`` and its ``setup``)."""
    settings = fixed_settings(config)
    rest = fingerprint(setup._replace(algorithms={}, availability=None, window=0,
                                      window_of=None))
    return ProgramShape(settings, rest, dict(setup.algorithms), setup.availability)


def shared_program(a: ProgramShape, b: ProgramShape) -> str | None:
    """None when points of shapes ``a`` and ``b`` can run in one compiled program (on the runs
    axis, :mod:`fedjax_avail.runs`), else why not, e.g. ``"setting local_steps differs (2, 5)"``.
    """
    for key in dict.fromkeys([*a.settings, *b.settings]):
        if not same(a.settings.get(key), b.settings.get(key)):
            return f"setting {key} differs ({a.settings.get(key)!r}, {b.settings.get(key)!r})"
    if a.rest != b.rest:
        return "their data, task, rounds or budget differ"
    if list(a.algorithms) != list(b.algorithms):
        return f"their algorithms differ ({list(a.algorithms)}, {list(b.algorithms)})"
    try:
        for name in a.algorithms:
            try:
                swept_values([a.algorithms[name], b.algorithms[name]])
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
        check_processes([a.availability, b.availability])
    except ValueError as error:
        return str(error)
    return None


def program_setups(experiment: Experiment, configs: Sequence[dict[str, Any]]) -> list[Setup]:
    """Each point's setup, the first point's data shared by all (one copy in memory).

    Raises:
      ValueError: points that cannot share one program (:func:`shared_program`'s reason).
    """
    setups = [experiment.setup(configs[0])]
    first = program_shape(configs[0], setups[0])
    for config in configs[1:]:
        setup = experiment.setup(config)
        why = shared_program(first, program_shape(config, setup))
        if why is not None:
            raise ValueError(f"these points cannot share one compiled program: {why}")
        setups.append(setup._replace(train=setups[0].train, test=setups[0].test))
    return setups


