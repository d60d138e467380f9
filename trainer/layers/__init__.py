"""Layers: Input, FullyConnected, Activation, Conv2D, Pooling2D, Flatten, Dropout, Output."""

from trainer.layers.activation import ACTIVATIONS, Activation, Output
from trainer.layers.base import Layer, Shape
from trainer.layers.conv import Conv2D, Pooling2D
from trainer.layers.dense import Dropout, Flatten, FullyConnected, Input

__all__ = ["ACTIVATIONS", "Activation", "Conv2D", "Dropout", "Flatten", "FullyConnected", "Input",
           "Layer", "Output", "Pooling2D", "Shape"]
