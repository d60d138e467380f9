"""Turning values into (meta, data) for the wire, and back.

* ``None``, ``bool``, ``int``, ``float``, short ``str``/``bytes``: sent as they are
  inside the envelope (``meta = (IMMEDIATE, value)``, no data): no extra pickling.
* NumPy arrays (and CuPy arrays, copied to host memory first: the PyPI MPI is not
  CUDA-aware): ``meta = (ARRAY, dtype descr, shape, device)`` and ``data`` the raw
  bytes as a flat ``uint8`` array, sent as a raw MPI buffer, never pickled.
* Anything else: ``meta = PICKLED`` and ``data`` the pickle (protocol 5).

The server never decodes values: it stores (meta, data) and forwards it. NumPy is
imported only by a process that decodes an array: a value can be a NumPy array only
once NumPy is loaded, so encoding looks for it in ``sys.modules`` (a server, or a
client that never meets an array, starts without NumPy's ~0.1 s of imports).
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

from .errors import ValueEncodingError

__all__ = ["encode", "decode", "encode_array", "decode_array", "is_array", "payload_nbytes",
           "nbytes", "copy_bytes"]

IMMEDIATE = 0
PICKLED = 1
ARRAY = 2

_IMMEDIATE_TYPES = (type(None), bool, int, float)
_IMMEDIATE_MAX = 4096


def _is_numpy_array(value: Any) -> bool:
    """True for a NumPy array (without importing NumPy: none exists before it is loaded)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.ndarray)


def _cupy_module(value: Any) -> Any:
    """The cupy module if ``value`` is a CuPy array (without importing CuPy otherwise)."""
    if type(value).__module__.startswith("cupy") and "cupy" in sys.modules:
        cp = sys.modules["cupy"]
        if isinstance(value, cp.ndarray):
            return cp
    return None


def is_array(value: Any) -> bool:
    """True for NumPy and CuPy arrays."""
    return _is_numpy_array(value) or _cupy_module(value) is not None


def encode_array(value: Any, tag: str) -> tuple[tuple, Any]:
    """(meta, flat uint8 view) for a NumPy or CuPy array; object arrays are refused."""
    device = "cpu"
    cp = _cupy_module(value)
    if cp is not None:
        value = cp.asnumpy(value)
        device = "cupy"
    elif not _is_numpy_array(value):
        raise ValueEncodingError(f"tag {tag!r}: expected a NumPy or CuPy array, "
                                 f"got {type(value).__name__}")
    if value.dtype.hasobject:
        raise ValueEncodingError(f"tag {tag!r}: arrays of dtype object cannot travel as raw "
                                 "buffers; put them as ordinary (pickled) values")
    import numpy as np
    from numpy.lib import format as npformat

    shape = value.shape   # np.ascontiguousarray would turn a 0-d array into shape (1,)
    arr = value if value.flags.c_contiguous else np.ascontiguousarray(value)
    return (ARRAY, npformat.dtype_to_descr(arr.dtype), shape, device), arr.reshape(-1).view(np.uint8)


def encode(value: Any, tag: str) -> tuple[Any, Any]:
    """(meta, data) for any value: immediate, raw array or pickle."""
    kind = type(value)
    if kind in _IMMEDIATE_TYPES or ((kind is str or kind is bytes) and len(value) <= _IMMEDIATE_MAX):
        return (IMMEDIATE, value), None
    np = sys.modules.get("numpy")
    if np is not None and kind is np.ndarray and not value.dtype.hasobject:
        return encode_array(value, tag)
    if _cupy_module(value) is not None:
        return encode_array(value, tag)
    try:
        return PICKLED, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # pickle raises many types (TypeError, PicklingError, AttributeError)
        raise ValueEncodingError(f"tag {tag!r}: value of type {kind.__name__} cannot be "
                                 f"pickled: {e}") from e


def decode_array(meta: tuple, data: Any) -> Any:
    """Rebuild an array from its meta and raw bytes (a CuPy array if it was one and CuPy loads)."""
    import numpy as np
    from numpy.lib import format as npformat

    _, descr, shape, device = meta
    dtype = npformat.descr_to_dtype(descr)
    flat = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    arr = flat.view(dtype).reshape(shape)
    if not arr.flags.writeable:
        arr = arr.copy()
    if device == "cupy":
        try:
            import cupy
        except ImportError:
            return arr
        return cupy.asarray(arr)
    return arr


def decode(meta: Any, data: Any) -> Any:
    """The value that :func:`encode` turned into (meta, data)."""
    if meta == PICKLED:
        return pickle.loads(data)
    if meta[0] == IMMEDIATE:
        return meta[1]
    return decode_array(meta, data)


def payload_nbytes(meta: Any, data: Any) -> int:
    """Approximate size of an encoded value on the wire (for the size limit)."""
    if data is not None:
        return nbytes(data)
    value = meta[1]
    return len(value) if isinstance(value, (str, bytes)) else 8


def nbytes(data: Any) -> int:
    """The size in bytes of a payload: an array's ``nbytes``, else its length (bytes)."""
    size = getattr(data, "nbytes", None)
    return len(data) if size is None else size


def copy_bytes(target: Any, source: Any) -> None:
    """Copy the bytes of ``source`` into the writable buffer ``target`` (same size)."""
    memoryview(target).cast("B")[:] = memoryview(source).cast("B")
