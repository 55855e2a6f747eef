"""Federated data layout, batch sampling, partitioners and loaders."""

import os
import time

import numpy as np
import pytest

import fedjax_avail as fa


def test_from_client_arrays_is_flat_with_offsets_and_counts():
    clients = [{"x": np.full((n, 2), i), "y": np.full(n, i)} for i, n in enumerate([3, 1, 2])]
    fd = fa.FederatedData.from_client_arrays(clients)
    assert fd.num_clients == 3
    assert fd.counts.tolist() == [3, 1, 2] and fd.offsets.tolist() == [0, 3, 4]
    assert fd.arrays["x"].shape == (6, 2)  # no per-client padding
    for i in range(3):
        np.testing.assert_array_equal(fd.client(i)["y"], clients[i]["y"])


def test_from_arrays_groups_by_client_id():
    y = np.array([5, 6, 7, 8, 9])
    fd = fa.FederatedData.from_arrays({"x": y * 10, "y": y}, np.array([2, 0, 2, 1, 0]))
    assert fd.counts.tolist() == [2, 1, 2]
    assert sorted(fd.client(0)["y"].tolist()) == [6, 9]
    assert fd.client(1)["y"].tolist() == [8]
    np.testing.assert_array_equal(fd.arrays["x"], fd.arrays["y"] * 10)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: fa.FederatedData.from_arrays({"x": np.zeros(3)}, np.zeros(4, int)), "x"),
        (lambda: fa.FederatedData.from_arrays({"x": np.zeros(3)}, np.array([0, 2, 2])),
         "empty"),
        (lambda: fa.FederatedData.from_client_arrays([{"x": np.zeros(2)}, {"x": np.zeros(0)}]),
         "empty"),
        (lambda: fa.FederatedData.from_client_arrays([{"x": np.zeros(2), "y": np.zeros(3)}]),
         "length"),
        (lambda: fa.data.iid(np.zeros((5, 2)), np.zeros(4), 2), "len\\(x\\)"),
    ],
)
def test_bad_data_is_rejected_with_named_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_sample_rows_stay_in_each_client_and_are_uniform():
    import jax

    counts = np.array([1, 4, 10], np.int32)
    offsets = np.array([0, 1, 5], np.int32)
    clients = np.arange(3, dtype=np.int32)
    rows = np.asarray(fa.data.sample_rows(jax.random.PRNGKey(0), clients, offsets, counts,
                                          200, 50))
    assert rows.shape == (3, 200, 50)
    for k in range(3):
        local = rows[k] - offsets[k]
        assert local.min() >= 0 and local.max() < counts[k]
        freq = np.bincount(local.ravel(), minlength=counts[k]) / local.size
        # 10,000 draws per client: each frequency within 5 standard errors of 1/n.
        se = np.sqrt((1 / counts[k]) * (1 - 1 / counts[k]) / local.size)
        assert np.all(np.abs(freq - 1 / counts[k]) <= 5 * se + 1e-12)


def test_a_clients_batches_do_not_depend_on_the_rest_of_the_cohort():
    import jax

    key = jax.random.PRNGKey(3)
    a = fa.data.sample_rows(key, np.array([4, 7], np.int32), np.array([40, 70], np.int32),
                            np.array([9, 9], np.int32), 3, 2)
    b = fa.data.sample_rows(key, np.array([7], np.int32), np.array([70], np.int32),
                            np.array([9], np.int32), 3, 2)
    np.testing.assert_array_equal(a[1], b[0])


def test_mnist_idx_files_are_the_standard_set(mnist):
    train, test = mnist
    assert train["x"].shape == (60000, 28, 28) and train["x"].dtype == np.uint8
    assert test["x"].shape == (10000, 28, 28)
    assert np.bincount(train["y"]).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265,
                                                5851, 5949]
    assert np.bincount(test["y"]).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974,
                                               1009]


def test_missing_mnist_says_where_and_how(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path.resolve())) as info:
        fa.data.load_mnist(tmp_path)
    assert "FEDJAX_AVAIL_MNIST_DIR" in str(info.value) and "load_mnist_tfds" in str(info.value)


def _write_idx(path, array):
    import gzip

    header = bytes([0, 0, 8, array.ndim]) + b"".join(n.to_bytes(4, "big") for n in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_mnist_is_read_once_per_process_until_a_file_changes(tmp_path):
    rng = np.random.default_rng(0)
    for stem, shape in [("train-images-idx3-ubyte", (6, 28, 28)), ("train-labels-idx1-ubyte", (6,)),
                        ("t10k-images-idx3-ubyte", (2, 28, 28)), ("t10k-labels-idx1-ubyte", (2,))]:
        _write_idx(tmp_path / f"{stem}.gz", rng.integers(0, 10, shape))
    first, _ = fa.data.load_mnist(tmp_path)
    again, _ = fa.data.load_mnist(tmp_path)
    assert again["x"] is first["x"] and not first["x"].flags.writeable  # shared, read-only
    np.testing.assert_array_equal(again["y"], first["y"])
    new = np.full((3, 28, 28), 7)
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", new)  # another size: read again
    changed, _ = fa.data.load_mnist(tmp_path)
    np.testing.assert_array_equal(changed["x"], new)
    # the same size and modification time (cp -p, rsync -a) with other pixels: read again
    path = tmp_path / "train-images-idx3-ubyte.gz"
    stat = path.stat()
    time.sleep(0.05)  # past the coarse clock that stamps a file's status-change time
    _write_idx(path, np.full((3, 28, 28), 8))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert fa.data.load_mnist(tmp_path)[0]["x"].max() == 8


def test_mnist_through_links_named_gz_to_blobs_without_the_suffix(tmp_path):
    # as a content-addressed cache lays them out: the link's name says gzip, the blob's does not
    rng = np.random.default_rng(1)
    (tmp_path / "blobs").mkdir()
    for i, (stem, shape) in enumerate([
            ("train-images-idx3-ubyte", (4, 28, 28)), ("train-labels-idx1-ubyte", (4,)),
            ("t10k-images-idx3-ubyte", (2, 28, 28)), ("t10k-labels-idx1-ubyte", (2,))]):
        blob = tmp_path / "blobs" / f"sha{i}"
        _write_idx(blob, rng.integers(0, 10, shape))
        (tmp_path / f"{stem}.gz").symlink_to(blob)
    train, test = fa.data.load_mnist(tmp_path)
    assert train["x"].shape == (4, 28, 28) and test["y"].shape == (2,)


def test_mnist_through_tfds_on_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=12):
        train, test = fa.data.load_mnist_tfds(download=False)
    assert train["x"].shape == (12, 28, 28) and train["x"].dtype == np.uint8
    assert train["y"].shape == (12,) and test["x"].shape[1:] == (28, 28)
    assert train["y"].min() >= 0 and train["y"].max() <= 9


def test_digits_are_uint8_and_split(digits):
    train, test = digits
    assert train["x"].dtype == np.uint8 and train["x"].shape[1:] == (8, 8)
    assert len(train["y"]) + len(test["y"]) == 1797
    assert train["x"].max() == 255


def test_digits_are_scikit_learns_read_with_or_without_importing_it(monkeypatch):
    """The loader reads scikit-learn's file itself (no 1-2 s import); where the file is not
    where it looks, it asks scikit-learn. Both give scikit-learn's own arrays."""
    from sklearn.datasets import load_digits as sk_load_digits

    from fedjax_avail.data import _datasets

    digits = sk_load_digits()
    for found in (True, False):
        if not found:
            monkeypatch.setattr(_datasets.importlib.util, "find_spec", lambda name: None)
        images, labels = _datasets._sklearn_digits()
        np.testing.assert_array_equal(images, digits.images)
        np.testing.assert_array_equal(labels, digits.target)
        assert (images.dtype, labels.dtype) == (digits.images.dtype, digits.target.dtype)


def test_one_label_per_client_matches_fedlaavg_section_6(mnist):
    train, _ = mnist
    fd = fa.data.one_label_per_client(train["x"], train["y"], 1000, seed=0)
    labels_per_client = [np.unique(fd.client(i)["y"]) for i in range(0, 1000, 37)]
    assert all(len(u) == 1 for u in labels_per_client)
    assert np.bincount(fd.client_labels()).tolist() == [100] * 10  # N/10 clients per digit
    # Digits with more than 6000 images keep the Normal(60, 10^2) sizes untouched.
    for digit in (1, 3, 7):
        sizes = fd.counts[fd.client_labels() == digit]
        assert abs(sizes.mean() - 60) < 3 and abs(sizes.std() - 10) < 2.5
    # Clients are disjoint: no example is used twice.
    assert fd.num_examples <= 60000 and fd.num_examples > 55000


def test_iid_classes_per_client_and_dirichlet(digits):
    x, y = digits[0]["x"], digits[0]["y"]
    fd = fa.data.iid(x, y, 10)
    assert fd.counts.max() - fd.counts.min() <= 1 and fd.num_examples == len(y)
    fd = fa.data.classes_per_client(x, y, 20, k=2)
    for i in range(20):
        assert len(np.unique(fd.client(i)["y"])) == 2
    assert fd.num_examples == len(y)  # every example kept
    rows = np.c_[y, x.reshape(len(x), -1)].tolist()
    assert sorted(np.c_[fd.arrays["y"], fd.arrays["x"].reshape(len(x), -1)].tolist()) == sorted(
        rows)
    fd = fa.data.dirichlet(x, y, 10, alpha=0.1, seed=1, min_size=5)
    assert fd.counts.min() >= 5 and fd.num_examples == len(y)
    # Small alpha concentrates labels: most clients are dominated by few labels.
    top_share = [np.bincount(fd.client(i)["y"]).max() / fd.counts[i] for i in range(10)]
    assert np.median(top_share) > 0.4
    with pytest.raises(ValueError, match="alpha"):
        fa.data.dirichlet(x, y, 10, alpha=0.0)
    with pytest.raises(ValueError, match="num_clients"):
        fa.data.one_label_per_client(x, y, 15)


def test_classes_per_client_refuses_to_drop_examples_or_labels():
    # Before, labels no client held (N k < L) were dropped, and a label with fewer examples
    # than holders left some of them with fewer than k labels, without a word.
    y = np.repeat(np.arange(10), 5)
    x = np.arange(50, dtype=np.float32)[:, None]
    with pytest.raises(ValueError, match=r"num_clients \* k must .*\(10\).* 2 \* 2: labels \[4, 5"):
        fa.data.classes_per_client(x, y, 2, k=2)
    y = np.array([0] * 2 + [1] * 100 + [2] * 100)
    x = np.zeros((len(y), 1), np.float32)
    with pytest.raises(ValueError, match="label 0 has 2 examples for its 4 holders"):
        fa.data.classes_per_client(x, y, 6, k=2)
    fd = fa.data.classes_per_client(x, y, 3, k=2)  # label 0: 2 examples, 2 holders
    assert [len(np.unique(fd.client(i)["y"])) for i in range(3)] == [2, 2, 2]
    with pytest.raises(ValueError, match="k must be an integer"):
        fa.data.classes_per_client(x, y, 3, k=1.5)


@pytest.mark.parametrize("loader, shape, classes", [
    (lambda: fa.data.load_emnist("mnist", download=False), (28, 28, 1), 10),
    (lambda: fa.data.load_emnist("byclass", download=False), (28, 28, 1), 62),
    (lambda: fa.data.load_cifar10(download=False), (32, 32, 3), 10),
])
def test_tfds_image_loaders_on_mock_data(loader, shape, classes):
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):
        train, test = loader()
    assert train["x"].shape == (6, *shape) and train["x"].dtype == np.uint8
    assert train["y"].dtype == np.int32 and 0 <= train["y"].min() and train["y"].max() < classes
    assert test["x"].shape[1:] == shape


def test_celeba_through_tfds_is_leaf_shaped():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=5):
        train, test = fa.data.load_celeba(download=False)
    assert train["x"].shape == (5, 84, 84, 3) and train["x"].dtype == np.uint8
    assert set(np.unique(train["y"])) <= {0, 1}
    ids = np.concatenate([train["identity"], test["identity"]])
    assert ids.min() == 0 and set(np.unique(ids)) == set(range(ids.max() + 1))
    task = fa.tasks.celeba_cnn()
    fd = fa.FederatedData.from_arrays(train, train["identity"])
    result = fa.simulate(task, fd, fa.algorithms.FedAvg(clients_per_round=1, local_steps=1,
                                                        batch_size=2), fa.availability.AlwaysOn(),
                         rounds=1)
    assert np.isfinite(result.history["train_loss"]).all()
