"""The shipped MNIST subset, IDX files, the split helper, synthetic data, and bad files."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from trainer import DataFileError, TrainerError, load_idx, load_mnist, load_mnist5k, prepare, split, synthetic


def test_shipped_subset():
    images, labels = load_mnist5k()
    assert images.shape == (5000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (5000,) and np.bincount(labels).tolist() == [500] * 10
    assert 0 < images.mean() < 255


def test_split_4000_1000_stratified():
    x, y = prepare(*load_mnist5k())
    x_tr, y_tr, x_te, y_te = split(x, y)
    assert x_tr.shape == (4000, 784) and x_te.shape == (1000, 784) and x.dtype == np.float32
    assert np.bincount(y_te).tolist() == [100] * 10 and 0.0 <= x.min() and x.max() <= 1.0
    assert len(np.unique(y_tr[:50])) > 5  # shuffled, not sorted by label


def test_missing_and_corrupt_subset(tmp_path):
    missing = tmp_path / "nope.npz"
    with pytest.raises(DataFileError, match=str(missing)):
        load_mnist5k(missing)
    corrupt = tmp_path / "bad.npz"
    corrupt.write_bytes(b"PK\x03\x04 this is not a zip")
    with pytest.raises(TrainerError, match=str(corrupt)):
        load_mnist5k(corrupt)


def _write_idx(path, array, compress):
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    data = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if compress else data)


@pytest.mark.parametrize("compress", [True, False])
def test_idx_round_trip(tmp_path, compress):
    images = np.random.default_rng(0).integers(0, 256, (7, 28, 28)).astype(np.uint8)
    labels = np.arange(7, dtype=np.uint8)
    suffix = ".gz" if compress else ""
    _write_idx(tmp_path / f"t10k-images-idx3-ubyte{suffix}", images, compress)
    _write_idx(tmp_path / f"t10k-labels-idx1-ubyte{suffix}", labels, compress)
    got_images, got_labels = load_mnist(tmp_path, "test")
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)


def test_bad_idx_files(tmp_path):
    with pytest.raises(DataFileError, match="not found"):
        load_mnist(tmp_path, "train")
    truncated = tmp_path / "short"
    _write_idx(truncated, np.zeros((3, 4), np.uint8), False)
    truncated.write_bytes(truncated.read_bytes()[:-2])
    with pytest.raises(DataFileError, match="short.*bytes"):
        load_idx(truncated)
    junk = tmp_path / "junk.gz"
    junk.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(DataFileError, match="junk.gz"):
        load_idx(junk)
    text = tmp_path / "text"
    text.write_text("hello world")
    with pytest.raises(DataFileError, match="magic"):
        load_idx(text)


def test_synthetic_any_shape():
    x, y = synthetic(50, (3, 8, 8), classes=4, seed=1)
    assert x.shape == (50, 3, 8, 8) and x.dtype == np.float32 and y.max() < 4
    with pytest.raises(ValueError):
        synthetic(0)
