"""fa.tasks.conv_general_dilated: XLA's convolution computed as a matrix product on a CPU (fast
inside loops); the values and both gradients are lax.conv_general_dilated's."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

import fedjax_avail as fa
from fedjax_avail.tasks import _conv

NHWC = ("NHWC", "HWIO", "NHWC")


def _reference(lhs, rhs, padding):
    """An independent plain loop in float64: out[b, y, x, o] = sum over the window."""
    kh, kw = rhs.shape[:2]
    if isinstance(padding, str):
        padding = jax.lax.padtype_to_pads(lhs.shape[1:3], (kh, kw), (1, 1), padding)
    x = np.pad(np.asarray(lhs, np.float64), ((0, 0), *padding, (0, 0)))
    h, w = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    out = np.zeros((x.shape[0], h, w, rhs.shape[3]))
    for a in range(kh):
        for b in range(kw):
            window = x[:, a:a + h, b:b + w]
            out += np.einsum("byxi,io->byxo", window, np.asarray(rhs, np.float64)[a, b])
    return out


@pytest.mark.parametrize("padding", ["VALID", "SAME", ((2, 0), (1, 3))])
@pytest.mark.parametrize(("kernel", "channels"), [((3, 3), (3, 8)), ((5, 5), (1, 6)),
                                                  ((2, 4), (4, 5))])
def test_values_and_gradients_are_xlas_convolution(padding, kernel, channels):
    rng = np.random.default_rng(0)
    lhs = jnp.asarray(rng.standard_normal((2, 9, 11, channels[0]), np.float32))
    rhs = jnp.asarray(rng.standard_normal((*kernel, *channels), np.float32))
    assert _conv._as_matmul(lhs, rhs, (1, 1), None, None, NHWC, 1, 1) == (
        jax.default_backend() == "cpu")
    ours = _conv.conv_general_dilated(lhs, rhs, (1, 1), padding, dimension_numbers=NHWC)
    xla = jax.lax.conv_general_dilated(lhs, rhs, (1, 1), padding, dimension_numbers=NHWC)
    np.testing.assert_allclose(ours, _reference(lhs, rhs, padding), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours, xla, rtol=1e-5, atol=1e-4)
    g = jnp.asarray(rng.standard_normal(xla.shape, np.float32))

    def pullback(conv):
        return jax.vjp(lambda a, k: conv(a, k, (1, 1), padding, dimension_numbers=NHWC),
                       lhs, rhs)[1](g)

    for mine, theirs in zip(pullback(_conv.conv_general_dilated),
                            pullback(jax.lax.conv_general_dilated), strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-3)


def test_other_convolutions_are_xlas_own():
    rng = np.random.default_rng(1)
    lhs = jnp.asarray(rng.standard_normal((2, 8, 8, 4), np.float32))
    rhs = jnp.asarray(rng.standard_normal((3, 3, 4, 6), np.float32))
    for strides, rhs_dilation, groups, numbers in [((2, 2), None, 1, NHWC),
                                                    ((1, 1), (2, 2), 1, NHWC),
                                                    ((1, 1), None, 2, NHWC),
                                                    ((1, 1), None, 1, None)]:
        kernel = rhs[:, :, :2] if groups == 2 else rhs
        image = jnp.moveaxis(lhs, -1, 1) if numbers is None else lhs  # lax's default: NCHW
        weights = jnp.transpose(kernel, (3, 2, 0, 1)) if numbers is None else kernel
        assert not _conv._as_matmul(image, weights, strides, None, rhs_dilation, numbers,
                                    groups, 1)
        args = (image, weights, strides, "SAME")
        kwargs = dict(rhs_dilation=rhs_dilation, dimension_numbers=numbers,
                      feature_group_count=groups)
        np.testing.assert_array_equal(_conv.conv_general_dilated(*args, **kwargs),
                                      jax.lax.conv_general_dilated(*args, **kwargs))


def test_the_built_in_models_use_it_with_unchanged_parameters():
    model = fa.tasks.LeNet5(10)
    params = {"params": fa.tasks.lenet5((28, 28, 1)).init(jax.random.PRNGKey(0))}
    assert sorted(params["params"]) == ["Conv_0", "Conv_1", "Dense_0", "Dense_1", "Dense_2"]

    class Plain(nn.Module):  # LeNet-5 from flax's own convolution
        @nn.compact
        def __call__(self, x):
            x = nn.max_pool(nn.relu(nn.Conv(6, (5, 5), padding="SAME")(x)), (2, 2), (2, 2))
            x = nn.max_pool(nn.relu(nn.Conv(16, (5, 5), padding="VALID")(x)), (2, 2), (2, 2))
            x = x.reshape((x.shape[0], -1))
            x = nn.relu(nn.Dense(120)(x))
            x = nn.relu(nn.Dense(84)(x))
            return nn.Dense(10)(x)

    images = jnp.asarray(np.random.default_rng(2).random((3, 28, 28, 1), np.float32))
    np.testing.assert_allclose(model.apply(params, images), Plain().apply(params, images),
                               rtol=1e-4, atol=1e-5)

    def convolutions(module):
        jaxpr = jax.make_jaxpr(lambda p: module.apply(p, images))(params)
        return str(jaxpr).count("conv_general_dilated")

    assert convolutions(Plain()) == 2
    assert convolutions(model) == (0 if jax.default_backend() == "cpu" else 2)
    for build in (fa.tasks.cnn, fa.tasks.lenet5):  # WKAFL's CNN and LeNet-5 alike
        task = build((28, 28, 1))
        p = task.init(jax.random.PRNGKey(0))
        batch = {"x": np.zeros((2, 28, 28, 1), np.float32), "y": np.zeros(2, np.int32)}
        text = str(jax.make_jaxpr(jax.grad(task.loss))(p, batch))
        assert ("conv_general_dilated" in text) == (jax.default_backend() != "cpu")


@pytest.mark.parametrize(("kernel", "shape"), [((3,), (2, 9, 3)), ((3, 3), (9, 9, 3)),
                                               ((3, 3), (2, 2, 9, 9, 3)),
                                               ((2, 2, 2), (2, 5, 5, 5, 3))])
def test_flax_conv_with_it_equals_flax_conv_for_any_rank_and_batch_shape(kernel, shape):
    x = jnp.asarray(np.random.default_rng(3).standard_normal(shape, np.float32))
    plain = nn.Conv(4, kernel, padding="SAME")
    ours = nn.Conv(4, kernel, padding="SAME", conv_general_dilated=fa.tasks.conv_general_dilated)
    params = plain.init(jax.random.PRNGKey(0), x)
    np.testing.assert_allclose(ours.apply(params, x), plain.apply(params, x), rtol=1e-5,
                               atol=1e-5)


def test_a_kernel_larger_than_the_image_or_mixed_dtypes_are_xlas_own():
    lhs = jnp.ones((1, 3, 3, 2), jnp.float32)
    for rhs, padding in ((jnp.ones((5, 5, 2, 4), jnp.float32), "VALID"),
                         (jnp.ones((3, 3, 2, 4), jnp.bfloat16), "SAME")):
        args = (lhs, rhs, (1, 1), padding)
        try:
            expected = jax.lax.conv_general_dilated(*args, dimension_numbers=NHWC)
        except TypeError as error:  # lax refuses mixed dtypes: so must we, with its message
            with pytest.raises(TypeError, match=str(error)[:30]):
                _conv.conv_general_dilated(*args, dimension_numbers=NHWC)
            continue
        np.testing.assert_array_equal(
            _conv.conv_general_dilated(*args, dimension_numbers=NHWC), expected)


def test_the_memory_estimate_counts_the_windows_of_a_cpu_convolution():
    task = fa.tasks.lenet5((28, 28, 1))
    params = task.init(jax.random.PRNGKey(0))
    one = {"x": jax.ShapeDtypeStruct((1, 28, 28, 1), jnp.uint8),
           "y": jax.ShapeDtypeStruct((1,), jnp.int32)}
    jaxpr = jax.make_jaxpr(task.loss)(params, one).jaxpr
    convolutions = 28 * 28 * 6 + 10 * 10 * 16  # the two layers' outputs
    dense = 120 + 84 + 10 + 1  # the dense layers' outputs and the label's one-hot gather
    windows = 28 * 28 * 25 + 10 * 10 * 150 if jax.default_backend() == "cpu" else 0
    assert fa.memory._layer_outputs(jaxpr, False) - convolutions - windows in range(dense - 5,
                                                                                   dense + 15)
    # the LSTM's concatenates (its gates' kernels, in the scan body) are of rank 1 and 2
    lstm = fa.tasks.lstm_classifier(100, embeddings=np.zeros((100, 25), np.float32))
    tokens = {"x": jax.ShapeDtypeStruct((1, 25), jnp.int32),
              "y": jax.ShapeDtypeStruct((1,), jnp.int32)}
    grad = jax.grad(lstm.loss)
    ranks = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "concatenate":
                ranks.append(eqn.outvars[0].aval.ndim)
            for sub in fa.memory._sub_jaxprs(eqn.params.values()):
                walk(sub)

    walk(jax.make_jaxpr(grad)(lstm.init(jax.random.PRNGKey(0)), tokens).jaxpr)
    assert ranks and max(ranks) <= 2


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's working set")
@pytest.mark.parametrize(("batch", "chunk"), [(5, None), (50, 1)])
def test_the_cohort_estimate_counts_a_convolutional_members_activations(batch, chunk):
    # LeNet-5, K = 10 in one vmap, B = 5: each member's activations (41,120 values an example,
    # the windows included) are 0.8 of its 1.8 MB; XLA:CPU's working set is 17.9 MB. B = 50
    # a member at a time: the first convolution's windows (3.9 MB) are built a group of
    # images at a time, but on one device the backward pass holds the whole batch's gradient
    # of them (memory._windows_bytes; counted as a group's, the estimate was 0.72x)
    rng = np.random.default_rng(0)
    fd = fa.data.iid(rng.integers(0, 256, (500, 28, 28)).astype(np.uint8),
                     rng.integers(0, 10, 500), 10)
    task = fa.tasks.lenet5((28, 28, 1))
    alg = fa.algorithms.FedAvg(clients_per_round=10, local_steps=2, batch_size=batch,
                               client_lr=0.01)
    terms = fa.estimate_memory(task, fd, alg, client_chunk=chunk).terms
    measured = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=1,
                           client_chunk=chunk).memory["working_set"]
    cohort = terms["cohort_updates"] + terms["cohort_working_set"]
    assert abs(cohort - measured) <= 0.2 * measured, (terms, measured)


def _on_two_devices(code: str) -> list[str]:
    """The lines ``code`` prints in a fresh interpreter with two CPU devices."""
    env = {k: v for k, v in os.environ.items() if k != fa.mesh.CPU_DEVICES_ENV}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, fa.mesh.CPU_DEVICES_ENV: "2"}, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


MESH_ESTIMATE = """
import json
import numpy as np
import fedjax_avail as fa
rng = np.random.default_rng(0)
fd = fa.data.iid(rng.integers(0, 256, (500, 28, 28)).astype(np.uint8),
                 rng.integers(0, 10, 500), 10)
task = fa.tasks.lenet5((28, 28, 1))
alg = fa.algorithms.FedAvg(clients_per_round=10, local_steps=2, batch_size=50, client_lr=0.01)
mesh = fa.mesh.cohort_mesh(2)
terms = fa.estimate_memory(task, fd, alg, client_chunk=1, mesh=mesh).terms
measured = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=1, client_chunk=1,
                       mesh=mesh).memory["working_set"]
print(json.dumps([terms["cohort_updates"] + terms["cohort_working_set"], measured]))
"""


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's working set")
def test_the_cohort_estimate_counts_a_groups_windows_under_a_mesh_of_several_devices():
    # LeNet-5, B = 50 over 2 devices, a member at a time on each: the batch's windows (6.9 MB
    # a member) are built a group of 10 images at a time in both passes; counted for the
    # whole batch, the estimate was 2.13x XLA:CPU's working set
    estimated, measured = json.loads(_on_two_devices(MESH_ESTIMATE)[-1])
    assert abs(estimated - measured) <= 0.2 * measured, (estimated, measured)


def _grouped_conv(padding="SAME"):
    """A fresh function (JAX caches traces by function): the convolution, in the groups that
    ``_conv.GROUP_BYTES`` gives when it is traced."""
    def conv(lhs, rhs):
        return _conv.conv_general_dilated(lhs, rhs, (1, 1), padding, dimension_numbers=NHWC)
    return conv


GROUPED_LOOPS = """
import jax, jax.numpy as jnp
import fedjax_avail as fa
from fedjax_avail.tasks import _conv
_conv.GROUP_BYTES = 1  # one image a group
lhs, rhs = jnp.ones((4, 7, 7, 3)), jnp.ones((3, 3, 3, 5))

def loops(mesh):  # the scans of a convolution's value and gradients, traced under mesh
    def pullback(a, k):
        out, vjp = jax.vjp(lambda a, k: _conv.conv_general_dilated(
            a, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")), a, k)
        return vjp(out)
    with fa.mesh.mesh_context(mesh):
        return str(jax.make_jaxpr(pullback)(lhs, rhs)).count("scan[")

print(len(jax.devices()), loops(None), loops(fa.mesh.cohort_mesh(1)),
      loops(fa.mesh.cohort_mesh(2)))

# inside a shard_map of one's own, with the kernel replicated: gradients of the custom products
# are summed over the devices, as JAX's own products' are
split, whole = jax.sharding.PartitionSpec("cohort"), jax.sharding.PartitionSpec()
lhs = jax.random.normal(jax.random.PRNGKey(0), (4, 7, 7, 3))
rhs = jax.random.normal(jax.random.PRNGKey(1), (3, 3, 3, 5))
for conv in (_conv.conv_general_dilated, jax.lax.conv_general_dilated,
             lambda a, k, *s, **d: fa.tasks.matmul(a.reshape(-1, 3), k[0, 0])):
    grad = jax.grad(lambda k, a: jnp.sum(conv(a, k, (1, 1), "SAME", dimension_numbers=(
        "NHWC", "HWIO", "NHWC")) ** 2))
    sharded = jax.shard_map(grad, mesh=fa.mesh.cohort_mesh(2), in_specs=(whole, split),
                            out_specs=whole)
    expected = grad(rhs, lhs)
    print(float(jnp.max(jnp.abs(jax.jit(sharded)(rhs, lhs) - expected))
                / jnp.max(jnp.abs(expected))))
"""


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's product")
def test_gradients_are_grouped_under_a_mesh_of_several_devices():
    # simulate's CPU mesh (a device per core): the forward and backward passes in groups; one
    # device (of any mesh): one product's forward and backward passes when differentiated
    first, *differences = _on_two_devices(GROUPED_LOOPS)
    assert first.split() == ["2", "0", "0", "2"]
    assert len(differences) == 3 and all(float(d) < 1e-5 for d in differences), differences


def test_images_per_group_is_the_largest_divisor_of_the_batch_within_the_budget(monkeypatch):
    one_image = 7 * 7 * 9 * 3 * 4  # [7, 7] windows of 3 x 3 x 3 float32 from [9, 9, 3] padded
    for batch, images, expected in [(6, 2, 2), (6, 4, 3), (6, 6, 6), (6, 100, 6), (7, 3, 1),
                                    (7, 0, 1), (12, 5, 4), (1, 0, 1)]:
        monkeypatch.setattr(_conv, "GROUP_BYTES", images * one_image)
        assert _conv.images_per_group((batch, 9, 9, 3), (3, 3), 4) == expected, (batch, images)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's product")
@pytest.mark.parametrize(("batch", "images", "kernel", "padding"),
                         [(6, 2, (3, 3), "SAME"), (7, 3, (3, 2), "VALID"),
                          (5, 1, (2, 3), ((2, 0), (1, 3)))])
def test_a_batch_past_the_budget_is_convolved_in_groups_with_xlas_values(
        monkeypatch, batch, images, kernel, padding):
    rng = np.random.default_rng(4)
    lhs = jnp.asarray(rng.standard_normal((batch, 7, 8, 3), np.float32))
    rhs = jnp.asarray(rng.standard_normal((*kernel, 3, 5), np.float32))

    def plain(a, k):
        return jax.lax.conv_general_dilated(a, k, (1, 1), padding, dimension_numbers=NHWC)

    out = plain(lhs, rhs)
    padded = (batch, out.shape[1] + kernel[0] - 1, out.shape[2] + kernel[1] - 1, 3)
    one_image = out.shape[1] * out.shape[2] * kernel[0] * kernel[1] * 3 * 4  # its windows
    monkeypatch.setattr(_conv, "GROUP_BYTES", images * one_image)
    group = _conv.images_per_group(padded, kernel, 4)
    assert group < batch and batch % group == 0
    conv = _grouped_conv(padding)
    text = str(jax.make_jaxpr(conv)(lhs, rhs))
    assert "custom_vjp_call" in text and f"length={batch // group}" in text, text
    np.testing.assert_allclose(conv(lhs, rhs), _reference(lhs, rhs, padding), rtol=1e-4,
                               atol=1e-4)
    g = jnp.asarray(rng.standard_normal(out.shape, np.float32))

    def pullback(fn):
        return lambda a, k: jax.vjp(fn, a, k)[1](g)

    def curvature(fn):  # a gradient of a gradient differentiates the backward pass
        return jax.grad(lambda k: jnp.sum(jax.grad(lambda q: jnp.sum(fn(lhs, q) ** 2))(k) ** 2))

    # on a core the backward pass builds the windows again a group at a time; elsewhere it is
    # one product's (a program on one device: XLA splits the product over the cores)
    for per_core in (True, False):
        monkeypatch.setattr(_conv, "_per_core", lambda p=per_core: p)
        loops = str(jax.make_jaxpr(pullback(_grouped_conv(padding)))(lhs, rhs)).count("scan[")
        assert loops == (2 if per_core else 0), per_core
        for mine, theirs in zip(jax.jit(pullback(_grouped_conv(padding)))(lhs, rhs),
                                pullback(plain)(lhs, rhs), strict=True):
            np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(curvature(_grouped_conv(padding))(rhs), curvature(plain)(rhs),
                                   rtol=1e-4, atol=1e-2)
        # cohort members under vmap (the engine's chunks): each member's own gradients
        members = jnp.stack([lhs, lhs[::-1]])
        batched = jax.vmap(lambda a: jax.grad(lambda k: jnp.sum(
            _grouped_conv(padding)(a, k) ** 2))(rhs))(members)
        for member, a in zip(batched, members, strict=True):
            np.testing.assert_allclose(member, jax.grad(lambda k, a=a: jnp.sum(
                plain(a, k) ** 2))(rhs), rtol=1e-4, atol=1e-2)
    with pytest.raises(TypeError):  # forward mode through a custom_vjp (module docstring)
        jax.jvp(conv, (lhs, rhs), (lhs, rhs))


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's product")
def test_grouping_keeps_dtypes_and_leaves_an_empty_batch_or_another_result_dtype_alone(
        monkeypatch):
    monkeypatch.setattr(_conv, "GROUP_BYTES", 1)  # one image a group
    rng = np.random.default_rng(6)
    lhs = jnp.asarray(rng.standard_normal((4, 6, 6, 3), np.float32))
    rhs = jnp.asarray(rng.standard_normal((3, 3, 3, 2), np.float32))

    def conv(a, k, **kwargs):
        return _conv.conv_general_dilated(a, k, (1, 1), "SAME", dimension_numbers=NHWC,
                                          **kwargs)

    def loss(a, k):
        return jnp.sum(conv(a, k).astype(jnp.float32) ** 2)

    for per_core in (True, False):  # bfloat16: values and both gradients stay bfloat16
        monkeypatch.setattr(_conv, "_per_core", lambda p=per_core: p)
        low = (lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16))
        grads = jax.grad(loss, argnums=(0, 1))(*low)
        assert conv(*low).dtype == jnp.bfloat16
        assert [x.dtype for x in grads] == [jnp.bfloat16, jnp.bfloat16]
        for mine, theirs in zip(grads, jax.grad(loss, argnums=(0, 1))(lhs, rhs), strict=True):
            scale = float(jnp.max(jnp.abs(theirs)))  # bfloat16 keeps 8 bits of mantissa
            np.testing.assert_allclose(np.float32(mine), theirs, rtol=0, atol=0.01 * scale)
    empty = conv(lhs[:0], rhs)
    assert empty.shape == (0, 6, 6, 2)
    # an explicit result dtype other than the operands' is one product (no groups); numpy's
    # float64 dtype, which compares equal to None, is not taken for None
    for result in (jnp.float32, np.dtype("float32")):
        wide = jax.make_jaxpr(lambda a, k, r=result: conv(a, k, preferred_element_type=r))(
            *(x.astype(jnp.bfloat16) for x in (lhs, rhs)))
        assert "custom_vjp_call" not in str(wide) and "scan" not in str(wide)
    assert not fa.tasks._matmul.keeps_dtype(np.dtype("float64"), jnp.float32)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's working set")
def test_grouped_windows_keep_the_gradients_working_set_below_the_batchs_windows(monkeypatch):
    # pfl's CIFAR-10 CNN's second convolution on 16 images: their windows take 14.5 MB
    rng = np.random.default_rng(5)
    lhs = jnp.asarray(rng.standard_normal((16, 30, 30, 32), np.float32))
    rhs = jnp.asarray(rng.standard_normal((3, 3, 32, 64), np.float32) * 0.1)
    windows = 16 * 28 * 28 * 288 * 4

    def temp_bytes():
        def loss(a, k):
            return jnp.sum(_conv.conv_general_dilated(a, k, (1, 1), "VALID",
                                                      dimension_numbers=NHWC) ** 2)
        compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(lhs, rhs).compile()
        return compiled.memory_analysis().temp_size_in_bytes, compiled(lhs, rhs)

    monkeypatch.setattr(_conv, "_per_core", lambda: True)  # as under simulate's CPU mesh
    grouped, grads = temp_bytes()  # the default budget: one image's windows (0.9 MB) a group
    monkeypatch.setattr(_conv, "GROUP_BYTES", 2**40)
    whole, whole_grads = temp_bytes()
    assert grouped + windows <= whole, (grouped, whole)  # the batch's windows are not kept
    for mine, theirs in zip(grads, whole_grads, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-2)


def test_the_memory_estimate_counts_the_batchs_windows_when_grouped(monkeypatch):
    # what a gradient on one device keeps (one product), an upper bound on a core's
    lhs, rhs = jnp.zeros((4, 7, 7, 3)), jnp.zeros((3, 3, 3, 5))
    out, windows = 4 * 7 * 7 * 5, 4 * 7 * 7 * 27
    for images in (1, 4):
        monkeypatch.setattr(_conv, "GROUP_BYTES", images * 7 * 7 * 27 * 4)
        jaxpr = jax.make_jaxpr(_grouped_conv())(lhs, rhs).jaxpr
        counted = fa.memory._layer_outputs(jaxpr, True)
        # under a mesh of several devices the backward pass builds a group's windows again
        per_core = fa.memory._layer_outputs(jaxpr, True, windows_kept=False)
        if jax.default_backend() != "cpu":
            assert counted == per_core == out
        else:
            assert out + windows <= counted <= 2 * out + windows, (images, counted)
            group = windows * images // 4
            assert out + group <= per_core <= 2 * out + group, (images, per_core)


def test_a_models_own_scan_keeps_every_steps_windows_under_any_mesh():
    # only the grouped convolution's loop (inside its custom_vjp) rebuilds windows; a model's
    # own scan over ungrouped convolutions keeps each step's for its backward pass
    lhs, rhs = jnp.zeros((4, 7, 7, 3)), jnp.zeros((3, 3, 3, 3))

    def body(x, _):
        return _conv.conv_general_dilated(x, rhs, (1, 1), "SAME", dimension_numbers=NHWC), None

    jaxpr = jax.make_jaxpr(lambda a: jax.lax.scan(body, a, None, length=3)[0])(lhs).jaxpr
    kept = fa.memory._layer_outputs(jaxpr, True)
    assert fa.memory._layer_outputs(jaxpr, True, windows_kept=False) == kept
    if jax.default_backend() == "cpu":
        assert kept >= 3 * 4 * 7 * 7 * 27  # every step's windows
