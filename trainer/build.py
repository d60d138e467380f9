"""Build networks and optimizers from plain settings, as the search's trainer module gets them.

A trial's parameter dict, e.g. ``{"hidden": [528, 528, 528], "activation": "relu",
"optimizer": "sgd", "learning_rate": 0.1, "weight_decay": 0.001, "batch_size": 100}``,
becomes a model with :func:`build_model`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from trainer.errors import ConfigError
from trainer.layers import Activation, Dropout, Flatten, FullyConnected, Input, Layer, Output
from trainer.model import DEFAULT_PARAMS, NeuralNetwork
from trainer.optimizers import OPTIMIZERS, Optimizer, get_optimizer
from trainer.schedules import build_schedule

__all__ = ["build_mlp", "build_optimizer", "build_model"]


def build_mlp(input_shape: int | Sequence[int] = 784, hidden: Sequence[int] = (528, 528, 528),
              activation: str = "relu", classes: int = 10, dropout: float = 0.0,
              output: str = "softmax") -> list[Layer]:
    """Layers of a multi-layer perceptron: Input, [Flatten], then per hidden size a
    FullyConnected ``fcN`` + Activation (+ Dropout when ``dropout`` > 0), then a
    FullyConnected ``out`` of ``classes`` units and an Output (``softmax``, or ``identity``)."""
    shape = (int(input_shape),) if isinstance(input_shape, int) else tuple(int(s) for s in input_shape)
    if classes <= 0 or any(int(h) <= 0 for h in hidden):
        raise ConfigError(f"hidden sizes and classes must be positive, got {list(hidden)}, {classes}")
    layers: list[Layer] = [Input(shape, name="input")]
    if len(shape) > 1:
        layers.append(Flatten(name="flatten"))
    for i, units in enumerate(hidden, start=1):
        layers += [FullyConnected(int(units), name=f"fc{i}"), Activation(activation, name=f"{activation}{i}")]
        if dropout:
            layers.append(Dropout(dropout, name=f"dropout{i}"))
    layers += [FullyConnected(int(classes), name="out"), Output(output, name="output")]
    return layers


def build_optimizer(name: str | Optimizer = "sgd", params: Mapping[str, Any] | None = None,
                    **settings: Any) -> Optimizer:
    """An optimizer by name, taking from ``params`` only the keys it understands (so a whole
    trial dict can be passed) and from ``settings`` everything (unknown ones are an error).
    ``learning_rate`` is accepted for ``lr``."""
    if isinstance(name, Optimizer):
        return name
    cls = OPTIMIZERS.get(str(name).lower())
    if cls is None:
        raise ConfigError(f"unknown optimizer {name!r}: choose from {', '.join(OPTIMIZERS)}")
    accepted = set(inspect.signature(cls.__init__).parameters) | {"learning_rate"}
    picked = {k: v for k, v in (params or {}).items() if k in accepted}
    return get_optimizer(name, **{**picked, **settings})


def build_model(params: Mapping[str, Any], input_shape: int | Sequence[int] = 784,
                classes: int = 10) -> NeuralNetwork:
    """A classifier MLP from a trial's parameter dict.

    Keys used: ``hidden`` (list of sizes, default [528, 528, 528]), ``activation``
    (default relu), ``dropout``, ``loss`` (default cross_entropy), ``optimizer`` (default
    sgd) and its settings (``learning_rate``/``lr``, ``momentum``, ``weight_decay``, ...),
    any model setting of :data:`DEFAULT_PARAMS` (``device``, ``batch_size``, ``epochs``,
    ``seed``, ``offload``, ``mixed_precision``, ``comm``, ...), and ``schedule`` with its
    settings (``base_batch_size``, ``base_lr``, ``warmup_epochs``, ``total_steps``,
    ``min_lr``, ``lars``, ``trust_coefficient``, ``trust_min``, ``trust_max``; see
    :func:`trainer.schedules.build_schedule`), so a search can vary ``batch_size`` and let
    DATE derive the learning rate. Other keys are ignored, so a trial dict can carry extra
    fields.
    """
    layers = build_mlp(input_shape, params.get("hidden", (528, 528, 528)), params.get("activation", "relu"),
                       classes, float(params.get("dropout", 0.0)))
    optimizer = build_optimizer(params.get("optimizer", "sgd"), params)
    model_params = {k: v for k, v in params.items() if k in DEFAULT_PARAMS}
    model_params["schedule"] = build_schedule(params)
    return NeuralNetwork(layers, params.get("loss", "cross_entropy"), optimizer, model_params)
