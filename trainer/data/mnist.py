"""Real MNIST: the 5,000-digit subset shipped with the package, and the IDX files at a user path.

Both loaders return ``(images, labels)`` as uint8 arrays, images shaped ``(n, 28, 28)``;
:func:`prepare` turns them into float inputs. Any missing, truncated or malformed file
raises :class:`DataFileError` naming the path.
"""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import numpy as np

from trainer.errors import DataFileError

__all__ = ["MNIST5K_PATH", "load_mnist5k", "load_idx", "load_mnist", "prepare", "split"]

MNIST5K_PATH = Path(__file__).resolve().parent / "mnist5k.npz"

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def load_mnist5k(path: str | Path = MNIST5K_PATH) -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 real MNIST digits shipped in ``trainer/data/mnist5k.npz`` (500 per class,
    sorted by label; use :func:`split` to shuffle and split them)."""
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"MNIST subset not found: {path}")
    try:
        with open(path, "rb") as f, np.load(f) as data:  # own the handle: closed even on a bad zip
            images, labels = data["images"], data["labels"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as e:
        raise DataFileError(f"MNIST subset {path} is corrupt or not an images/labels .npz: {e}") from e
    if images.ndim != 3 or images.shape[1:] != (28, 28) or labels.shape != images.shape[:1]:
        raise DataFileError(f"MNIST subset {path}: unexpected shapes {images.shape}, {labels.shape}")
    return images, labels


def load_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file (the format of the MNIST distribution), gzip-compressed or not."""
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"IDX file not found: {path}")
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as e:
        raise DataFileError(f"IDX file {path} could not be read: {e}") from e
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise DataFileError(f"IDX file {path}: bad magic number (not an IDX file)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataFileError(f"IDX file {path}: truncated header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = header + int(np.prod(shape)) * dtype.itemsize
    if len(raw) != expected:
        raise DataFileError(f"IDX file {path}: {len(raw)} bytes, expected {expected} for shape {shape}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _find(directory: Path, stem: str) -> Path:
    """The IDX file named ``stem`` in either spelling (``-idx`` or ``.idx``), gzipped or not."""
    names = [stem, stem.replace("-idx", ".idx")]
    for name in names:
        for candidate in (directory / name, directory / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise DataFileError(f"MNIST file {stem}[.gz] not found in {directory}")


def load_mnist(directory: str | Path, kind: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """The standard MNIST set from ``directory``: ``kind="train"`` (60,000) or ``"test"`` (10,000)."""
    if kind not in ("train", "test"):
        raise ValueError(f"kind must be 'train' or 'test', got {kind!r}")
    directory = Path(directory)
    prefix = "train" if kind == "train" else "t10k"
    images_path = _find(directory, f"{prefix}-images-idx3-ubyte")
    labels_path = _find(directory, f"{prefix}-labels-idx1-ubyte")
    images, labels = load_idx(images_path), load_idx(labels_path)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DataFileError(f"MNIST files {images_path} and {labels_path} do not match: "
                            f"{images.shape} images, {labels.shape} labels")
    return images, labels


def prepare(images: np.ndarray, labels: np.ndarray, flatten: bool = True,
            dtype: str | np.dtype = "float32") -> tuple[np.ndarray, np.ndarray]:
    """Scale pixels to [0, 1] in ``dtype``; flatten to ``(n, 784)`` or keep ``(n, 1, 28, 28)``."""
    x = images.astype(dtype) / np.asarray(255, dtype=dtype)
    x = x.reshape(len(x), -1) if flatten else x.reshape(len(x), 1, *images.shape[1:])
    return x, labels.astype(np.int64)


def split(x: np.ndarray, y: np.ndarray, n_train: int = 4000, seed: int = 0,
          stratify: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shuffle and split into ``(x_train, y_train, x_test, y_test)`` with ``n_train`` samples
    for training (4,000 of the 5,000 subset by default); ``stratify`` keeps class proportions."""
    n = len(x)
    if not 0 < n_train < n:
        raise ValueError(f"n_train must be between 1 and {n - 1}, got {n_train}")
    rng = np.random.default_rng(seed)
    if stratify:
        train_parts, test_parts = [], []
        for label in np.unique(y):
            members = rng.permutation(np.flatnonzero(y == label))
            cut = int(round(len(members) * n_train / n))
            train_parts.append(members[:cut])
            test_parts.append(members[cut:])
        train_idx = rng.permutation(np.concatenate(train_parts))
        test_idx = rng.permutation(np.concatenate(test_parts))
    else:
        order = rng.permutation(n)
        train_idx, test_idx = order[:n_train], order[n_train:]
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]
