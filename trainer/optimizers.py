"""Optimizers: SGD (momentum, weight decay), Adagrad, RMSprop and Adam, as in PyTorch.

The model calls :meth:`Optimizer.step` for each layer's parameter and gradient arrays
once per batch; ``step`` calls :meth:`Optimizer.update` for each pair with that parameter's own
``state`` dict. A custom optimizer subclasses :class:`Optimizer` and implements ``update``,
changing ``param`` in place (it may also overwrite ``grad``, which is not used again).
State arrays come from :meth:`Optimizer.slot`, made once (by the model's allocator, set
as ``memory`` when the model is built, so they live in the model's memory type).

:attr:`Optimizer.grad_scale` lets an update that is linear in the gradient save a pass
over every parameter: the model multiplies the loss gradient by it before backward, so
the gradients arrive already scaled (plain SGD folds its learning rate in this way). Code
that needs the true gradient (LARS norms) divides by it. ``lr`` may change between steps
(a schedule sets it before each step's backward pass); ``step(..., lr_scale=r)`` scales
this step's rate for one layer (LARS trust ratios), and ``update`` uses :attr:`rate`,
``lr * lr_scale``.

On a GPU the built-in optimizers also have a fused update (:attr:`Optimizer.fused`): one
CuPy kernel over the whole fused parameter buffer, reading the step's numbers (learning
rate, decay, Adam's bias corrections) from a small device array that
:meth:`Optimizer.fused_numbers` fills before each step. Reading them from the device, not
baking them into the launch, is what lets a CUDA graph replay the update while a schedule
changes the rate (see :mod:`trainer.graph`). It takes the true gradient (no
:attr:`Optimizer.grad_scale` folded in).
"""

from __future__ import annotations

import inspect
from typing import Any

from trainer.backend import get_array_module
from trainer.errors import ConfigError
from trainer.fused import elementwise

__all__ = ["Optimizer", "SGD", "Adagrad", "RMSprop", "Adam", "get_optimizer", "OPTIMIZERS"]


class Optimizer:
    """Base class holding the learning rate, weight decay and per-parameter state.

    ``elementwise`` says that :meth:`update` treats every element on its own, so updating
    all parameters as one array gives the same result as updating them one by one; the
    model then may update its whole fused parameter buffer in one call (one kernel launch
    per operation on a GPU instead of one per parameter). False for custom optimizers
    unless they say otherwise."""

    elementwise = False
    #: The fused GPU update, a CUDA C body over ``p`` (the parameter), ``g`` (the true
    #: gradient), the state arrays named in :attr:`fused_slots`, and ``s``, the numbers
    #: :meth:`fused_numbers` returns; None when there is none (custom optimizers).
    fused: str | None = None
    fused_slots: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that overrides :meth:`update` without its own :attr:`fused` has none:
        the inherited kernel would run the parent's rule on a GPU instead of the subclass's."""
        super().__init_subclass__(**kwargs)
        if "update" in vars(cls) and "fused" not in vars(cls):
            cls.fused = None

    def __init__(self, lr: float = 0.01, weight_decay: float = 0.0) -> None:
        if lr <= 0:
            raise ConfigError(f"learning rate must be positive, got {lr}")
        if weight_decay < 0:
            raise ConfigError(f"weight_decay must be non-negative, got {weight_decay}")
        self.lr, self.weight_decay = float(lr), float(weight_decay)
        self.lr_scale = 1.0
        self.states: list[dict[str, Any]] = []
        self.memory: Any = None  # the model's Allocator (None: state arrays like the parameters)

    @property
    def rate(self) -> float:
        """This step's learning rate for the parameters being updated: ``lr * lr_scale``."""
        return self.lr * self.lr_scale

    @property
    def grad_scale(self) -> float:
        """Factor the model applies to the loss gradient, so ``update`` receives
        ``grad_scale * d loss / d param`` (1.0 unless the optimizer folds a constant in)."""
        return 1.0

    def step(self, params: list[Any], grads: list[Any], first: int = 0, lr_scale: float = 1.0) -> None:
        """Update ``params`` (the model's parameters ``first``, ``first + 1``, ...) at
        ``lr * lr_scale``. The model calls this per layer (right after that layer's backward,
        while its arrays are in cache, when it can)."""
        self.lr_scale = float(lr_scale)
        for k, (param, grad) in enumerate(zip(params, grads)):
            self.update(param, grad, self.state(first + k))

    def state(self, index: int) -> dict[str, Any]:
        """The state dict of the model's parameter ``index`` (made empty on first use)."""
        if len(self.states) <= index:
            self.states += [{} for _ in range(index + 1 - len(self.states))]
        return self.states[index]

    def fused_numbers(self, state: dict[str, Any]) -> list[float]:
        """This step's numbers for :attr:`fused`, in the order its body reads ``s``; called
        once per step before the update (it advances per-step counters such as Adam's)."""
        raise NotImplementedError(f"{type(self).__name__} has no fused update")

    def step_fused(self, param: Any, grad: Any, state: dict[str, Any], numbers: Any) -> None:
        """Update CuPy ``param`` from the true gradient ``grad`` in one kernel, with the step's
        numbers read from the device array ``numbers`` (filled from :meth:`fused_numbers`)."""
        slots = [self.slot(state, key, param) for key in self.fused_slots]
        outputs = ", ".join(["T p", *(f"T {key}" for key in self.fused_slots)])
        kernel = elementwise(f"{type(self).__name__.lower()}_update", "raw T s, T g", outputs, self.fused)
        kernel(numbers, grad, param, *slots)

    def update(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        """Change ``param`` in place from ``grad``; ``state`` persists for this parameter."""
        raise NotImplementedError(f"{type(self).__name__} must implement update")

    def slot(self, state: dict[str, Any], key: str, like: Any) -> Any:
        """``state[key]``, created as zeros shaped like ``like`` on first use."""
        value = state.get(key)
        if value is None:
            if self.memory is None:
                value = state[key] = get_array_module(like).zeros_like(like)
            else:
                value = state[key] = self.memory.zeros(like.shape, like.dtype, "state", keep=True)
        return value

    def decayed(self, param: Any, grad: Any, state: dict[str, Any]) -> Any:
        """``grad + weight_decay * param`` (L2 decay as PyTorch applies it), in place in grad."""
        if self.weight_decay:
            tmp = self.slot(state, "decay_tmp", param)
            get_array_module(param).multiply(param, self.weight_decay, out=tmp)
            grad += tmp
        return grad


class SGD(Optimizer):
    """``v = momentum * v + g``; ``p -= lr * v`` (plain ``p -= lr * g`` when momentum is 0)."""

    elementwise = True

    def __init__(self, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0) -> None:
        super().__init__(lr, weight_decay)
        if not 0.0 <= momentum < 1.0:
            raise ConfigError(f"momentum must be in [0, 1), got {momentum}")
        self.momentum = float(momentum)

    # s: rate, weight decay, momentum; without momentum there is no velocity to keep (a
    # captured step holds one or the other: the model captures again when it switches)
    @property
    def fused(self) -> str:
        if self.momentum == 0.0:
            return "p = p * ((T)1 - s[0] * s[1]) - s[0] * g"
        return "velocity = s[2] * velocity + (g + s[1] * p); p = p - velocity * s[0]"

    @property
    def fused_slots(self) -> tuple[str, ...]:
        return () if self.momentum == 0.0 else ("velocity",)

    def fused_numbers(self, state: dict[str, Any]) -> list[float]:
        return [self.rate, self.weight_decay, self.momentum]

    @property
    def grad_scale(self) -> float:
        """Without momentum the learning rate is folded into the gradients (saves a pass)."""
        return self.lr if self.momentum == 0.0 else 1.0

    def update(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        if self.momentum == 0.0:  # grad arrives as lr * g (grad_scale)
            if self.weight_decay:  # p - lr*(g + wd*p) == p*(1 - lr*wd) - lr*g, no temporary
                param *= 1.0 - self.rate * self.weight_decay
            if self.lr_scale != 1.0:
                grad *= self.lr_scale
            param -= grad
            return
        velocity = self.slot(state, "velocity", param)
        velocity *= self.momentum
        velocity += self.decayed(param, grad, state)
        grad[...] = velocity
        grad *= self.rate
        param -= grad


def _adaptive_step(param: Any, grad: Any, accumulated: Any, tmp: Any, rate: float,
                   eps: float) -> None:
    """``param -= rate * grad / (sqrt(accumulated) + eps)``, in place (Adagrad, RMSprop)."""
    get_array_module(param).sqrt(accumulated, out=tmp)
    tmp += eps
    grad /= tmp
    grad *= rate
    param -= grad


class Adagrad(Optimizer):
    """``s += g^2``; ``p -= lr * g / (sqrt(s) + eps)``."""

    elementwise = True

    def __init__(self, lr: float = 0.01, eps: float = 1e-10, weight_decay: float = 0.0) -> None:
        super().__init__(lr, weight_decay)
        self.eps = float(eps)

    # s: rate, weight decay, eps
    fused = "T d = g + s[1] * p; sum = sum + d * d; p = p - d / (sqrt(sum) + s[2]) * s[0]"
    fused_slots = ("sum",)

    def fused_numbers(self, state: dict[str, Any]) -> list[float]:
        return [self.rate, self.weight_decay, self.eps]

    def update(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        xp = get_array_module(param)
        grad = self.decayed(param, grad, state)
        total = self.slot(state, "sum", param)
        tmp = self.slot(state, "tmp", param)
        xp.multiply(grad, grad, out=tmp)
        total += tmp
        _adaptive_step(param, grad, total, tmp, self.rate, self.eps)


class RMSprop(Optimizer):
    """``s = alpha * s + (1 - alpha) * g^2``; ``p -= lr * g / (sqrt(s) + eps)``."""

    elementwise = True

    def __init__(self, lr: float = 0.01, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        super().__init__(lr, weight_decay)
        if not 0.0 <= alpha < 1.0:
            raise ConfigError(f"alpha must be in [0, 1), got {alpha}")
        self.alpha, self.eps = float(alpha), float(eps)

    # s: rate, weight decay, eps, alpha, 1 - alpha
    fused = ("T d = g + s[1] * p; square = square * s[3] + d * d * s[4];"
             "p = p - d / (sqrt(square) + s[2]) * s[0]")
    fused_slots = ("square",)

    def fused_numbers(self, state: dict[str, Any]) -> list[float]:
        return [self.rate, self.weight_decay, self.eps, self.alpha, 1.0 - self.alpha]

    def update(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        xp = get_array_module(param)
        grad = self.decayed(param, grad, state)
        square = self.slot(state, "square", param)
        tmp = self.slot(state, "tmp", param)
        xp.multiply(grad, grad, out=tmp)
        tmp *= 1.0 - self.alpha
        square *= self.alpha
        square += tmp
        _adaptive_step(param, grad, square, tmp, self.rate, self.eps)


class Adam(Optimizer):
    """Adam with bias correction: moments ``m``, ``v`` with decay ``beta1``, ``beta2``."""

    elementwise = True

    def __init__(self, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        super().__init__(lr, weight_decay)
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise ConfigError(f"beta1 and beta2 must be in [0, 1), got {beta1}, {beta2}")
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)

    # s: rate / (1 - beta1^t), weight decay, eps, beta1, 1 - beta1, beta2, 1 - beta2, 1 / sqrt(1 - beta2^t)
    fused = ("T d = g + s[1] * p; m = m * s[3] + d * s[4]; v = v * s[5] + d * d * s[6];"
             "p = p - m / (sqrt(v) * s[7] + s[2]) * s[0]")
    fused_slots = ("m", "v")

    def fused_numbers(self, state: dict[str, Any]) -> list[float]:
        t = state["t"] = state.get("t", 0) + 1
        return [self.rate / (1.0 - self.beta1 ** t), self.weight_decay, self.eps, self.beta1, 1.0 - self.beta1,
                self.beta2, 1.0 - self.beta2, 1.0 / (1.0 - self.beta2 ** t) ** 0.5]

    def update(self, param: Any, grad: Any, state: dict[str, Any]) -> None:
        xp = get_array_module(param)
        grad = self.decayed(param, grad, state)
        m = self.slot(state, "m", param)
        v = self.slot(state, "v", param)
        tmp = self.slot(state, "tmp", param)
        t = state["t"] = state.get("t", 0) + 1
        m *= self.beta1
        xp.multiply(grad, 1.0 - self.beta1, out=tmp)
        m += tmp
        v *= self.beta2
        xp.multiply(grad, grad, out=tmp)
        tmp *= 1.0 - self.beta2
        v += tmp
        xp.sqrt(v, out=tmp)
        tmp *= 1.0 / (1.0 - self.beta2 ** t) ** 0.5
        tmp += self.eps
        xp.divide(m, tmp, out=grad)
        grad *= self.rate / (1.0 - self.beta1 ** t)
        param -= grad


OPTIMIZERS: dict[str, type[Optimizer]] = {"sgd": SGD, "adagrad": Adagrad, "rmsprop": RMSprop, "adam": Adam}
_ALIASES = {"learning_rate": "lr"}


def get_optimizer(name: str | Optimizer, **params: Any) -> Optimizer:
    """An optimizer from a name (``sgd``, ``adagrad``, ``rmsprop``, ``adam``) and its settings,
    e.g. ``get_optimizer("sgd", learning_rate=0.05, weight_decay=0.001)``; an instance is
    returned as is. Unknown names or settings raise :class:`ConfigError`."""
    if isinstance(name, Optimizer):
        return name
    cls = OPTIMIZERS.get(str(name).lower())
    if cls is None:
        raise ConfigError(f"unknown optimizer {name!r}: choose from {', '.join(OPTIMIZERS)}")
    kwargs = {_ALIASES.get(k, k): v for k, v in params.items()}
    allowed = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise ConfigError(f"optimizer {name!r} has no setting(s) {', '.join(unknown)}; "
                          f"it takes {', '.join(sorted(allowed))}")
    return cls(**kwargs)
