"""``safe_open``: the safetensors-style handle over a served or local file."""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Iterator

from . import _arrays, _hub
from ._native import Error, Session


class UsageError(Error, ValueError):
    """A call the object does not support: ``get_tensor`` of an object
    that is not dense, an unknown framework, a device numpy cannot use."""


def _progress(progress, total: int):
    """A callable ``(name, done, total)`` for ``progress=``: ``True`` for
    a tqdm bar (when tqdm is installed), a callable as it is, or ``None``."""
    if progress is None or progress is False:
        return None, lambda: None
    if callable(progress):
        return progress, lambda: None
    try:
        from tqdm import tqdm
    except ImportError:
        return None, lambda: None
    bar = tqdm(total=total, unit="B", unit_scale=True)

    def update(_name, done, _total):
        bar.update(done - bar.n)

    return update, bar.close


class safe_open:
    """Opens ``source`` for lazy loading, like ``safetensors.safe_open``.

    ``source`` is a ``quic://`` or ``http(s)://`` URL (a file, or a sharded
    safetensors index), an ``hf://ORG/NAME[@REVISION]/PATH`` URL of a Hub
    repository the daemon at ``endpoint=`` (else ``$ZTSERVE_ENDPOINT``,
    else ``$HF_ENDPOINT``) serves, or a local path (``.zt``,
    ``.safetensors``, ``.gguf``). Opening reads only the manifest; each tensor is fetched
    when asked for, and every byte is verified against its digest before
    it is returned.

    ``framework`` is ``"np"`` (numpy arrays that own their 64-byte-aligned
    memory, no copy) or ``"pt"`` (torch tensors sharing that memory;
    torch must be installed; ``device="cuda:N"`` copies to the device).

    Options: ``select`` (globs: open only the matching objects),
    ``verify`` (default ``True``: bytes without a digest are refused;
    ``False`` accepts them unverified), ``token`` (bearer token),
    ``insecure`` (trust any certificate), ``cert_fingerprint`` (trust
    exactly this certificate), ``ca`` (a PEM file of trusted roots),
    ``connections`` (per fetch: parallel HTTP requests, default 8, or
    QUIC connections each carrying a share of the components in layer
    order, balanced by bytes, default one for each two cores from 2
    to 8, more than 64 counting as 64),
    ``max_buffered_bytes``
    (received bytes held ahead of the caller per fetch), ``timeout``
    (seconds a server may stay silent, and each wait's limit),
    ``max_udp_payload`` (the largest datagram ztp/1 may grow to),
    ``busy_wait`` (seconds, default 30: how long in all a request the
    server refuses as busy, with a wait to retry after, is sent again),
    ``progress`` (``True`` for a tqdm bar, or a callable
    ``(name, done_bytes, total_bytes)``).

    The cache (docs/cache.md): components named by a sha256 (or blake3) digest are
    taken from ``~/.cache/ztserve`` (``$ZTSERVE_CACHE``) wherever the same
    digest was fetched before, checked again on reading, and only the
    rest is fetched; ``cache=False`` turns it off, ``cache_dir`` and
    ``cache_max`` (bytes, or ``"64G"``) choose another folder and bound.
    ``mmap=True`` hands cached components over without a copy: arrays over
    a copy-on-write mapping of the cache's file (numpy arrays read-only;
    a torch tensor written in place changes its own pages, never the cache).

    Use it as a context manager: leaving the block (or ``close()``)
    cancels what is still in flight.
    """

    def __init__(self, source, framework: str = "np", device: str = "cpu", **options: Any):
        if framework not in ("np", "numpy", "pt", "torch"):
            raise UsageError(f"framework={framework!r}: use 'np' or 'pt'")
        self._torch = framework in ("pt", "torch")
        if not self._torch and device != "cpu":
            raise UsageError(f"device={device!r}: numpy arrays live on the CPU; use framework='pt'")
        self._device = device
        select = options.pop("select", None)
        if isinstance(select, str):
            select = [select]
        self._progress_option = options.pop("progress", None)
        self._wait = options.get("timeout")
        max_buffered = options.pop("max_buffered_bytes", None)
        source, pinned = _hub.resolve(os.fspath(source), options.pop("endpoint", None), options.get("token"))
        self._session = Session.open(
            source,
            select=list(select) if select else None,
            max_buffered_bytes=max_buffered,
            options=options,
        )
        if pinned is not None:
            try:
                pinned()
            except Error:
                self._session.close()
                raise
        manifest = json.loads(self._session.manifest_json())
        self._manifest = manifest
        self._objects: dict = manifest["objects"]
        self._keys: list[str] = self._session.keys()

    # The context manager and closing.
    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Cancels what is in flight; waiting calls raise ``ztserve.Error``."""
        self._session.close()

    # What the file holds.
    def keys(self) -> list[str]:
        """The object names, in the order their bytes lie in the file."""
        return list(self._keys)

    def metadata(self) -> dict[str, Any]:
        """The file's attributes (a safetensors file's ``__metadata__``)."""
        return dict(self._manifest.get("attributes") or {})

    def info(self, name: str) -> dict:
        """The manifest entry of ``name``: format, shape, layer, attributes
        and each component's dtype, encoding, length and digest."""
        return self._object(name)

    @property
    def etag(self) -> str | None:
        """The served file's ETag: every fetch of this handle is pinned to it."""
        return self._session.etag

    @property
    def source(self) -> str:
        """The file's source format: zt, safetensors, safetensors-index, gguf,
        matrix-atom, matrix-atom-pack."""
        return self._session.source

    # Loading.
    def prefetch(self, names: Iterable[str]) -> None:
        """Starts fetching ``names`` in the background; ``get_tensor`` of
        one of them then waits only for what is left."""
        names = [self._check(n) for n in names]
        self._session.drop_batch(self._session.start(names))

    def get_tensor(self, name: str):
        """The dense tensor ``name``, fetched (unless prefetched) and
        verified. An object that is not dense raises ``UsageError`` naming
        its format: use ``get_object``."""
        obj = self._object(name)
        if obj["format"] != "dense":
            raise UsageError(
                f"{name!r} is a {obj['format']} object, not a dense tensor; get_object() returns its components"
            )
        return self._build(name, self._take(name))

    def get_object(self, name: str) -> dict:
        """Every component of ``name`` (any format), as arrays by role
        (``data``, ``offsets``, ``values``, ``indices``...), verified."""
        obj = self._object(name)
        parts = self._take(name)
        shape = obj["shape"] if obj["format"] == "dense" else None
        return {
            role: self._array(buf, dt, lt, shape if role == "data" else None)
            for role, buf, dt, lt in parts
        }

    def get_slice(self, name: str) -> "TensorSlice":
        """A lazy view of ``name``: ``get_shape()``, ``get_dtype()``, and
        indexing. On a raw dense tensor, a range of the first dimension
        (``[a:b]``, ``[i]``, ``[a:b, ...]``) fetches only those rows, under
        a digest of exactly those bytes that the server computed from the
        component it verified (attested by the server, not the file; a
        plain HTTP server has none, so there the whole tensor is fetched
        and verified first). Any other indexing, or an object that is not
        raw dense (zstd, quantized, GGUF blocks, ragged...), fetches the
        whole object, verifies it against its digest, then slices it."""
        obj = self._object(name)
        return TensorSlice(self, name, obj)

    def shard(self, name: str, rank: int, world: int, dim: int = 0):
        """Tensor-parallel rank ``rank``'s block of ``name`` out of
        ``world``: the ``rank``-th of ``world`` equal parts along dimension
        ``dim`` (see docs/python.md for the layouts), fetched alone as
        ``get_slice`` fetches a block. The dimension must divide evenly."""
        shape = self._object(name)["shape"]
        if not (isinstance(dim, int) and 0 <= dim < len(shape)):
            raise UsageError(f"{name!r}: dim={dim!r}: the tensor has {len(shape)} dimensions")
        n = shape[dim]
        if not (isinstance(world, int) and world > 0 and isinstance(rank, int) and 0 <= rank < world):
            raise UsageError(f"{name!r}: rank {rank!r} of world {world!r}: need 0 <= rank < world")
        if n % world:
            raise UsageError(f"{name!r}: dimension {dim} ({n}) does not split into {world} equal parts")
        step = n // world
        key = (*([slice(None)] * dim), slice(rank * step, (rank + 1) * step))
        return self.get_slice(name)[key]

    def tensors(self, names: Iterable[str] | None = None) -> Iterator[tuple[str, Any]]:
        """Yields ``(name, tensor)`` for ``names`` (default: every key) in
        the order they arrive: the server sends layer 0 first, so a caller
        can start on it while later layers are in flight. An object that is
        not dense is yielded as ``get_object`` would return it."""
        wanted = [self._check(n) for n in (self._keys if names is None else names)]
        total = sum(self._stored_bytes(n) for n in wanted)
        report, finish = _progress(self._progress_option, total)
        batch = self._session.start(wanted)
        done = 0
        try:
            while True:
                item = self._session.next(batch, self._wait)
                if item is None:
                    return
                name, parts = item
                done += self._stored_bytes(name)
                if report is not None:
                    report(name, done, total)
                if self._object(name)["format"] == "dense":
                    yield name, self._build(name, parts)
                else:
                    yield name, {role: self._array(b, dt, lt, None) for role, b, dt, lt in parts}
        finally:
            self._session.drop_batch(batch)
            finish()

    # Helpers.
    def _check(self, name: str) -> str:
        self._object(name)
        return name

    def _object(self, name: str) -> dict:
        try:
            return self._objects[name]
        except KeyError:
            from ._native import NotFoundError

            raise NotFoundError(f"{self._session.label}: no object {name!r}") from None

    def _stored_bytes(self, name: str) -> int:
        return sum(c["length"] for c in self._objects[name]["components"].values())

    def _take(self, name: str):
        return self._session.get(name, self._wait)

    def _build(self, name: str, parts):
        obj = self._objects[name]
        for role, buf, dtype, logical in parts:
            if role == "data":
                return self._array(buf, dtype, logical, obj["shape"])
        raise Error(f"{name!r}: no data component")

    def _array(self, buf, dtype, logical, shape):
        if self._torch:
            return _arrays.to_torch(buf, dtype, logical, shape, self._device)
        arr = _arrays.to_numpy(buf, dtype, logical, shape)
        if getattr(buf, "mapped", False):
            # The cache's bytes, shared with every process that maps them.
            arr.flags.writeable = False
        return arr


class TensorSlice:
    """``safe_open.get_slice``: the shape and dtype without fetching, and
    the tensor's rows (or any other indexing) on demand."""

    def __init__(self, handle: safe_open, name: str, obj: dict):
        self._handle, self._name, self._obj = handle, name, obj

    def get_shape(self) -> list[int]:
        return list(self._obj["shape"])

    def get_dtype(self) -> str:
        """The dtype in safetensors' spelling (``F32``, ``BF16``, ``F8_E4M3``...)."""
        c = self._obj["components"].get("data") or next(iter(self._obj["components"].values()))
        return _SAFETENSORS_DTYPE.get(c["type"] or c["dtype"], (c["type"] or c["dtype"]).upper())

    def __getitem__(self, key):
        """Basic indexing (integers and step-1 slices, one per leading
        dimension) of a raw dense object fetches only what it names: rows
        along dimension 0 by themselves (over either transport), any other
        block gathered by a ztserve daemon over HTTP (``?slice=``, its
        digest checked) or cut from the verified whole elsewhere. Anything
        else (steps, masks, ``...``) indexes the whole tensor."""
        keys = key if isinstance(key, tuple) else (key,)
        shape = list(self._obj["shape"])
        data = self._obj["components"].get("data")
        raw_dense = (
            self._obj["format"] == "dense"
            and data is not None
            and data["encoding"] == "raw"
            and data.get("placement", "file") == "file"
            and shape
        )
        basic = all(isinstance(k, int) or (isinstance(k, slice) and k.step in (None, 1)) for k in keys)
        if not (raw_dense and basic and 0 < len(keys) <= len(shape)):
            whole = self._handle.get_tensor(self._name)
            return whole[key]
        ranges, squeeze = [], []
        for d, k in enumerate(keys):
            n = shape[d]
            if isinstance(k, int):
                i = k + n if k < 0 else k
                if not 0 <= i < n:
                    raise IndexError(f"{self._name!r}: index {k} is outside dimension {d} of {n}")
                ranges.append((i, i + 1))
                squeeze.append(d)
            else:
                a, b, _ = k.indices(n)
                ranges.append((a, max(a, b)))
        ranges += [(0, n) for n in shape[len(ranges):]]
        sliced = [b - a for a, b in ranges]
        if 0 in sliced:
            got = self._handle._array(memoryview(b""), data["dtype"], data["type"], sliced)
        elif all(r == (0, n) for r, n in zip(ranges[1:], shape[1:])):
            got = self._rows(*ranges[0])
        else:
            got = self._slice(ranges)
        return got[tuple(0 if d in squeeze else slice(None) for d in range(len(shape)))]

    def _rows(self, start: int, stop: int):
        h = self._handle
        parts = h._session.rows(self._name, start, stop)
        (_role, buf, dtype, logical) = parts[0]
        return h._array(buf, dtype, logical, [stop - start, *self._obj["shape"][1:]])

    def _slice(self, ranges):
        h = self._handle
        spec = ",".join(f"{a}:{b}" for a, b in ranges)
        parts, shape = h._session.slice(self._name, spec)
        (_role, buf, dtype, logical) = parts[0]
        return h._array(buf, dtype, logical, list(shape))


_SAFETENSORS_DTYPE = {
    "f64": "F64",
    "f32": "F32",
    "f16": "F16",
    "bf16": "BF16",
    "i64": "I64",
    "i32": "I32",
    "i16": "I16",
    "i8": "I8",
    "u64": "U64",
    "u32": "U32",
    "u16": "U16",
    "u8": "U8",
    "bool": "BOOL",
    "f8_e4m3fn": "F8_E4M3",
    "f8_e5m2": "F8_E5M2",
    "complex64": "C64",
}


# Blocks of a sharded load in flight at once.
_SHARDS_AT_ONCE = 8


def load(source, select=None, framework: str = "np", shard=None, dims=None, **options) -> dict[str, Any]:
    """Every selected tensor of ``source`` (see ``safe_open``) as a dict,
    in file order, each verified. Objects that are not dense are included
    as ``get_object`` returns them.

    ``shard=(rank, world)`` with ``dims={glob: dim}`` loads one
    tensor-parallel rank's part: each tensor whose name matches a glob (the
    first that matches, ``fnmatch`` style) is ``safe_open.shard``'s block
    along that dimension, fetched alone; every other tensor whole (the
    replicated ones: norms, embeddings, a row-parallel layer's bias)."""
    with safe_open(source, framework=framework, select=select, **options) as f:
        if shard is None:
            got = dict(f.tensors())
            return {k: got[k] for k in f.keys() if k in got}
        rank, world = shard
        from fnmatch import fnmatchcase

        def dim_of(name):
            return next((d for glob, d in (dims or {}).items() if fnmatchcase(name, glob)), None)

        split = {k: dim_of(k) for k in f.keys()}
        whole = [k for k, d in split.items() if d is None]
        cut = [(k, d) for k, d in split.items() if d is not None]
        # The blocks several at once (each is one request, gathered by the
        # daemon; the waits release the GIL), the whole tensors meanwhile.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, min(_SHARDS_AT_ONCE, len(cut)))) as pool:
            blocks = [(k, pool.submit(f.shard, k, rank, world, d)) for k, d in cut]
            got = dict(f.tensors(whole)) if whole else {}
            for k, fut in blocks:
                got[k] = fut.result()
        return {k: got[k] for k in f.keys() if k in got}
