"""Benchmark: a CPU convolution's windows a group of images at a time against one product.

What ``fedjax_avail.tasks._conv.GROUP_BYTES`` (the windows a group of images may take) is
chosen from. Side by side in one process, each setting a fresh program:

* training: ``profile_cnn_step.py``'s local training of pfl's CIFAR-10 CNN (``--clients`` x 5
  SGD steps of 10 images) split over a device per core (``simulate``'s default CPU mesh), its
  second convolution's windows built for the whole batch in one product and for groups of 5, 2
  and 1 images; and on one device, where a gradient is one product's whatever the budget, that
  against the gradient forced into groups of 1 ("groups of 1, gradient too"); ms a step (the
  best call's time over all steps);
* evaluation: ``fa.evaluation.make_evaluator`` (blocks of 4,096 examples) of LeNet-5 and WKAFL's
  CNN on 10,000 MNIST-shaped images and of pfl's CNN on 5,000 CIFAR-10-shaped ones, with the
  default budget and with one product a block; s a call (best), and the values of both.

Usage::

    python benchmarks/conv_groups.py [--clients 8] [--repeats 4] [--out results/conv_groups.json]
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from _common import best_seconds, machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)
from peer_comparison import PflSimpleCNN
from profile_cnn_step import STEPS, local_training

import fedjax_avail as fa
from fedjax_avail.tasks import _conv

OUT = Path(__file__).resolve().parent / "results" / "conv_groups.json"
ONE_PRODUCT = 2**62  # a budget every batch's windows fit in
PFL_CONV2_IMAGE = 28 * 28 * 3 * 3 * 32 * 4  # one image's windows in pfl's second convolution
TRAINING = {"one product": ONE_PRODUCT, "groups of 5": 5 * PFL_CONV2_IMAGE,
            "groups of 2": 2 * PFL_CONV2_IMAGE, "groups of 1": PFL_CONV2_IMAGE}
# on one device a gradient is one product's whatever the budget; forced to the groups there
# (_conv._per_core) as under a mesh
FORCED = "groups of 1, gradient too"
ONE_DEVICE = {"one product": ONE_PRODUCT, FORCED: PFL_CONV2_IMAGE}
EVALUATION = {"default": _conv.GROUP_BYTES, "one product": ONE_PRODUCT}


def _evaluation_tasks() -> dict[str, tuple[Any, dict[str, np.ndarray]]]:
    """Each model's task builder (a fresh task a setting: evaluators are shared per task)
    and its data."""
    rng = np.random.default_rng(0)
    mnist = {"x": rng.integers(0, 256, (10_000, 28, 28, 1)).astype(np.uint8),
             "y": rng.integers(0, 10, 10_000).astype(np.int32)}
    cifar = {"x": rng.standard_normal((5_000, 32, 32, 3)).astype(np.float32),
             "y": rng.integers(0, 10, 5_000).astype(np.int32)}
    return {"lenet5": (lambda: fa.tasks.lenet5((28, 28, 1)), mnist),
            "wkafl_cnn": (lambda: fa.tasks.cnn((28, 28, 1)), mnist),
            "pfl_cnn": (lambda: fa.tasks.classification(PflSimpleCNN(), (32, 32, 3)), cifar)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    for name in ("clients", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    default, per_core = _conv.GROUP_BYTES, _conv._per_core
    training, evaluation = [], []
    payload = {"benchmark": "conv_groups", "date": datetime.datetime.now(
        datetime.timezone.utc).isoformat(timespec="seconds"), "machine": machine_info(),
        "group_bytes": default, "clients": args.clients, "steps_per_client": STEPS,
        "training": training, "evaluation": evaluation}
    try:
        programs = {}
        layouts = {"one device": 1, "a device per core": fa.mesh.cpu_cores()}
        for layout, devices in layouts.items():
            settings = ONE_DEVICE if devices == 1 else TRAINING
            for name, budget in settings.items():
                _conv.GROUP_BYTES = budget
                _conv._per_core = (lambda: True) if name == FORCED else per_core
                programs[layout, name] = local_training(fa.tasks.max_pool, args.clients,
                                                        min(devices, jax.device_count()))
                jax.block_until_ready(programs[layout, name][0](*programs[layout, name][1]))
                _conv._per_core = per_core
        times = {key: [] for key in programs}
        for _ in range(args.repeats):  # alternating, so slow phases fall on every setting
            for key, (compiled, inputs) in programs.items():
                start = time.perf_counter()
                jax.block_until_ready(compiled(*inputs))
                times[key].append(time.perf_counter() - start)
        for (layout, name), calls in times.items():
            ms = 1e3 * min(calls) / (args.clients * STEPS)
            training.append({"layout": layout, "devices": layouts[layout], "setting": name,
                             "group_bytes": {**TRAINING, **ONE_DEVICE}[name],
                             "ms_per_step": ms,
                             "over_one_product": min(calls) / min(times[layout, "one product"])})
            print(f"training, pfl's CNN, {layout:17s} {name:12s} {ms:7.2f} ms a step "
                  f"({training[-1]['over_one_product']:.2f}x)", flush=True)
        for model, (build, arrays) in _evaluation_tasks().items():
            rows = {}
            for name, budget in EVALUATION.items():
                _conv.GROUP_BYTES = budget
                task = build()
                params = task.init(jax.random.PRNGKey(0))
                evaluator = fa.evaluation.make_evaluator(task, arrays)
                seconds = best_seconds(evaluator, params, args.repeats)
                rows[name] = {"model": model, "setting": name, "group_bytes": budget,
                              "s_per_call": seconds, "values": {
                                  k: float(v) for k, v in evaluator(params).items()}}
            for row in rows.values():
                row["over_one_product"] = row["s_per_call"] / rows["one product"]["s_per_call"]
                print(f"evaluation, {model:9s} {row['setting']:12s} {row['s_per_call']:7.3f} s "
                      f"({row['over_one_product']:.2f}x) {row['values']}", flush=True)
            evaluation.extend(rows.values())
            write_json(args.out, payload)
    finally:
        _conv.GROUP_BYTES, _conv._per_core = default, per_core
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
