"""Device settings: cpu, gpu, gpu:N, auto; a GPU asked for without one is a clear error."""

from __future__ import annotations

import numpy as np
import pytest

from trainer import DeviceError, NeuralNetwork, TrainerError, build_mlp, get_array_module, get_device
from trainer.backend import cupy_or_none

NO_GPU = cupy_or_none() is None


def test_cpu_and_auto():
    assert get_device("cpu").xp is np and str(get_device("CPU")) == "cpu"
    auto = get_device("auto")
    assert auto.kind == ("cpu" if NO_GPU else "gpu")
    assert get_array_module(np.zeros(2)) is np


@pytest.mark.parametrize("spec", ["tpu", "gpu:x", "", "cpu:-1"])
def test_bad_device_spec(spec):
    with pytest.raises(DeviceError, match="unknown device"):
        get_device(spec)


@pytest.mark.skipif(not NO_GPU, reason="a GPU is present")
@pytest.mark.parametrize("spec", ["gpu", "gpu:1", "cuda"])
def test_gpu_without_cupy_is_clear_error(spec):
    with pytest.raises(DeviceError, match="CuPy"):
        get_device(spec)
    with pytest.raises(TrainerError):
        NeuralNetwork(build_mlp(4, hidden=[3]), params={"device": spec})


@pytest.mark.gpu
@pytest.mark.skipif(NO_GPU, reason="needs a GPU")
def test_gpu_index_out_of_range():
    with pytest.raises(DeviceError, match="GPU"):
        get_device("gpu:999")


def test_a_failed_cupy_import_is_quoted_and_chained(monkeypatch):
    """The reason CuPy cannot be used reaches the user asking for a GPU, with its cause."""
    import sys  # noqa: PLC0415

    from trainer import backend  # noqa: PLC0415

    monkeypatch.delenv("DIEL_TRAINER_NO_CUPY", raising=False)
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    for name, value in (("_cupy", None), ("_cupy_probed", False), ("_cupy_problem", None), ("_cupy_error", None)):
        monkeypatch.setattr(backend, name, value)
    with pytest.raises(DeviceError, match=r"needs CuPy and a CUDA GPU \((ModuleNotFound|Import)Error: .*cupy") as info:
        get_device("gpu")
    assert isinstance(info.value.__cause__, ImportError)
    assert "Error: import of cupy" in backend.cupy_problem()


def test_float32_models_multiply_in_float32_unless_told_otherwise():
    model = NeuralNetwork(build_mlp(4, hidden=[3]), params={"device": "cpu"})
    assert model.params["gemm_dtype"] is None
    assert all(layer.gemm_dtype is None for layer in model.layers)
