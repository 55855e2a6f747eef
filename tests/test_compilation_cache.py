"""The persistent compilation cache (issue 17): a second process loads the compiled programs
the first one wrote, and its numbers are bit-identical."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import fedjax_avail as fa
from fedjax_avail import compilation_cache

RUN = textwrap.dedent("""
    import json, sys
    import jax
    import fedjax_avail as fa
    events = []
    jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
    fa.enable_compilation_cache(sys.argv[1])
    train, test = fa.data.load_digits()
    fd = fa.data.one_label_per_client(train["x"], train["y"], 20, seed=0)
    alg = fa.algorithms.FedAvg(clients_per_round=4, local_steps=2, batch_size=4, client_lr=0.1)
    result = fa.simulate(fa.tasks.logistic_regression(64, 10), fd, alg,
                         fa.availability.Bernoulli(0.5), rounds=6, eval_every=3, test_data=test)
    print(json.dumps({"rows": result.history.rows,
                      "hits": events.count("/jax/compilation_cache/cache_hits"),
                      "misses": events.count("/jax/compilation_cache/cache_misses")}))
""")


def _run(cache):
    done = subprocess.run([sys.executable, "-c", RUN, str(cache)], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_second_process_loads_the_compiled_programs_and_gets_the_same_numbers(tmp_path):
    first, second = _run(tmp_path), _run(tmp_path)
    assert first["hits"] == 0 and first["misses"] > 0
    assert any(tmp_path.iterdir())
    assert second["hits"] >= first["misses"] - 1 and second["misses"] <= 1
    assert second["rows"] == first["rows"]


def test_the_cache_directory_follows_xdg_and_the_switch(monkeypatch, tmp_path):
    if sys.platform in ("win32", "darwin"):
        pytest.skip("XDG_CACHE_HOME is the Linux convention")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compilation_cache.default_cache_dir() == tmp_path / "fedjax_avail" / "jax"
    monkeypatch.setenv(compilation_cache.ENV, "0")  # off everywhere: nothing is configured
    assert fa.enable_compilation_cache() is None
    assert not (tmp_path / "fedjax_avail").exists()


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the Linux convention")
@pytest.mark.slow
def test_the_cli_caches_in_the_user_cache_directory_by_default(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != compilation_cache.ENV}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    subprocess.run([sys.executable, "-m", "fedjax_avail", "run", "--set", "rounds=4",
                    "--set", "eval_every=2", "--out", str(tmp_path / "out"), "--no-progress"],
                   env=env, check=True, capture_output=True)
    assert any((tmp_path / "cache" / "fedjax_avail" / "jax").iterdir())
