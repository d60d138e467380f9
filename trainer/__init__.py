"""MagmaDNN-style deep-learning trainer on NumPy (CPU) or CuPy (GPU).

Build a network from layers, a loss and an optimizer, then ``fit``::

    from trainer import NeuralNetwork, Input, FullyConnected, Activation, Output, SGD
    model = NeuralNetwork([Input(784), FullyConnected(528), Activation("relu"),
                           FullyConnected(10), Output("softmax")],
                          loss="cross_entropy", optimizer=SGD(0.1), params={"device": "cpu"})
    result = model.fit(x, y, epochs=5, batch_size=100, validation=(x_test, y_test))
"""

from trainer.allocator import Allocator
from trainer.backend import Device, get_array_module, get_device, to_numpy
from trainer.build import build_mlp, build_model, build_optimizer
from trainer.data import load_idx, load_mnist, load_mnist5k, prepare, split, synthetic
from trainer.errors import (ConfigError, DataFileError, DeviceError, MemoryTypeError, ShapeMismatchError,
                            TrainerError, TrainingDiverged)
from trainer.layers import (Activation, Conv2D, Dropout, Flatten, FullyConnected, Input, Layer, Output,
                            Pooling2D)
from trainer.losses import CrossEntropy, Loss, MeanSquaredError, get_loss
from trainer.memory import MemoryManager, MemoryType
from trainer.model import DEFAULT_PARAMS, NeuralNetwork
from trainer.optimizers import SGD, Adagrad, Adam, Optimizer, RMSprop, get_optimizer
from trainer.precision import LossScaler
from trainer.results import Callback, EpochStats, FitResult, StopTraining
from trainer.schedules import DATE, LinearScaling, Schedule, build_schedule

__all__ = [
    "DATE", "DEFAULT_PARAMS", "SGD", "Activation", "Adagrad", "Adam", "Allocator", "Callback", "ConfigError", "Conv2D",
    "CrossEntropy", "DataFileError", "Device", "DeviceError", "Dropout", "EpochStats", "FitResult",
    "Flatten", "FullyConnected", "Input", "Layer", "LinearScaling", "Loss", "LossScaler", "MeanSquaredError", "MemoryManager",
    "MemoryType", "MemoryTypeError", "NeuralNetwork", "Optimizer", "Output", "Pooling2D", "RMSprop",
    "Schedule", "ShapeMismatchError", "StopTraining", "TrainerError", "TrainingDiverged",
    "build_mlp", "build_model", "build_optimizer", "build_schedule", "get_array_module", "get_device", "get_loss",
    "get_optimizer", "load_idx", "load_mnist", "load_mnist5k", "prepare", "split", "synthetic", "to_numpy",
]
