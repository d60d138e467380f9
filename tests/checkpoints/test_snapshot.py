"""take() and Snapshot.load(): states come back bitwise equal, large buffers are copied
exactly once and out of the pickle stream, mutation after take() does not reach the
snapshot, and an unpicklable state is one TypeError naming its key."""

from __future__ import annotations

import multiprocessing
import pickle
import random
import threading
import tracemalloc
from importlib.util import find_spec

import numpy as np
import pytest

from diel.checkpoints import Snapshot, take
from diel.checkpoints.snapshot import ALIGN, IN_BAND_MAX

# torch is imported by the tests that use it, not when the file is collected (on
# every worker of every run of the suite: ~2 s of CPU each)
pytestmark = pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")

MB = 1 << 20


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equal, with dtype, shape and memory order."""
    return (a.dtype == b.dtype and a.shape == b.shape and a.tobytes("A") == b.tobytes("A")
            and a.flags.f_contiguous == b.flags.f_contiguous)


def same_tensor(a, b) -> bool:
    """Bitwise equal, with dtype, shape, strides, requires_grad and type."""
    import torch

    def bits(tensor):
        return tensor.detach().contiguous().reshape(-1).view(torch.uint8)

    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and a.requires_grad == b.requires_grad and type(a) is type(b)
            and torch.equal(bits(a), bits(b)))


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "float32": rng.standard_normal((300, 40), dtype=np.float32),
        "float64 with nan": np.array([np.nan, -0.0, np.inf, 1e-310] * 2000),
        "int8": rng.integers(-128, 127, 10_000, dtype=np.int8),
        "complex": (rng.standard_normal(3000) + 1j).astype(np.complex128),
        "bool": rng.random(9000) > 0.5,
        "fortran": np.asfortranarray(rng.standard_normal((64, 80))),
        "strided": rng.standard_normal((200, 100))[::3, ::2],
        "read-only": np.frombuffer(bytes(range(256)) * 40, np.uint8),
        "zero-d": np.array(3.5),
        "empty": np.zeros((0, 7), np.float32),
        "small": np.arange(5, dtype=np.int64),
        "structured": np.zeros(1000, dtype=[("a", "<i4"), ("b", "<f8")]),
    }


def test_a_dict_of_numpy_arrays_comes_back_bitwise_equal():
    state = arrays()
    back = take(state).load()
    assert back.keys() == state.keys()
    for key in state:
        assert same_array(back[key], state[key]), key
    assert not back["read-only"].flags.writeable
    assert back["float32"].flags.writeable


def trained_model():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32),
                                torch.nn.ReLU(), torch.nn.Linear(32, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.randn(16, 64)),
                                          torch.randint(0, 10, (16,))).backward()
        optimizer.step()
    return model, optimizer


def training_state():
    import torch

    model, optimizer = trained_model()
    generator = np.random.default_rng(3)
    generator.random(10)
    random.seed(5)
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(), "numpy_rng": generator.bit_generator.state,
            "python_rng": random.getstate(), "epoch": 3, "history": [0.5, 0.25]}


def check_training_state(back, state) -> None:
    for key, tensor in state["model"].items():
        assert same_tensor(back["model"][key], tensor), key
    assert back["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    for index, slots in state["optimizer"]["state"].items():
        for name, value in slots.items():
            assert same_tensor(back["optimizer"]["state"][index][name], value), (index, name)
    assert same_tensor(back["torch_rng"], state["torch_rng"])
    assert back["numpy_rng"] == state["numpy_rng"]
    assert back["python_rng"] == state["python_rng"]
    assert (back["epoch"], back["history"]) == (3, [0.5, 0.25])


def test_a_torch_state_dict_with_optimizer_and_rng_states_comes_back_bitwise_equal():
    import torch

    state = training_state()
    back = take(state).load()
    check_training_state(back, state)
    # the restored states go on as the saved ones would have
    model, optimizer = trained_model()
    model.load_state_dict(back["model"])
    optimizer.load_state_dict(back["optimizer"])
    torch.set_rng_state(back["torch_rng"])
    generator = np.random.default_rng()
    generator.bit_generator.state = back["numpy_rng"]
    random.setstate(back["python_rng"])
    drawn = (torch.rand(5), generator.random(5), random.random())
    torch.set_rng_state(state["torch_rng"])
    expected = np.random.default_rng()
    expected.bit_generator.state = state["numpy_rng"]
    random.setstate(state["python_rng"])
    assert torch.equal(drawn[0], torch.rand(5))
    assert np.array_equal(drawn[1], expected.random(5)) and drawn[2] == random.random()


def test_torch_tensors_keep_their_storage_sharing_strides_and_parameters():
    import torch

    base = torch.arange(4096, dtype=torch.float64)
    parameter = torch.nn.Parameter(torch.ones(2048))
    state = {"base": base, "view": base[10:1034], "transposed": base.view(64, 64).t(),
             "half": torch.ones(3000, dtype=torch.bfloat16), "parameter": parameter,
             "frozen": torch.nn.Parameter(torch.zeros(2000), requires_grad=False),
             "empty": torch.empty(0), "scalar": torch.tensor(2.5)}
    back = take(state).load()
    for key, tensor in state.items():
        assert same_tensor(back[key], tensor), key
    assert back["view"].untyped_storage().data_ptr() == back["base"].untyped_storage().data_ptr()
    assert back["view"].storage_offset() == 10
    back["base"][10] = -1.0
    assert back["view"][0] == -1.0   # still a view of the same storage
    assert isinstance(back["parameter"], torch.nn.Parameter) and back["parameter"].requires_grad


def test_large_buffers_travel_out_of_band_and_small_ones_in_the_stream():
    import torch

    big = np.ones(MB // 8)
    state = {"array": big, "tensor": torch.ones(MB // 4), "bytes": b"b" * MB,
             "bytearray": bytearray(b"a" * MB), "small array": np.ones(10),
             "small bytes": b"s" * 100}
    snapshot = take(state)
    assert sorted(snapshot.lengths) == [MB] * 4
    assert len(snapshot.header) < 4 * IN_BAND_MAX
    assert all(buffer.nbytes == MB for buffer in snapshot.buffers)
    offsets = [np.frombuffer(b, np.uint8).ctypes.data - np.frombuffer(snapshot.block, np.uint8).ctypes.data
               for b in snapshot.buffers]
    assert all(offset % ALIGN == 0 for offset in offsets)
    back = snapshot.load()
    assert type(back["bytes"]) is bytes and back["bytes"] == state["bytes"]
    assert type(back["bytearray"]) is bytearray and back["bytearray"] == state["bytearray"]
    assert back["small bytes"] == b"s" * 100 and same_array(back["small array"], np.ones(10))
    # load() copies nothing out of band: the array is a view of the snapshot's block
    assert np.shares_memory(back["array"], np.frombuffer(snapshot.block, np.uint8))


def test_gaps_between_buffers_are_zeros_so_one_state_gives_one_snapshot():
    state = {"a": np.ones(IN_BAND_MAX + 3, np.uint8), "b": np.ones(IN_BAND_MAX + 5, np.uint8)}
    first = take(state)
    second = take(state)
    assert bytes(first.block) == bytes(second.block)
    start = first.lengths[0]
    assert bytes(first.block[start:-first.lengths[1]]) == bytes(len(first.block) - sum(first.lengths))


def test_changing_the_state_right_after_take_does_not_reach_the_snapshot():
    import torch

    state = {"large": np.zeros(MB), "small": np.zeros(4), "tensor": torch.zeros(MB // 4),
             "bytearray": bytearray(MB), "list": [1, 2]}
    snapshot = take(state)
    state["large"] += 1
    state["small"][:] = 9
    state["tensor"].add_(1)
    state["bytearray"][:3] = b"xyz"
    state["list"].append(3)
    back = snapshot.load()
    assert not back["large"].any() and not back["small"].any() and not back["tensor"].any()
    assert back["bytearray"] == bytearray(MB) and back["list"] == [1, 2]


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_100_mb_state_is_copied_once(kind):
    """Peak memory traced while taking (NumPy's allocations are traced, torch's are not:
    the torch case shows the copy lands in the snapshot's traced block, nowhere else)."""
    import torch

    if kind == "numpy":
        state = {f"layer{i}": np.ones(25 * MB // 8) for i in range(4)}
    else:
        state = {f"layer{i}": torch.ones(25 * MB // 4) for i in range(4)}
    tracemalloc.start()
    try:
        snapshot = take(state)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert snapshot.block.nbytes >= 100 * MB
    assert peak < 105 * MB, f"take() allocated {peak / MB:.1f} MB for a 100 MB state"


def test_an_unpicklable_state_is_a_type_error_naming_its_key_and_type():
    class Holder:
        def __init__(self) -> None:
            self.callback = lambda: None

    with pytest.raises(TypeError, match=r"^cannot checkpoint state\['model'\]\['hooks'\]\[1\]: "
                                        r"a value of type function cannot be pickled \(") as caught:
        take({"model": {"weights": np.ones(3), "hooks": [1, lambda x: x]}})
    assert "\n" not in str(caught.value)
    with pytest.raises(TypeError, match=r"^cannot checkpoint state\['lock'\]: a value of type "
                                        r"_thread.lock cannot be pickled \(TypeError: cannot pickle"):
        take({"lock": threading.Lock()})
    with pytest.raises(TypeError, match=r"^cannot checkpoint state\[0\]\.callback: a value of type "
                                        r"function"):
        take([Holder()])
    with pytest.raises(TypeError, match=r"^cannot checkpoint state: a value of type generator"):
        take(x for x in range(3))


def test_a_snapshot_pickles_with_its_block_out_of_band_or_in_the_stream():
    state = {"array": np.arange(MB // 8, dtype=np.float64), "note": "kept"}
    snapshot = take(state)
    buffers: list[pickle.PickleBuffer] = []
    stream = pickle.dumps(snapshot, protocol=5, buffer_callback=buffers.append)
    assert len(stream) < IN_BAND_MAX and len(buffers) == 2   # the pickle stream and the block
    for copy in (pickle.loads(stream, buffers=buffers), pickle.loads(pickle.dumps(snapshot, protocol=4)),
                 pickle.loads(pickle.dumps(snapshot, protocol=5))):
        back = copy.load()
        assert same_array(back["array"], state["array"]) and back["note"] == "kept"
        assert back["array"].flags.writeable


def test_a_snapshot_crosses_a_pipe():
    parent, child = multiprocessing.Pipe()
    snapshot = take({"array": np.arange(100_000)})
    # 800 kB is more than a pipe holds: the sender needs a reader on the other end.
    sender = threading.Thread(target=parent.send, args=(snapshot,))
    sender.start()
    received = child.recv()
    sender.join()
    assert same_array(received.load()["array"], np.arange(100_000))


def test_a_snapshot_refuses_a_read_only_block_or_a_block_that_does_not_fit():
    with pytest.raises(ValueError, match="writable"):
        Snapshot(b"", bytes(8), [8])
    with pytest.raises(ValueError, match="cannot hold"):
        Snapshot(b"", bytearray(8), [4, 4])


@pytest.mark.gpu
def test_a_cuda_tensor_goes_through_torchs_reduction_and_comes_back_on_its_device():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    tensor = torch.arange(MB, dtype=torch.float32, device="cuda")
    snapshot = take({"weights": tensor})
    tensor.add_(1)
    back = snapshot.load()["weights"]
    assert back.device == tensor.device
    assert torch.equal(back.cpu(), torch.arange(MB, dtype=torch.float32))
