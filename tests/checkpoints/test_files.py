"""write() and read(): one checksummed file written atomically and durably; every file that
cannot be used is one CorruptCheckpoint naming it and what is wrong; a crash mid-write
leaves at most a temporary file the layout recognises, never a partial checkpoint."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import textwrap
from importlib.util import find_spec
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest

from diel.checkpoints import CorruptCheckpoint, Written, files, read, take, write
from diel.checkpoints.files import unpack
from diel.checkpoints.layout import checkpoint_path, is_temporary
from diel.errors import DielError

from tests.helpers.launch import REPO

# torch is imported by the tests that use it, not when the file is collected (on
# every worker of every run of the suite: ~2 s of CPU each)
pytestmark = pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")


def state() -> dict:
    import torch

    rng = np.random.default_rng(3)
    return {"weights": rng.standard_normal((300, 50), dtype=np.float32),
            "tensor": torch.arange(20_000, dtype=torch.float64),
            "ints": rng.integers(0, 9, 77, dtype=np.int16), "step": 4, "name": "adam"}


def same(a: dict, b: dict) -> bool:
    import torch

    return (a.keys() == b.keys() and a["step"] == b["step"] and a["name"] == b["name"]
            and np.array_equal(a["weights"], b["weights"]) and np.array_equal(a["ints"], b["ints"])
            and torch.equal(a["tensor"], b["tensor"]))


@pytest.fixture
def written(tmp_path) -> Written:
    return write(take(state()), checkpoint_path(tmp_path, 1, 4), 4)


def corrupt(path: str, problem: str) -> str:
    """The one line read() raised for ``path``; fails unless it contains ``problem``."""
    with pytest.raises(CorruptCheckpoint) as error:
        read(path, None)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"checkpoint {path}: ")
    assert error.value.path == str(path) and problem in error.value.problem, message
    return message


def test_a_written_checkpoint_reads_back_equal(written):
    assert Path(written.path).name == "step-4.ckpt" and written.step == 4
    assert written.nbytes == os.path.getsize(written.path)
    assert re.fullmatch(r"crc32:[0-9a-f]{8}", written.checksum)
    assert same(read(written.path, written.checksum).load(), state())
    assert same(read(written.path, None).load(), state())


def test_a_read_state_is_writable_and_its_buffers_are_laid_out_aligned(written):
    snapshot = read(written.path, written.checksum)
    back = snapshot.load()
    back["weights"][0, 0] = 1.0   # a resumed trial trains on it
    back["tensor"].add_(1)
    base = np.frombuffer(snapshot.block, np.uint8).ctypes.data
    assert all((np.frombuffer(buffer, np.uint8).ctypes.data - base) % 64 == 0
               for buffer in snapshot.buffers)
    assert back["weights"].flags.aligned and back["ints"].flags.aligned


def test_the_checksum_depends_on_the_content(tmp_path):
    one = write(take({"x": np.zeros(10_000)}), tmp_path / "a.ckpt", 1)
    two = write(take({"x": np.ones(10_000)}), tmp_path / "b.ckpt", 1)
    again = write(take({"x": np.zeros(10_000)}), tmp_path / "c.ckpt", 1)
    assert one.checksum != two.checksum and one.checksum == again.checksum


@pytest.mark.parametrize("value", [{}, None, {"step": 3}, np.zeros(0), b"x" * 100_000])
def test_states_without_or_with_few_buffers_round_trip(tmp_path, value):
    path = write(take(value), tmp_path / "s.ckpt", 0).path
    back = read(path, None).load()
    if isinstance(value, np.ndarray):
        assert back.shape == value.shape
    else:
        assert back == value


def test_write_creates_the_folders_and_leaves_nothing_else(tmp_path):
    path = checkpoint_path(tmp_path / "checkpoints" / "study", 7, 1)
    write(take(state()), path, 1)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "checkpoints", "checkpoints/study", "checkpoints/study/trial-7",
        "checkpoints/study/trial-7/step-1.ckpt"]


def test_a_rewrite_replaces_the_file_whole(tmp_path):
    path = tmp_path / "s.ckpt"
    write(take({"x": np.zeros(50_000)}), path, 1)
    second = write(take({"x": np.arange(10)}), path, 1)
    assert np.array_equal(read(path, second.checksum).load()["x"], np.arange(10))
    assert os.listdir(tmp_path) == ["s.ckpt"]


def test_the_file_and_every_folder_it_made_are_fsynced_before_it_counts(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(source, target) -> None:
        synced.append(f"rename {Path(source).name} -> {Path(target).name}")
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = checkpoint_path(tmp_path / "study", 2, 5)
    write(take(state()), path, 5)
    rename = next(i for i, what in enumerate(synced) if what.startswith("rename"))
    assert is_temporary(synced[rename - 1]), synced          # the data, before the rename
    assert synced[rename].endswith("-> step-5.ckpt")
    assert synced[rename + 1:] == [str(path.parent)]          # the new name, after it
    made = synced[:rename - 1]
    assert str(tmp_path) in made and str(tmp_path / "study") in made   # folders it created


def test_a_failed_write_removes_its_temporary_file_and_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "s.ckpt"
    old = write(take(state()), path, 1)

    def full(fd: int, data: memoryview) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "_write_all", full)
    with pytest.raises(OSError) as error:
        write(take({"x": np.ones(100_000)}), path, 2)
    assert error.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == ["s.ckpt"]
    assert same(read(path, old.checksum).load(), state())


def test_a_crash_mid_write_leaves_the_old_file_and_a_temporary_one_the_layout_recognises(tmp_path):
    """A process SIGKILLed between writing and renaming (its fsync: the data is out)."""
    path = tmp_path / "trial-0" / "step-3.ckpt"
    old = write(take(state()), path, 3)
    program = textwrap.dedent(f"""
        import os, signal, numpy as np
        from diel.checkpoints import take, write
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
        write(take({{"x": np.ones(100_000)}}), {str(path)!r}, 3)
    """)
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO, timeout=60, capture_output=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    leftovers = [name for name in os.listdir(path.parent) if name != "step-3.ckpt"]
    assert len(leftovers) == 1 and is_temporary(path.parent / leftovers[0]), leftovers
    assert same(read(path, old.checksum).load(), state())   # the final name: still the old file


def test_corrupt_checkpoint_is_a_diel_error_and_a_value_error(tmp_path):
    with pytest.raises(CorruptCheckpoint) as error:
        read(tmp_path / "none.ckpt", None)
    assert isinstance(error.value, DielError) and isinstance(error.value, ValueError)


def test_a_missing_file(tmp_path):
    message = corrupt(str(tmp_path / "step-1.ckpt"), "cannot open it: No such file or directory (ENOENT)")
    assert str(tmp_path / "step-1.ckpt") in message


def test_a_path_the_system_cannot_take():
    corrupt("/tmp/a\0b.ckpt", "cannot open it")


def test_a_folder_instead_of_a_file(tmp_path):
    corrupt(str(tmp_path), "cannot read it: Is a directory (EISDIR)")


@pytest.mark.parametrize("size", [0, 5, 23])
def test_a_short_file(tmp_path, size, written):
    path = tmp_path / "short.ckpt"
    path.write_bytes(Path(written.path).read_bytes()[:size])
    corrupt(str(path), "not a diel checkpoint" if size < 24 else "truncated")


def test_a_foreign_file(tmp_path):
    import torch

    path = tmp_path / "model.pt"
    torch.save({"w": torch.zeros(1000)}, path)
    corrupt(str(path), "not a diel checkpoint")
    (tmp_path / "notes.txt").write_text("x" * 5000)
    corrupt(str(tmp_path / "notes.txt"), "not a diel checkpoint")


@pytest.mark.parametrize("keep", [30, 100, 2000, -1])
def test_a_truncated_file(tmp_path, written, keep):
    data = Path(written.path).read_bytes()
    Path(written.path).write_bytes(data[:keep])
    corrupt(written.path, "truncated")


def test_a_file_with_bytes_appended(written):
    with open(written.path, "ab") as f:
        f.write(b"\0" * 64)
    corrupt(written.path, "too long")


def test_a_newer_format_version(written):
    data = bytearray(Path(written.path).read_bytes())
    data[8:10] = (2).to_bytes(2, "little")
    Path(written.path).write_bytes(data)
    corrupt(written.path, "format version 2; this diel reads version 1")


def test_every_flipped_bit_is_caught(written):
    """A bit flipped anywhere, header, pickle stream, padding or buffers, is refused."""
    size = Path(written.path).stat().st_size
    offsets = sorted({*range(0, 200), *range(200, size, max(1, size // 300)), size - 1})
    # Each bit is flipped in place and back: rewriting the whole file each time (truncated
    # on open) made each open wait for ext4 to write the old contents out (2.5 ms each).
    with open(written.path, "r+b") as file:
        for offset in offsets:
            for bit in (0, 7):
                flip(file, offset, 1 << bit)
                with pytest.raises(CorruptCheckpoint):
                    read(written.path, None)
                flip(file, offset, 1 << bit)
    assert same(read(written.path, written.checksum).load(), state())


def flip(file: BinaryIO, offset: int, mask: int) -> None:
    """XOR the byte at ``offset`` of ``file`` (open for update) with ``mask``, written
    through to the file before :func:`read` opens it."""
    file.seek(offset)
    byte = file.read(1)[0]
    file.seek(offset)
    file.write(bytes([byte ^ mask]))
    file.flush()


def test_a_flipped_byte_in_the_buffers_is_named_damaged(written):
    data = bytearray(Path(written.path).read_bytes())
    data[-1000] ^= 0xFF
    Path(written.path).write_bytes(data)
    message = corrupt(written.path, "damaged: its content's checksum is crc32:")
    assert f"its header says {written.checksum}" in message


def test_another_checkpoint_than_the_one_recorded(written, tmp_path):
    other = write(take({"x": np.ones(10_000)}), tmp_path / "other.ckpt", 4)
    with pytest.raises(CorruptCheckpoint) as error:
        read(other.path, written.checksum)
    assert error.value.problem == f"holds checkpoint {other.checksum}, not the {written.checksum} recorded for it"


def test_os_reason_names_the_error():
    assert files.os_reason(OSError(errno.ENOSPC, "No space left on device")) == \
        "No space left on device (ENOSPC)"
    assert files.os_reason(OSError("odd")) == "odd"


def test_unpack_checks_a_file_image_in_memory_and_loads_it_without_a_copy(written):
    image = np.fromfile(written.path, np.uint8)     # as a checkpoint comes from the space
    back = unpack(image, written.checksum, "the space's copy").load()
    assert same(back, state())
    start, end = image.ctypes.data, image.ctypes.data + image.nbytes
    assert start <= back["weights"].ctypes.data < end            # a view of the image
    assert start <= back["tensor"].data_ptr() < end


@pytest.mark.parametrize("damage, problem", [
    (lambda image: image.__setitem__(-5, image[-5] ^ 1), "damaged"),
    (lambda image: image.__setitem__(0, 0), "not a diel checkpoint"),
])
def test_unpack_refuses_a_damaged_image_naming_it(written, damage, problem):
    image = np.fromfile(written.path, np.uint8)
    damage(image)
    with pytest.raises(CorruptCheckpoint) as error:
        unpack(image, None, "trial 3's copy in memory")
    assert str(error.value).startswith("checkpoint trial 3's copy in memory: " + problem)


def test_unpack_refuses_a_short_image_and_another_checkpoint(written):
    image = np.fromfile(written.path, np.uint8)
    with pytest.raises(CorruptCheckpoint, match="truncated"):
        unpack(image[:-64].copy(), None, "copy")
    with pytest.raises(CorruptCheckpoint, match="not the crc32:00000000 recorded for it"):
        unpack(image, "crc32:00000000", "copy")


def test_unpack_without_the_whole_pass_checks_all_but_the_bytes_content(written):
    """A copy checked when it was put (the tuple space's) is read without a pass over its
    bytes: its layout and recorded checksum still decide."""
    image = np.fromfile(written.path, np.uint8)
    image[-5] ^= 1   # damage the pass alone would see
    back = unpack(image, written.checksum, "copy", whole_pass=False).load()
    assert back["weights"].shape == state()["weights"].shape
    with pytest.raises(CorruptCheckpoint, match="not the crc32:00000000 recorded for it"):
        unpack(image, "crc32:00000000", "copy", whole_pass=False)
    with pytest.raises(CorruptCheckpoint, match="truncated"):
        unpack(image[:-64].copy(), written.checksum, "copy", whole_pass=False)
    image[0] = 0
    with pytest.raises(CorruptCheckpoint, match="not a diel checkpoint"):
        unpack(image, written.checksum, "copy", whole_pass=False)
    with pytest.raises(ValueError, match="needs the recorded checksum"):
        unpack(image, None, "copy", whole_pass=False)


def test_unpack_needs_writable_memory(written):
    with pytest.raises(ValueError, match="writable"):
        unpack(Path(written.path).read_bytes(), None, "copy")


def test_a_fifo_under_the_name_is_refused_at_once_not_waited_on(tmp_path):
    """Opening a FIFO to read waits for a writer: a checkpoint path must not hang a resume."""
    path = tmp_path / "step-1.ckpt"
    os.mkfifo(path)
    done = subprocess.run([sys.executable, "-c", "import sys; from diel.checkpoints import read; "
                           "read(sys.argv[1], None)", str(path)],
                          cwd=REPO, capture_output=True, text=True, timeout=20)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (f"diel.checkpoints.files.CorruptCheckpoint: checkpoint "
                                            f"{path}: cannot read it: Illegal seek (ESPIPE)")
