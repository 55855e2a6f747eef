"""Asynchronous servers on the one clock: `async-mnist` (FedBuff, FedAsync, FedAvg under
log-normal job times and Markov availability) and `time-to-accuracy-mnist` (five algorithms
under one diurnal process and one speed model), from `docs/results/`. One seed each."""

from __future__ import annotations

from common import histories, num, row, summary, table

ASYNC = {"fedavg": "FedAvg (each round waits for its slowest client)",
         "fedbuff": "FedBuff (K = 10 of M = 100 jobs)",
         "fedasync": "FedAsync (10,000 updates: the same client work)"}
TIME_TO = {"fedavg": "FedAvg (waits for the slowest of K)",
           "divfl": "DivFL (FedAvg + DivFL selection)", "fedlaavg": "FedLaAvg",
           "fedbuff": "FedBuff (K = 10 of M = 100)",
           "wkafl": "WKAFL (K = 10 gradients of M = 100 jobs)"}


def async_mnist() -> str:
    """Final accuracy, the virtual time the run took, staleness."""
    rows = summary("async-mnist")
    runs = histories("async-mnist")
    body = []
    for a, name in ASYNC.items():
        r, last = row(rows, algorithm=a), runs[a, 0][-1]
        staleness = last["staleness_mean"] if last["staleness_mean"] == last[
            "staleness_mean"] else 0.0
        body.append([name, f"{r['rounds_done']:,}", num(r["final_test_accuracy"], 3),
                     num(last["virtual_time"], 0), num(staleness, 1)])
    return table(["", "rounds / updates", "final test accuracy", "virtual time at the end",
                  "mean staleness (last evaluation window)"], body)


def time_to_accuracy() -> str:
    """Virtual time to 85% and 90% test accuracy within a budget of 3000 units."""
    rows = summary("time-to-accuracy-mnist")
    body = []
    for a, name in TIME_TO.items():
        r = row(rows, algorithm=a)
        body.append([name, f"{r['rounds_done']:,}", num(r["time_to_85"], 0),
                     num(r["time_to_90"], 0), num(r["final_test_accuracy"], 3)])
    return table(["", "rounds / updates in the budget", "virtual time to 85%", "to 90%",
                  "test accuracy at the end"], body)
