"""The speed figures the README and the guides quote, from `benchmarks/results/*.json`."""

from __future__ import annotations

import json
from statistics import median

from common import BENCHMARKS, GPU_BY_DATE, table


def _load(name: str) -> dict:
    return json.loads((BENCHMARKS / name).read_text())


def _ms(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 1 else f"{seconds * 1e3:.3g} ms"


def _machine(d: dict) -> str:
    m = d["machine"]
    if m["jax_backend"] == "gpu":
        where = m.get("jax_device_kind") or GPU_BY_DATE[d["date"][:10]]
    else:  # the model where the run recorded it (benchmarks/_common.cpu_model)
        model = (m.get("cpu_model") or "CPU").replace("(R)", "").replace("(TM)", "")
        model = model.removesuffix(" Processor").strip()
        names = {"avx512f": "AVX-512", "amx_tile": "AMX"}
        found = m.get("cpu_vector_extensions", ())
        extensions = ", ".join(names[e] for e in found if e in names) or (
            "AVX2 only" if "avx2" in found else "")
        where = f"{m['cpu_count']}-core {model}" + (f" ({extensions})" if extensions else "")
    return f"{where}, JAX {m['jax_version']}, {d['date'][:10]}"


def _times(ratio: float) -> str:
    return f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.3g}x"


def _relation(ours: float, peer: float) -> str:
    return f"ours {peer / ours:.2f}x faster" if ours < peer else f"ours {ours / peer:.2f}x slower"


def _versus_pfl(shape: dict, d: dict) -> str:
    """Ours with ``simulate``'s defaults (and our best layout) against pfl on its CIFAR-10
    shape (CPU)."""
    pfl = shape["pfl"]["s_per_round"]
    best = min(shape[k]["s_per_round"] for k in shape
               if k.startswith("ours") and isinstance(shape[k], dict)
               and shape[k].get("s_per_round"))
    default = shape["ours_default"]["s_per_round"]
    pairs = shape["ratios"].get("pfl_over_ours_default_each_pair")
    if pairs:  # alternating runs of each: the median run of each, the median pair's ratio
        ratio = shape["ratios"]["pfl_over_ours_default"]
        return (f"{default:.3g} s / {pfl:.3g} s (simulate's defaults; medians of {len(pairs)} "
                f"alternating runs; {_relation(1.0, ratio)}, the median of the pairs "
                f"{', '.join(f'{r:.2f}x' for r in pairs)}; our best layout {best:.3g} s; "
                f"{_machine(d)})")
    return (f"{default:.3g} s / {pfl:.3g} s (simulate's defaults; {_relation(default, pfl)}; "
            f"our best layout {best:.3g} s; {_machine(d)})")


def speed_headline() -> str:
    """Ours against the peers and the runs axis, measured side by side on each machine."""
    gpu, cpu = _load("gpu/peer_comparison_gpu.json"), _load("peer_comparison.json")
    gpu_pfl = _load("gpu/peer_comparison_gpu_pfl.json")
    # other 2-core machines' runs
    other_cpus = [_load(f"peer_comparison_{name}.json") for name in ("intel_xeon", "amd_avx2")]
    cpu_pfl = cpu if cpu.get("cifar10_shape") else _load("peer_comparison_pfl.json")
    axis_gpu, axis_cpu = _load("gpu/run_axis_gpu.json"), _load("run_axis.json")

    def versus(d: dict, peer: str, ours: str = "ours") -> str:
        if not d.get(peer) or d[peer].get("s_per_round") is None:
            return "not run"
        ratio = d[peer]["s_per_round"] / d[ours]["s_per_round"]
        return f"{_ms(d[peer]['s_per_round'])} ({_times(ratio)} ours)"

    cpu_ours = "ours"  # simulate's defaults: the cohort over the cores
    one_gpu = {r["seeds"]: r for r in axis_gpu["rows"] if r["setting"] == "fedlaavg-mnist"}
    loop = {r["case"]: r for r in axis_cpu["rows"] if r["algorithm"] == "fedlaavg"}
    g_shape, c_shape = gpu_pfl["cifar10_shape"], cpu_pfl["cifar10_shape"]
    rows = [
        ["FedAvg on FedLaAvg's MNIST setting (N = 1000, K = 100): ours, per round",
         _ms(gpu["ours"]["s_per_round"]),
         f"{_ms(cpu['ours']['s_per_round'])} (the default: the cohort over "
         f"{cpu['ours']['devices']} cores; {_ms(cpu['ours_one_device']['s_per_round'])} on "
         "one device)"],
        ["FedJAX 0.0.17, same setting and machine", versus(gpu, "fedjax"),
         versus(cpu, "fedjax", cpu_ours)],
        ["a per-client jitted loop", versus(gpu, "loop"), versus(cpu, "loop", cpu_ours)],
        ["Flower", versus(gpu, "flower"), versus(cpu, "flower", cpu_ours)],
        ["pfl-research 0.6 (PyTorch)", f"{versus(gpu_pfl, 'pfl')} ({_machine(gpu_pfl)})",
         versus(cpu, "pfl", cpu_ours)],
        ["pfl-research's CIFAR-10 shape (its `simple_cnn`, cohort 50): ours / pfl per round",
         f"{g_shape['ours']['s_per_round']:.3g} s / {g_shape['pfl']['s_per_round']:.3g} s "
         f"(ours {_times(g_shape['ratios']['pfl_over_ours'])} faster; {_machine(gpu_pfl)})",
         _versus_pfl(c_shape, cpu_pfl)],
        *(["the same on another 2-core CPU", "-", _versus_pfl(other["cifar10_shape"], other)]
          for other in other_cpus),
        ["8 seeds of `fedlaavg-mnist` in one program: wall time against one seed",
         f"{one_gpu[8]['wall_s'] / one_gpu[1]['wall_s']:.2f}x ({_machine(axis_gpu)})",
         f"{loop['8 seeds, loop']['x_one_seed_wall']:.2f}x ({_machine(axis_cpu)})"],
        ["the cells that name no machine: measured on", _machine(gpu), _machine(cpu)],
    ]
    return table(["", "GPU", "CPU"], rows)


def compile_cache() -> str:
    """The persistent compilation cache: a second run of the same setting."""
    d = _load("compile_cache.json")
    r = d["results"]
    cli = r["cli"]
    first = median(x["compile_s"] for x in cli["first"])
    second = median(x["compile_s"] for x in cli["second"])
    return (f"A second run of the same setting compiles {cli['compile_s_first_over_second']:.1f}x "
            f"less (`python benchmarks/compile_cache.py`, the default run's median compile time "
            f"{first:.1f} s to {second:.1f} s, wall time {cli['wall_s_first_over_second']:.1f}x "
            f"less; the quickstart notebook cell's compile time "
            f"{r['notebook']['compile_s_first_over_second']:.1f}x less; {_machine(d)}).")


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB" if n >= 1e9 else f"{n / 1e6:.3g} MB"


def _memory(r: dict) -> str:
    return f"{_gb(r['measured_bytes'])} ({r['measured_bytes'] / r['estimated_bytes']:.3f})"


def scaling_n() -> str:
    """Time per round and memory against N, CPU and GPU (`benchmarks/scaling.py`)."""
    cpu = _load("scaling.json")
    gpu = {a: _load(f"gpu/scaling_gpu_n_{a}.json") for a in ("fedavg", "fedlaavg")}
    body = []
    for r in (r for r in cpu["rows"] if r["part"] == "n"):
        g = next((x for x in gpu[r["algorithm"]]["rows"]
                  if x["num_clients"] == r["num_clients"]), None)
        body.append([r["algorithm"], f"10^{len(str(r['num_clients'])) - 1}",
                     r["table_dtype"] or "-", str(r.get("devices", "-")), _ms(r["s_per_round"]),
                     _memory(r),
                     _ms(g["s_per_round"]) if g else "-",
                     _memory(g) + (f", {g['table_dtype']} table" if g["table_dtype"]
                                   != r["table_dtype"] else "") if g else "-"])
    for a, d in gpu.items():  # the GPU's larger N (the CPU's rows stop at 10^6)
        for g in d["rows"]:
            if g["num_clients"] > 10**6:
                body.append([a, f"10^{len(str(g['num_clients'])) - 1}", g["table_dtype"] or "-",
                             "-", "-", "-", _ms(g["s_per_round"]), _memory(g)])
    return (table(["algorithm", "N", "table", "CPU devices", "CPU per round", "CPU memory "
                   "(measured / `estimate_memory`)", "GPU per round",
                   "GPU memory (measured / estimate)"], body)
            + f"\n\nMNIST logistic regression, K = 100, C = 10, B = 5. CPU: `simulate`'s "
            f"default `mesh=\"auto\"`, the cohort over the CPU devices (one a core), each "
            f"holding a copy of the state (the memory is their total), or one device where "
            f"that would not fit; {_machine(cpu)}; GPU: {_machine(gpu['fedavg'])}.")


def cohort_chunks() -> str:
    """A cohort of K clients in one `vmap` and in `client_chunk="auto"` chunks (CPU)."""
    d = _load("cohort_chunks.json")
    body = [[r["task"], str(r["k"]), str(r["auto_chunk"] or "one vmap"),
             _ms(r["vmap_s_per_round"]), _ms(r["auto_s_per_round"]),
             f"{r['vmap_over_first_k']:.1f}x", f"{r['auto_over_first_k']:.1f}x"]
            for r in d["rows"]]
    return (table(["task", "K", "auto chunk", "one vmap, per round", "auto, per round",
                   "one vmap / K = 10", "auto / K = 10"], body)
            + f"\n\nN = 10^4, C = 10, B = 5; {_machine(d)}.")


def chunk_budget() -> str:
    """A CPU round's time by cohort chunk, over the cores and on one device (`CPU_CHUNK_BYTES`)."""
    d = _load("chunk_budget.json")
    groups: dict[tuple, list[dict]] = {}
    for r in d["rows"]:
        groups.setdefault((r["task"], r["k"], r["layout"]), []).append(r)
    body = []
    for (task, k, _), rows in groups.items():
        count = rows[0]["devices"]
        explicit = [r for r in rows if r["client_chunk"] != "auto"]
        auto = next(r for r in rows if r["client_chunk"] == "auto")
        body.append([task, str(k), str(count),
                     ", ".join(f"{r['client_chunk']}: {_ms(r['s_per_round'])}" for r in explicit),
                     f"{auto['members_at_once'] or 'one vmap'}: {_ms(auto['s_per_round'])}"])
    return (table(["task", "K", "devices", "per round, by members a chunk",
                   '`"auto"`: its chunk, per round'], body)
            + f"\n\nFedAvg, N = 10^4, C = 10, B = 5, {d['settings']['rounds']} rounds (K = 1000 "
            f"and the MLP a quarter), best of {d['settings']['repeats']}; "
            f"`python benchmarks/chunk_budget.py`; {_machine(d)}.")


def conv_groups() -> str:
    """A CPU convolution's windows by group of images, training and evaluating (`GROUP_BYTES`),
    on the machine the budget was chosen on and, training only, on a second one."""
    d = _load("conv_groups.json")
    runs = [(d, ""), (_load("conv_groups_intel_xeon.json"), "B")]
    body = []
    for run, mark in runs:
        layouts: dict[str, list[dict]] = {}
        for r in run["training"]:
            layouts.setdefault(r["layout"], []).append(r)
        body += [[f"training pfl's CNN, {layout} ({rows[0]['devices']})"
                  + (f", machine {mark}" if mark else ""),
                  ", ".join(f"{r['setting']}: {r['ms_per_step']:.2f} ms "
                            f"({r['over_one_product']:.2f}x)" for r in rows)]
                 for layout, rows in layouts.items()]
    plain = {r["model"]: r for r in d["evaluation"] if r["setting"] == "one product"}
    for r in d["evaluation"]:
        if r["setting"] == "default":
            same = "same" if r["values"] == plain[r["model"]]["values"] else "other"
            body.append([f"evaluating {r['model']}, one device",
                         f"default: {r['s_per_call']:.3g} s ({r['over_one_product']:.2f}x; "
                         f"{same} loss and accuracy)"])
    return (table(["workload (devices)", "time by windows a group (over one product)"], body)
            + "\n\nTraining: ms a step of 10 images (the best call); evaluation: 10,000 "
            "MNIST-shaped or 5,000 CIFAR-10-shaped images in blocks of 4,096, the default "
            "budget against one product a block; "
            f"`python benchmarks/conv_groups.py`; {_machine(d)}; machine B (training rows "
            f"marked so, `results/conv_groups_intel_xeon.json`): {_machine(runs[1][0])}.")


def devices() -> str:
    """`--devices D` (`cohort_mesh(D)`) against one device, with each `client_chunk`."""
    d = _load("cohort_mesh_chunks.json")
    r = d["results"]
    body = [[k.split()[0].split("=")[1], k.split()[1].split("=")[1],
             _ms(v["s_per_round_min"]), f"{v['max_abs_difference']:.2g}"] for k, v in r.items()]
    return (table(["devices", "client_chunk", "per round (best of repeats)",
                   "largest difference to one device"], body)
            + f"\n\n`python benchmarks/cohort_mesh_chunks.py`; {_machine(d)}.")


def cpu_cores() -> str:
    """One run's cohort on one CPU device against over every core, by K (the "auto" rule)."""
    d = _load("cpu_cores.json")
    body = [[r["algorithm"], str(r["k"]), _ms(r["one_device_s_per_round"]),
             _ms(r["cores_s_per_round"]), f"{r['speedup']:.2f}x",
             "cores" if r["auto_picks_cores"] else "one device"] for r in d["rows"]]
    return (table(["algorithm", "K", "one device, per round", f"{d['devices']} cores, per round",
                   "speedup", '`mesh="auto"` picks'], body)
            + f"\n\nFedLaAvg's MNIST setting, {d['rounds']} rounds, best of {d['repeats']}; "
            f"`python benchmarks/cpu_cores.py`; {_machine(d)}.")


def run_axis_cpu() -> str:
    """8 seeds in one call, by layout, against one seed and a loop of 8 calls (CPU)."""
    d = _load("run_axis.json")
    body = [[r["algorithm"], r["case"], f"{r['wall_s']:.1f} s", f"{r['x_one_seed_wall']:.2f}x",
             f"{r['x_loop_wall']:.2f}x"] for r in d["rows"]]
    return (table(["algorithm", "case", "wall time", "x one seed", "x a loop of calls"], body)
            + f"\n\n{d['rounds']} rounds of FedLaAvg's MNIST setting; {_machine(d)}.")


def async_scaling() -> str:
    """Asynchronous updates per second against N (`benchmarks/async_scaling.py`)."""
    d = _load("async_scaling.json")
    body = [[r["algorithm"], f"10^{len(str(r['num_clients'])) - 1}", str(r["k"]),
             f"{r['updates_per_s']:,.0f}", _gb(r["measured_bytes"])] for r in d["rows"]]
    return (table(["algorithm", "N", "K", "updates / s", "measured memory"], body)
            + f"\n\n{_machine(d)}.")


def selection_scaling() -> str:
    """A round's time by selection strategy against N (`benchmarks/selection_scaling.py`)."""
    d = _load("selection_scaling.json")
    body = [[r["strategy"], f"10^{len(str(r['num_clients'])) - 1}", _ms(r["s_per_round"]),
             _ms(r["selection_s"]), f"{r['prepare_s']:.3g} s"] for r in d["rows"]]
    return (table(["strategy", "N", "per round", "of which selection", "one-off pass"], body)
            + f"\n\n{_machine(d)}.")


def availability_overhead() -> str:
    """What each availability process adds to a FedAvg round at N = 10^5."""
    d = _load("availability_overhead.json")
    body = [[name, _ms(r["s_per_round_median"]), f"{100 * r['overhead']:+.1f}%",
             "yes" if r["target_met"] else "no"] for name, r in d["results"].items()]
    d = {**d, "date": d["date_utc"]}
    return (table(["process", "per round (median)", "overhead over AlwaysOn",
                   f"within {100 * d['target_overhead']:.0f}%"], body)
            + f"\n\n{d['setting']['algorithm']}, N = {d['setting']['num_clients']:,}; "
            f"{_machine(d)}.")


def fedlaavg_end_to_end() -> str:
    """`fedlaavg-mnist` end to end against a per-client loop (`benchmarks/fedlaavg_mnist.py`)."""
    d = _load("fedlaavg_mnist.json")
    v, ref = d["vectorised"], d["reference"]
    return table(["", "per round", "whole run"], [
        ["ours, `fa.simulate`", _ms(v["s_per_round"]),
         f"{v['total_s']:.1f} s for {v['rounds']} rounds and {v['num_evaluations']} "
         f"evaluations (compile {v['compile_s']:.1f} s)"],
        ["a per-client jitted loop", _ms(ref["s_per_round"]),
         f"{d['speedup_per_round']:.1f}x ours per round"],
    ]) + f"\n\n{_machine(d)}."


def sweep_programs() -> str:
    """A 4-point lr sweep as one program against one program per point."""
    d = _load("sweep_programs.json")
    b = d["best_seconds"]
    setting = d["setting"]
    return (f"A {len(setting['lr'].split(','))}-point `lr` sweep of `{setting['experiment']}` "
            f"({setting['rounds']} rounds) took {b['together']:.1f} s as one program and "
            f"{b['separate']:.1f} s as one program per point ({d['separate_over_together']:.2f}x), "
            f"with {'identical' if d['same_metrics'] else 'different'} metrics "
            f"(`python benchmarks/sweep_programs.py`; {_machine(d)}).")


def before_after() -> str:
    """Every committed `benchmarks/before_after.py` comparison: time after / before a change."""
    body = []
    for path in sorted(BENCHMARKS.glob("before_after_*.json")):
        d = json.loads(path.read_text())
        for name, r in d["results"].items():
            same = r.get("final_models_identical")
            before = d["ref_commit"][:7] if d.get("ref_commit") else d["ref"]
            body.append([f"`{path.name}`", d["date"][:10], f"`{before}`", name,
                         f"{r['ratio_after_over_before']:.3f}",
                         "-" if same is None else "yes" if same else "no"])
    return table(["file", "date", "before (`--ref`)", "setting", "time after / before",
                  "same final model"], body)


def xla_cpu_options() -> str:
    """Time per round under each XLA:CPU option (`benchmarks/xla_cpu_options.py`)."""
    d = _load("xla_cpu_options.json")
    names = ("fedavg", "fedlaavg", "sequential")
    body = [[option, *(f"{r[a]['ms_per_round']:.1f} ms" for a in names)]
            for option, r in d["results"].items()]
    return table(["XLA:CPU option", *names], body) + f"\n\n{_machine(d)}."


def xla_cpu_options_cnn() -> str:
    """A CNN's local step under XLA:CPU's convolution options, our convolutions against XLA's
    (`benchmarks/xla_cpu_options.py --workload cnn`)."""
    d = _load("xla_cpu_options_cnn.json")
    first: dict[tuple[str, str], str] = {}  # (convolution, program) -> the first option's name

    def cell(option: str, r: dict, conv: str) -> str:
        if conv not in r:
            return "failed"
        time = f"{r[conv]['ms_per_step']:.1f} ms"
        same = first.setdefault((conv, r[conv]["program"]), option)
        if r[conv]["program"] is not None and same != option:
            return f"{time} (the program of \"{same.split(' (')[0]}\")"
        fused = ", ".join(f"{n} {kind.strip('_').removesuffix('_fusion')}"
                          for kind, n in sorted(r[conv]["library_fusions"].items()))
        convs = r[conv]["convolutions"]
        where = (f"; convolutions: {convs['library']} in them, {convs['xla']} XLA's"
                 if convs["library"] + convs["xla"] else "")
        return f"{time} ({fused or 'no library fusions'}{where})"

    body = [[option, cell(option, r, "ours"), cell(option, r, "xla")]
            for option, r in d["results"].items()]
    return (table(["XLA:CPU option", "ours (matrix products)", "XLA's convolutions"], body)
            + f"\n\nA step of pfl's CIFAR-10 CNN, {d['clients']} clients x "
            f"{d['steps_per_client']} steps of {d['batch_size']} images split over the CPU "
            f"devices, median over {d['repeats']} processes of the best call; in brackets, the "
            "compiled program's library fusions and where its convolutions run, or the option "
            f"whose program it is; {_machine(d)}.")


def dry_run_seconds() -> str:
    """Dry runs of documented sweeps, this tree against a revision (`dry_run_seconds.py`)."""
    d = _load("dry_run_seconds.json")
    body = [[f"`{r['command']}`", _ms(r["median_s"]["this tree"]), _ms(r["median_s"][d["ref"]]),
             f"{r['this_over_ref']:.2f}x"] for r in d["rows"]]
    return (table(["dry run", "this tree", f"`{d['ref']}`", "ratio"], body)
            + f"\n\nMedians of {d['repeats']} processes each, alternating; {_machine(d)}.")


def same_numbers() -> str:
    """Which settings give bit-identical results before and after a change."""
    d = _load("same_numbers.json")
    reasons = sorted({why for whys in d["differ"].values() for why in whys})
    differ = (f"{len(d['differ'])} differ ({', '.join(d['differ'])}), in: "
              f"{'; '.join(reasons)}" if d["differ"] else "none differs")
    return (f"Against `{d['ref']}` ({d['date']}): {len(d['same'])} settings identical "
            f"({', '.join(d['same'])}); {differ}.")


def profile_cnn_step() -> str:
    """Where a CNN local step's time goes on a CPU (`benchmarks/profile_cnn_step.py`)."""
    d = _load("profile_cnn_step.json")
    body = [[variant, f"{r['ms_per_step']:.2f} ms",
             ", ".join(f"{o['hlo'].split('{')[0]} {o['ms_per_step']:.2f} ms"
                       for o in r["operations"][:3])]
            for variant, r in d["results"].items()]
    devices = d.get("devices", 1)  # runs before 2026-11-29 trained on one device
    split = (f", split over {devices} CPU devices (operation times summed over them)"
             if devices > 1 else ", on one device")
    return (table(["variant", "per local step", "the three costliest operations"], body)
            + f"\n\n{d['clients']} clients x {d['steps_per_client']} steps of batch "
            f"{d['batch_size']}{split}; {_machine(d)}.")
