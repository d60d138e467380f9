"""The state the checkpoint benchmark saves: what a PyTorch trial checkpoints, of a given size.

Imported by benchmarks/checkpoint_bench.py, benchmarks/checkpoint_memory.py,
benchmarks/pbt_exploit.py and the Ray Tune peer (benchmarks/peers/ray_checkpoint.py), so
every system saves the same state, and touches the restored one the same way.
Needs only torch (the peer runs in its own virtual environment, without diel).
"""

from __future__ import annotations

import torch

MIB = 1 << 20
WIDTH = 256      # columns of each weight matrix
LAYERS = 4


def make_state(mib: int) -> dict:
    """A model's ``state_dict`` (``LAYERS`` float32 linear layers) and an SGD-with-momentum
    optimizer's ``state_dict`` (a momentum buffer per parameter), ``mib`` MiB of float32
    in all, half each; seeded, so every system saves the same bytes."""
    generator = torch.Generator().manual_seed(mib)
    rows = max(1, mib * MIB // 2 // LAYERS // 4 // WIDTH - 1)   # - 1: room for the biases
    model, momentum = {}, {}
    for layer in range(LAYERS):
        for name, shape in ((f"layer{layer}.weight", (rows, WIDTH)), (f"layer{layer}.bias", (WIDTH,))):
            model[name] = torch.randn(shape, generator=generator)
            momentum[len(momentum)] = {"momentum_buffer": torch.randn(shape, generator=generator)}
    optimizer = {"state": momentum,
                 "param_groups": [{"lr": 0.05, "momentum": 0.9, "dampening": 0, "weight_decay": 0,
                                   "nesterov": False, "params": list(momentum)}]}
    return {"model": model, "optimizer": optimizer, "epoch": 1}


def tensors(state: dict) -> list:
    """The state's tensors: the model's, then the optimizer's momentum buffers."""
    return list(state["model"].values()) + [s["momentum_buffer"] for s in state["optimizer"]["state"].values()]


def state_bytes(state: dict) -> int:
    """The bytes of the state's tensors."""
    return sum(t.numel() * t.element_size() for t in tensors(state))


def touch(state: dict) -> float:
    """Read every byte of the state's tensors once (a sum over each), as the first pass of
    training does: a restored state is *ready to train* once this returns (memory mapped
    but not yet read costs its page faults here, and a lazy load its reads)."""
    return sum(float(t.sum()) for t in tensors(state))
