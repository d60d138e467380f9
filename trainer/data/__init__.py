"""Data for the trainer: the shipped MNIST subset, MNIST IDX files, a split helper, synthetic data."""

from trainer.data.mnist import MNIST5K_PATH, load_idx, load_mnist, load_mnist5k, prepare, split
from trainer.data.synthetic import synthetic

__all__ = ["MNIST5K_PATH", "load_idx", "load_mnist", "load_mnist5k", "prepare", "split", "synthetic"]
