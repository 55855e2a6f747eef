"""Natural partitions from Hugging Face datasets (issue 37), offline on in-memory datasets."""

import numpy as np
import pytest

import fedjax_avail as fa

datasets = pytest.importorskip("datasets")
partitioner = pytest.importorskip("flwr_datasets.partitioner")


def _femnist_like(n=60, seed=0):
    """A FEMNIST-shaped dataset: writer ids as text, 4x4 float64 images, int64 labels."""
    rng = np.random.default_rng(seed)
    writers = rng.choice(["f0003_12", "f0107_40", "f0001_41", "f2204_07"], n)
    return datasets.Dataset.from_dict({
        "writer_id": writers.tolist(),
        "image": rng.random((n, 4, 4)).tolist(),
        "character": rng.integers(0, 62, n).tolist(),
    }), writers


def test_a_client_column_is_the_natural_partition():
    ds, writers = _femnist_like()
    fd = fa.data.from_huggingface(ds, client_column="writer_id",
                                  columns={"x": "image", "y": "character"})
    names = sorted(set(writers))
    assert fd.num_clients == 4 and fd.counts.tolist() == [int((writers == w).sum())
                                                          for w in names]
    x = np.asarray(ds["image"])
    for i, name in enumerate(names):  # client i: writer names[i]'s examples, in dataset order
        rows = np.flatnonzero(writers == name)
        np.testing.assert_array_equal(fd.client(i)["x"], x[rows].astype(np.float32))
        np.testing.assert_array_equal(fd.client(i)["y"], np.asarray(ds["character"])[rows])
    assert fd.arrays["x"].dtype == np.float32 and fd.arrays["y"].dtype == np.int32


def test_an_flwr_partitioner_splits_any_dataset():
    ds, _ = _femnist_like(n=200, seed=1)
    iid = fa.data.from_huggingface(ds, columns={"x": "image", "y": "character"},
                                   partitioner=partitioner.IidPartitioner(num_partitions=5))
    assert iid.num_clients == 5 and iid.num_examples == 200
    assert sorted(iid.counts.tolist()) == [40] * 5
    dirichlet = partitioner.DirichletPartitioner(num_partitions=4, partition_by="character",
                                                 alpha=0.3, min_partition_size=1, seed=3)
    fd = fa.data.from_huggingface(ds, columns={"x": "image", "y": "character"},
                                  partitioner=dirichlet)
    assert fd.num_clients == 4 and fd.num_examples == 200


@pytest.mark.parametrize("kwargs, words", [
    ({}, "give exactly one of client_column"),
    ({"client_column": "user"}, "no column 'user'"),
    ({"client_column": "writer_id", "columns": {"x": "pixels"}}, "no column 'pixels'"),
    ({"client_column": "character", "columns": {"x": "writer_id"}},
     "column 'writer_id' holds"),
])
def test_bad_columns_are_refused_naming_them(kwargs, words):
    ds, _ = _femnist_like()
    with pytest.raises(ValueError, match=words):
        fa.data.from_huggingface(ds, **kwargs)
