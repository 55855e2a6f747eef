"""Benchmark: one SGD step of pfl's CIFAR-10 CNN inside loops on this machine, by pooling.

The shape of the engine's local training on ``peer_comparison.py``'s CIFAR-10 workload: K
clients one after another (``lax.map``), each taking 5 SGD steps on batches of 10 images
``[32, 32, 3]`` (``lax.scan``), pfl's ``simple_cnn`` with ``fa.tasks.conv_general_dilated``;
with ``--devices`` D > 1 (the default: this process's CPU devices, one a core, as
``simulate``'s default mesh uses them, at most K) the clients are split over D devices, each
training its share one client at a time.
Each pooling (``--pools``: ``flax`` is ``nn.max_pool``, ``ours`` is ``fa.tasks.max_pool``) is
compiled once and timed ``--repeats`` times, the variants alternating so a noisy machine's slow
phases fall on all of them; ms a step is the best call over ``K x 5`` steps (compile apart).
``--trace`` also records one call of each under ``jax.profiler`` and lists the compiled
program's operations by their time a step (with their HLO shapes), the breakdown quoted in
``benchmarks/README.md``: an operation's time summed over the devices and divided by the
``K x 5`` steps, so that on D devices the list sums to about D times the (wall) time a step;
operations also run concurrently on the cores, so it sums to more than that.

Usage::

    python benchmarks/profile_cnn_step.py [--clients 8] [--devices D] [--repeats 8]
        [--trace 25] [--out benchmarks/results/profile_cnn_step.json]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from _common import hlo_operations, machine_info, traced_operations, write_json  # noqa: I001 (benchmarks/ is on sys.path)
from flax import linen as nn
from peer_comparison import PflSimpleCNN
from peers import cifar10_shape

import fedjax_avail as fa

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "profile_cnn_step.json"
POOLS = {"flax": nn.max_pool, "ours": fa.tasks.max_pool}
STEPS = cifar10_shape.LOCAL_STEPS


def local_training(pool: Any, clients: int, devices: int = 1,
                   conv: Any = fa.tasks.conv_general_dilated) -> tuple[Any, tuple]:
    """The compiled program (``clients`` x ``STEPS`` SGD steps of a model whose pooling is
    ``pool`` and whose convolutions are ``conv``) and its arguments; with
    ``devices`` > 1 the clients are split over that many devices (each trains its share one
    client at a time), as ``simulate``'s default mesh splits a CPU cohort over the cores
    (``fa.cohort.map_cohort`` under ``fa.mesh.cohort_mesh(devices)``)."""
    model = PflSimpleCNN(pool=pool, conv=conv)
    key = jax.random.PRNGKey(0)
    params = model.init(key, jnp.zeros((1, *cifar10_shape.IMAGE_SHAPE)))
    x = jax.random.normal(key, (clients, STEPS, cifar10_shape.BATCH_SIZE,
                                *cifar10_shape.IMAGE_SHAPE))
    y = jax.random.randint(key, x.shape[:3], 0, cifar10_shape.NUM_CLASSES)

    def loss(p, images, labels):
        logits = jax.nn.log_softmax(model.apply(p, images))
        return -jnp.mean(jnp.take_along_axis(logits, labels[:, None], 1))

    def client(images, labels):
        def step(p, batch):
            grads = jax.grad(loss)(p, *batch)
            return jax.tree.map(lambda v, g: v - cifar10_shape.CLIENT_LR * g, p, grads), None
        return jax.lax.scan(step, params, (images, labels))[0]

    if devices > 1:
        with fa.mesh.mesh_context(fa.mesh.cohort_mesh(devices)):
            program = jax.jit(lambda x, y: fa.cohort.map_cohort(client, x, y, chunk=1))
            return program.lower(x, y).compile(), (x, y)
    program = jax.jit(lambda x, y: jax.lax.map(lambda a: client(*a), (x, y)))
    return program.lower(x, y).compile(), (x, y)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--devices", type=int, default=None,
                        help="CPU devices the clients are split over (default: all, at most "
                        "--clients)")
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--pools", default="flax,ours")
    parser.add_argument("--trace", type=int, default=0, help="operations to list (0: no trace)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for name in ("clients", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    cpus = len(jax.devices("cpu"))
    if args.devices is None:
        args.devices = min(cpus, args.clients)
    if not 1 <= args.devices <= min(cpus, args.clients):
        parser.error(f"--devices must be in 1..{min(cpus, args.clients)} (this process's "
                     f"{cpus} CPU devices, at most --clients), got {args.devices}")
    unknown = set(args.pools.split(",")) - set(POOLS)
    if unknown:
        parser.error(f"--pools: {sorted(unknown)} not among {sorted(POOLS)}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    steps = args.clients * STEPS
    programs, rows = {}, {}
    for name in args.pools.split(","):
        start = time.perf_counter()
        compiled, inputs = local_training(POOLS[name], args.clients, args.devices)
        jax.block_until_ready(compiled(*inputs))
        programs[name] = (compiled, inputs)
        rows[name] = {"compile_and_first_call_s": time.perf_counter() - start, "calls_s": []}
    for _ in range(args.repeats):
        for name, (compiled, inputs) in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(*inputs))
            rows[name]["calls_s"].append(time.perf_counter() - start)
    for name, row in rows.items():
        row["ms_per_step"] = min(row["calls_s"]) / steps * 1e3
        print(f"{name}: {row['ms_per_step']:.2f} ms a step (best of {args.repeats})", flush=True)
        if args.trace:
            compiled, inputs = programs[name]
            profile = traced_operations(functools.partial(compiled, *inputs),
                                        hlo_operations(compiled.as_text()), steps, args.trace)
            row["operations"] = [{"op": op["op"], "hlo": op["hlo"], "ms_per_step": op["ms"]}
                                 for op in profile["operations"]]
            for op in row["operations"]:
                print(f"  {op['ms_per_step']:6.2f} ms  {op['op']:32s} {op['hlo']}")
    payload = {"benchmark": "profile_cnn_step", "date": datetime.datetime.now(
        datetime.timezone.utc).isoformat(timespec="seconds"), "machine": machine_info(),
        "clients": args.clients, "devices": args.devices, "steps_per_client": STEPS,
        "batch_size": cifar10_shape.BATCH_SIZE, "repeats": args.repeats, "results": rows}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
