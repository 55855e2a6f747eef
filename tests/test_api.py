"""The public names of DESIGN.md section 3 exist and are what they say."""

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import fedjax_avail as fa


def test_contract_names_exist():
    for name in ("FederatedData", "Task", "simulate", "tasks", "availability", "algorithms"):
        assert hasattr(fa, name), name
    assert callable(fa.tasks.logistic_regression)
    for name in ("AlwaysOn", "Bernoulli", "Periodic", "Trace", "diurnal", "sample"):
        assert hasattr(fa.availability, name), name
    for name in ("FedAvg", "FedSGD", "FedProx", "FedLaAvg", "FedAdam", "SequentialSGD"):
        assert hasattr(fa.algorithms, name), name


def test_algorithms_are_frozen_dataclasses_with_contract_arguments():
    alg = fa.algorithms.FedAvg(clients_per_round=3, local_steps=2, batch_size=4, client_lr=0.1,
                               server_lr=1.0)
    assert dataclasses.is_dataclass(alg)
    try:
        alg.local_steps = 5
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("algorithms must be frozen")
    fa.algorithms.FedLaAvg(clients_per_round=3, local_steps=2, batch_size=4, client_lr=0.1)


def test_private_modules_are_not_exported():
    for module in (fa.algorithms, fa.availability, fa.data, fa.tasks, fa.selection):
        assert not [n for n in module.__all__ if n.startswith("_")]


def test_the_guides_simulate_signature_is_the_functions():
    """docs/guide/use.md spells out ``fa.simulate(...)``: its parameters, their order, the
    keyword-only marker and every default as the function has them."""
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "use.md").read_text()
    shown = re.search(r"`fa\.simulate\((task, .*?)\)`", guide, re.S).group(1)
    documented = ast.parse(f"def simulate({shown}): pass").body[0].args
    names = [a.arg for a in documented.args]
    defaults = dict(zip(names[len(names) - len(documented.defaults):],
                        map(ast.literal_eval, documented.defaults), strict=True))
    defaults.update({a.arg: ast.literal_eval(d) for a, d in
                     zip(documented.kwonlyargs, documented.kw_defaults, strict=True)})
    actual = inspect.signature(fa.simulate).parameters.values()
    keyword = inspect.Parameter.KEYWORD_ONLY
    assert names == [p.name for p in actual if p.kind != keyword]
    assert [a.arg for a in documented.kwonlyargs] == [p.name for p in actual if p.kind == keyword]
    assert defaults == {p.name: p.default for p in actual if p.default is not p.empty}
