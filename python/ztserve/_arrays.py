"""Turning verified buffers into arrays: numpy without a copy (the array's
base is the buffer, which owns its 64-byte-aligned memory), torch sharing
that memory, and the dtypes numpy lacks (bfloat16, float8) from
``ml_dtypes``."""

from __future__ import annotations

import numpy as np

try:  # ml_dtypes is a dependency, but keep numpy's own dtypes usable alone.
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

_NUMPY = {
    "f64": np.float64,
    "f32": np.float32,
    "f16": np.float16,
    "i64": np.int64,
    "i32": np.int32,
    "i16": np.int16,
    "i8": np.int8,
    "u64": np.uint64,
    "u32": np.uint32,
    "u16": np.uint16,
    "u8": np.uint8,
    "bool": np.bool_,
}

_ML = {
    "bf16": "bfloat16",
    "f8_e4m3fn": "float8_e4m3fn",
    "f8_e5m2": "float8_e5m2",
    "f8_e4m3fnuz": "float8_e4m3fnuz",
    "f8_e5m2fnuz": "float8_e5m2fnuz",
}

_COMPLEX = {"complex64": np.complex64, "complex128": np.complex128}

_TORCH = {
    "f64": "float64",
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "i64": "int64",
    "i32": "int32",
    "i16": "int16",
    "i8": "int8",
    "u64": "uint64",
    "u32": "uint32",
    "u16": "uint16",
    "u8": "uint8",
    "bool": "bool",
    "f8_e4m3fn": "float8_e4m3fn",
    "f8_e5m2": "float8_e5m2",
    "f8_e4m3fnuz": "float8_e4m3fnuz",
    "f8_e5m2fnuz": "float8_e5m2fnuz",
    "complex64": "complex64",
    "complex128": "complex128",
}


def _element(dtype: str, logical: str | None) -> str:
    """The element type: the logical type when it is a numeric one, else
    the stored dtype (a GGUF block type such as ``q8_0`` is served as the
    ``u8`` bytes it is stored as)."""
    if logical is not None and (logical in _ML or logical in _COMPLEX):
        return logical
    return dtype


def numpy_dtype(dtype: str, logical: str | None) -> np.dtype:
    """The numpy dtype of a component stored as ``dtype`` that means
    ``logical`` (bfloat16 and float8 come from ml_dtypes)."""
    name = _element(dtype, logical)
    if name in _NUMPY:
        return np.dtype(_NUMPY[name])
    if name in _COMPLEX:
        return np.dtype(_COMPLEX[name])
    if name in _ML:
        if ml_dtypes is None:
            raise ImportError(f"{name} needs the ml_dtypes package")
        return np.dtype(getattr(ml_dtypes, _ML[name]))
    raise TypeError(f"no numpy dtype for {name!r}")


def to_numpy(buf, dtype: str, logical: str | None, shape) -> np.ndarray:
    """A numpy array over ``buf`` (no copy), shaped ``shape``."""
    dt = numpy_dtype(dtype, logical)
    arr = np.frombuffer(buf, dtype=dt)
    return arr.reshape(tuple(shape)) if shape is not None else arr


def to_torch(buf, dtype: str, logical: str | None, shape, device: str):
    """A torch tensor sharing ``buf``'s memory (copied to ``device`` when
    that is not the CPU)."""
    import torch

    name = _element(dtype, logical)
    tdtype = getattr(torch, _TORCH.get(name, ""), None)
    if tdtype is None:
        raise TypeError(f"this torch has no dtype for {name!r}")
    shape = tuple(shape) if shape is not None else None
    if len(buf) == 0:
        t = torch.empty(shape if shape is not None else (0,), dtype=tdtype)
    else:
        t = torch.frombuffer(buf, dtype=tdtype)
        if shape is not None:
            t = t.reshape(shape)
    if device != "cpu":
        t = t.to(device)
    return t
