"""ztserve: lazy, verified loading of tensors from a ztserve daemon
(``quic://`` or ``http(s)://``), any HTTP Range server, or a local
``.zt``, safetensors or GGUF file, into numpy arrays or torch tensors.

    import ztserve

    with ztserve.safe_open("http://127.0.0.1:7070/model.safetensors") as f:
        for name in f.keys():
            print(name, f.get_slice(name).get_shape())
        w = f.get_tensor("model.layers.0.self_attn.q_proj.weight")

Every byte is checked against its digest before Python sees it. Errors
are ``ztserve.Error`` and its subclasses: ``ConnectError``,
``NotFoundError``, ``RefusedError``, ``IntegrityError``, ``ProtocolError``
(and ``UsageError``, also a ``ValueError``), each with ``object``,
``component`` and ``rule`` attributes where they apply.
"""

import os

from . import _hub
from ._handle import TensorSlice, UsageError, load, safe_open
from ._native import (
    ConnectError,
    Error,
    IntegrityError,
    NotFoundError,
    ProtocolError,
    RefusedError,
)
from ._native import fetch as _fetch


def fetch(url, output, select=None, progress=None, **options) -> dict:
    """What ``zt fetch`` does: writes the selected objects of ``url`` to
    ``output`` (a ``.zt`` file, or a byte-identical copy when ``output``
    is named after the source: ``.safetensors``, ``.gguf``, or a directory
    for a sharded checkpoint), every component verified, resumable (run it
    again after an interruption), renamed into place only when complete.
    ``progress`` is ``True`` for a tqdm bar or a callable
    ``(name, done_bytes, total_bytes)``. ``url`` may be an ``hf://`` URL
    (see ``safe_open``). Returns ``path``, ``objects``, ``bytes`` and
    ``resumed``."""
    if isinstance(select, str):
        select = [select]
    finish = lambda: None  # noqa: E731
    if progress is True:
        try:
            from tqdm import tqdm

            bar = tqdm(unit="B", unit_scale=True)

            def progress(_name, done, total):
                bar.total = total
                bar.update(done - bar.n)

            finish = bar.close
        except ImportError:
            progress = None
    url, pinned = _hub.resolve(str(url), options.pop("endpoint", None), options.get("token"))
    try:
        done = _fetch(url, output, select=select, progress=progress or None, options=options)
    finally:
        finish()
    if pinned is not None:
        try:
            pinned()
        except Error:
            # Written from another commit than the one asked for.
            path = done.get("path")
            if path and os.path.isfile(path):
                os.remove(path)
            raise
    return done


__all__ = [
    "ConnectError",
    "Error",
    "IntegrityError",
    "NotFoundError",
    "ProtocolError",
    "RefusedError",
    "TensorSlice",
    "UsageError",
    "fetch",
    "load",
    "safe_open",
]
