"""The public names of DESIGN.md section 3 exist and are what they say."""

import dataclasses

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
