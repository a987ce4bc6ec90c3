"""The Python package (`pip install ./python`, import name `ztserve`)
against a real daemon over both transports, a plain nginx, and local
files: every tensor of a real model equal to what the `safetensors`
package loads, laziness proved by the server's byte counters, arrival
order, and each kind of failure raising its own exception."""
import contextlib
import gc
import http.server
import os
import pathlib
import re
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

import numpy as np
import pytest
import safetensors.numpy

import ztserve
from conftest import daemon, free_port, metric, nginx, write_shards

LAYER = re.compile(r"\.layer\.(\d+)\.")


@pytest.fixture(scope="module")
def served(real_model, tmp_path_factory):
    """The real model as model.safetensors, served; (port, original tensors)."""
    base = tmp_path_factory.mktemp("pyserve")
    root = base / "root"
    root.mkdir()
    shutil.copy(real_model, root / "model.safetensors")
    with daemon(root, base) as port:
        yield port, safetensors.numpy.load_file(real_model)


def urls(port, name="model.safetensors"):
    return {
        "quic": f"quic://127.0.0.1:{port}/{name}",
        "http": f"http://127.0.0.1:{port}/{name}",
    }


def same(got, want):
    assert list(got) == list(want) or sorted(got) == sorted(want)
    for k, v in want.items():
        g = got[k]
        assert g.dtype == v.dtype and g.shape == v.shape, k
        assert np.array_equal(g, v), k


@pytest.mark.parametrize("transport", ["quic", "http"])
def test_a_file_of_more_tensors_than_a_request_may_name(tmp_path, transport):
    """5,000 tensors, past the 4,096 names one request may carry: loaded
    whole (one request of the whole file), by a selection of all but a
    few, and through a cache holding ten of them (the rest asked for by
    name, in pieces). Each asked for every name at once and was refused."""
    # Names as long as a large checkpoint's: a request by name is cut by
    # their bytes too.
    name = "model.layers.{:05}.mlp.experts.17.down_proj.weight".format
    tensors = {name(i): np.full(3, i % 251, dtype=np.uint8) for i in range(5000)}
    root = tmp_path / "root"
    root.mkdir()
    safetensors.numpy.save_file(tensors, str(root / "wide.safetensors"))
    with daemon(root, tmp_path) as port:
        url = urls(port, "wide.safetensors")[transport]
        same(ztserve.load(url, insecure=True, cache=False), tensors)
        # 00100 to 04999: 4,900 tensors by thirteen patterns.
        patterns = [f"model.layers.00{d}*" for d in range(1, 10)]
        patterns += [f"model.layers.0{d}*" for d in range(1, 5)]
        most = {k: v for k, v in tensors.items() if k >= name(100)}
        same(ztserve.load(url, insecure=True, cache=False, select=patterns), most)
        cache = str(tmp_path / "cache")
        ten = ztserve.load(url, insecure=True, cache_dir=cache, select="model.layers.0000?.*")
        assert sorted(ten) == [name(i) for i in range(10)]
        same(ztserve.load(url, insecure=True, cache_dir=cache), tensors)


@pytest.mark.parametrize("transport", ["quic", "http"])
def test_load_equals_the_safetensors_package(served, transport):
    port, original = served
    got = ztserve.load(urls(port)[transport], insecure=True)
    same(got, original)
    for arr in got.values():
        # Each array owns 64-byte-aligned memory of its own, writable.
        assert arr.ctypes.data % 64 == 0
        assert arr.flags.writeable


def test_local_files_read_with_the_same_readers(real_model, tmp_path, zt):
    original = safetensors.numpy.load_file(real_model)
    same(ztserve.load(real_model), original)
    packed = tmp_path / "m.zt"
    zt("pack", real_model, "-o", packed, "--digest", "crc32c", "--compress", "zstd:3")
    same(ztserve.load(packed), original)


def sent(port):
    """HTTP body bytes the daemon has sent, less this very /metrics answer."""
    a = metric(port, "ztserve_bytes_sent_total")
    b = metric(port, "ztserve_bytes_sent_total")
    return b, b - a


def test_opening_moves_only_the_manifest_and_a_tensor_only_its_bytes(served):
    port, original = served
    before, overhead = sent(port)
    with ztserve.safe_open(urls(port)["http"]) as f:
        keys = f.keys()
        after_open, _ = sent(port)
        manifest_bytes = after_open - before - 2 * overhead
        assert 0 < manifest_bytes < 256 << 10, manifest_bytes
        layer0 = [k for k in keys if ".layer.0." in k]
        want = sum(original[k].nbytes for k in layer0)
        f.prefetch(layer0)
        for k in layer0:
            assert np.array_equal(f.get_tensor(k), original[k])
        moved = sent(port)[0] - after_open - 2 * overhead
        assert want <= moved <= want + (64 << 10), (want, moved)
        total = sum(v.nbytes for v in original.values())
        assert moved < total / 4
    # keys() lists the file's tensors in file order.
    assert sorted(keys) == sorted(original)

    # Over ztp/1 the manifest travels on the control stream: no component
    # byte moves until a tensor is asked for, then exactly its bytes (the
    # cache off: it holds the tensor since the HTTP fetch above).
    q0 = metric(port, "ztserve_quic_bytes_sent_total")
    with ztserve.safe_open(urls(port)["quic"], insecure=True, cache=False) as f:
        f.keys()
        assert metric(port, "ztserve_quic_bytes_sent_total") == q0
        name = layer0[0]
        f.get_tensor(name)
        assert metric(port, "ztserve_quic_bytes_sent_total") - q0 == original[name].nbytes


def test_tensors_arrive_layer_by_layer_while_the_rest_is_in_flight(served):
    port, original = served
    total = sum(v.nbytes for v in original.values())
    q0 = metric(port, "ztserve_quic_bytes_sent_total")
    order, first_seen = [], None
    with ztserve.safe_open(urls(port)["quic"], insecure=True, max_buffered_bytes=2 << 20) as f:
        for name, arr in f.tensors():
            if first_seen is None:
                first_seen = metric(port, "ztserve_quic_bytes_sent_total") - q0
            assert np.array_equal(arr, original[name]), name
            order.append(name)
    assert sorted(order) == sorted(original)
    # The first tensor was in the caller's hands before half the bytes left.
    assert first_seen < total / 2, (first_seen, total)
    layers = [int(m.group(1)) for n in order if (m := LAYER.search(n))]
    assert layers[0] == 0
    last0 = max(i for i, l in enumerate(layers) if l == 0)
    first_last = min(i for i, l in enumerate(layers) if l == max(layers))
    assert last0 < first_last


@pytest.mark.parametrize("transport", ["quic", "http"])
def test_get_slice_moves_only_the_slice(served, transport):
    port, original = served
    name = "embeddings.word_embeddings.weight"
    want = original[name]
    counter = {"quic": "ztserve_quic_bytes_sent_total", "http": "ztserve_bytes_sent_total"}[transport]
    with ztserve.safe_open(urls(port)[transport], insecure=True) as f:
        s = f.get_slice(name)
        for key in [slice(100, 110), slice(-5, None), 7, (slice(3, 9), slice(2, 5))]:
            before, overhead = (metric(port, counter), 0) if transport == "quic" else sent(port)
            got = s[key]
            assert np.array_equal(got, want[key]), key
            after = metric(port, counter) if transport == "quic" else sent(port)[0] - 2 * overhead
            # Exactly the slice's bytes travelled, over either transport:
            # the daemon gathers it.
            expected = np.asarray(want[key]).nbytes
            assert after - before == expected, (key, after - before, expected)
        assert s[5:5].shape == (0, want.shape[1])
        with pytest.raises(IndexError):
            s[want.shape[0]]


def test_get_slice_and_prefetch_and_threads(served):
    port, original = served
    name = next(k for k in original if original[k].ndim == 2 and original[k].dtype == np.float32)
    with ztserve.safe_open(urls(port)["quic"], insecure=True) as f:
        s = f.get_slice(name)
        assert s.get_shape() == list(original[name].shape)
        assert s.get_dtype() == "F32"
        assert np.array_equal(s[3:7], original[name][3:7])
        assert np.array_equal(s[:, 1:4], original[name][:, 1:4])
        # Memory handed out is never reused: writing to one array leaves
        # the next fetch of the same tensor intact, in other memory.
        first = f.get_tensor(name)
        first[...] = 0
        again = f.get_tensor(name)
        assert np.array_equal(again, original[name])
        assert first.ctypes.data != again.ctypes.data
        # Several threads on one handle, each getting its own arrays.
        names = sorted(original)[:24]
        out = {}

        def work(ns):
            for n in ns:
                out[n] = f.get_tensor(n)

        threads = [threading.Thread(target=work, args=(names[i::4],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for n in names:
            assert np.array_equal(out[n], original[n])


@pytest.mark.parametrize("transport", ["quic", "http"])
def test_the_same_tensor_again_and_again(served, transport):
    """Each get_tensor starts a fetch of its own; the one before it, still
    winding down after its object was taken, must not fail the next
    (a race that once ended a repeated get_tensor with "the transfer
    ended before the object arrived")."""
    port, original = served
    name = min((k for k in original if original[k].ndim == 1), key=lambda k: original[k].size)
    with ztserve.safe_open(urls(port)[transport], insecure=True) as f:
        for _ in range(200):
            got = f.get_tensor(name)
            assert np.array_equal(got, original[name])


def test_torch_shares_the_arrays_memory(served):
    torch = pytest.importorskip("torch", reason="torch is not installed (it is not a dependency; .ci/run leaves it out)")
    port, original = served
    with ztserve.safe_open(urls(port)["http"], framework="pt") as f:
        name = f.keys()[0]
        t = f.get_tensor(name)
        assert isinstance(t, torch.Tensor)
        assert np.array_equal(t.numpy(), original[name])


def cuda_torch():
    """torch with a CUDA device, or the test skipped by name (CI has
    neither; the GPU machine's run is in docs/python.md)."""
    torch = pytest.importorskip("torch", reason="torch is not installed (it is not a dependency; .ci/run leaves it out)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: device='cuda:0' is not tried")
    return torch


@pytest.mark.parametrize("transport", ["quic", "http"])
def test_torch_on_cuda_equals_the_safetensors_package(tmp_path, transport):
    """Every dtype torch and safetensors share (the unsigned ones past u8
    where this torch has them), a 0-d and an empty tensor, written by the
    safetensors package, loaded to cuda:0 by ztserve (whole, lazily, and by rows) equal
    to what `safetensors.torch.load_file(device="cuda:0")` loads."""
    torch = cuda_torch()
    import safetensors.torch

    g = torch.Generator().manual_seed(7)
    tensors = {
        "f32": torch.randn(257, 33, generator=g),
        "f16": torch.randn(4096, generator=g).half(),
        "bf16": torch.randn(64, 65, generator=g).bfloat16(),
        "f64": torch.randn(9, generator=g).double(),
        "i64": torch.randint(-(1 << 40), 1 << 40, (31,), generator=g),
        "i32": torch.randint(-(1 << 30), 1 << 30, (5, 7), generator=g, dtype=torch.int32),
        "i8": torch.randint(-128, 127, (100,), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 255, (3, 3, 3), generator=g, dtype=torch.uint8),
        "bool": torch.rand(17, generator=g) > 0.5,
        "f8_e4m3": torch.randn(128, generator=g).to(torch.float8_e4m3fn),
        "f8_e5m2": torch.randn(128, generator=g).to(torch.float8_e5m2),
        "i16": torch.randint(-(1 << 15), 1 << 15, (40,), generator=g, dtype=torch.int16),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "big": torch.randn(3 << 20, generator=g),  # 12 MiB: a mapped buffer
    }
    # The unsigned types past u8 (torch 2.3 and later).
    for bits in (16, 32, 64):
        if hasattr(torch, f"uint{bits}"):
            tensors[f"u{bits}"] = torch.randint(0, 1 << 15, (9,), generator=g).to(getattr(torch, f"uint{bits}"))
    root = tmp_path / "root"
    root.mkdir()
    path = root / "mixed.safetensors"
    safetensors.torch.save_file(tensors, str(path))
    want = safetensors.torch.load_file(str(path), device="cuda:0")
    with daemon(root, tmp_path) as port:
        url = urls(port, "mixed.safetensors")[transport]
        got = ztserve.load(url, framework="pt", device="cuda:0", insecure=True)
        assert sorted(got) == sorted(want)
        for k, v in want.items():
            t = got[k]
            assert t.device == v.device and t.dtype == v.dtype and t.shape == v.shape, k
            assert same_bytes(t, v), k
        with ztserve.safe_open(url, framework="pt", device="cuda:0", insecure=True) as f:
            t = f.get_tensor("bf16")
            assert t.device.type == "cuda" and same_bytes(t, want["bf16"])
            rows = f.get_slice("f32")[10:20]
            assert rows.device.type == "cuda" and same_bytes(rows, want["f32"][10:20])


def same_bytes(a, b):
    """The same bytes (bitwise: NaNs and the float8 types included)."""
    import torch

    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def test_each_failure_raises_its_own_error(served, real_model, tmp_path, zt):
    port, _ = served
    with pytest.raises(ztserve.NotFoundError):
        ztserve.safe_open(urls(port, "missing.safetensors")["http"])
    with pytest.raises(ztserve.NotFoundError):
        ztserve.safe_open(urls(port, "missing.safetensors")["quic"], insecure=True)
    with pytest.raises(ztserve.ConnectError) as e:
        ztserve.safe_open(urls(port)["quic"], cert_fingerprint="00" * 32, timeout=5)
    assert "fingerprint" in str(e.value)
    with ztserve.safe_open(urls(port)["http"]) as f:
        with pytest.raises(ztserve.NotFoundError):
            f.get_tensor("no.such.tensor")
    assert issubclass(ztserve.IntegrityError, ztserve.Error)

    # A component whose bytes do not match its digest, served by nginx
    # (which checks nothing): the client refuses it by object and
    # component, and returns nothing.
    # nginx's workers run as another user: a world-readable root.
    root = pathlib.Path(tempfile.mkdtemp())
    root.chmod(0o755)
    packed = root / "m.zt"
    zt("pack", real_model, "-o", packed, "--digest", "sha256")
    info = ztserve.safe_open(packed)
    victim = info.keys()[5]
    comp = info.info(victim)["components"]["data"]
    info.close()
    data = bytearray(packed.read_bytes())
    data[comp["offset"] + 3] ^= 0xFF
    packed.write_bytes(bytes(data))
    packed.chmod(0o644)
    with nginx(root, tmp_path) as nport:
        with ztserve.safe_open(f"http://127.0.0.1:{nport}/m.zt") as f:
            with pytest.raises(ztserve.IntegrityError) as e:
                f.get_tensor(victim)
            assert (e.value.object, e.value.component) == (victim, "data")
            # The others still load.
            f.get_tensor(info.keys()[0] if info.keys()[0] != victim else info.keys()[1])
        # A plain server has no digests for safetensors: refused unless asked.
        shutil.copy(real_model, root / "plain.safetensors")
        (root / "plain.safetensors").chmod(0o644)
        with pytest.raises(ztserve.IntegrityError):
            ztserve.load(f"http://127.0.0.1:{nport}/plain.safetensors", select="embeddings.*")
        got = ztserve.load(f"http://127.0.0.1:{nport}/plain.safetensors", select="embeddings.*", verify=False)
        assert got
    # Local: the reader names the rule.
    with ztserve.safe_open(packed) as f:
        with pytest.raises(ztserve.IntegrityError) as e:
            f.get_tensor(victim)
        assert e.value.rule == "digest-mismatch"


def test_a_refused_token(real_model, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(real_model, root / "model.safetensors")
    tokens = tmp_path / "tokens"
    tokens.write_text("sesame\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'root = "/unused"\n[auth]\ntoken_file = "{tokens}"\n')
    with daemon(root, tmp_path, ["--config", str(cfg)]) as port:
        for url in urls(port).values():
            with pytest.raises(ztserve.RefusedError):
                ztserve.safe_open(url, insecure=True, token="wrong")
            with ztserve.safe_open(url, insecure=True, token="sesame", select="embeddings.*") as f:
                assert f.keys()
                f.get_tensor(f.keys()[0])


def fork_child(work):
    """Forks a child that runs `work()` (returning lines of text) and never
    returns into pytest; (pid, the read end of its report pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            try:
                lines = work()
                code = 0
            except BaseException:
                lines = [traceback.format_exc()]
            os.write(w, "\n".join(lines).encode())
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def child_report(pid, r, limit=60):
    """The lines of a child from `fork_child`; a child still running after
    `limit` seconds (waiting for ever) is killed and the test fails."""
    deadline = time.monotonic() + limit
    report = b""
    with os.fdopen(r, "rb") as f:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([f], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise AssertionError(f"the child was still running after {limit} s: {report!r}")
            chunk = os.read(f.fileno(), 65536)
            if not chunk:
                break
            report += chunk
    _, status = os.waitpid(pid, 0)
    text = report.decode()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (status, text)
    return text.splitlines()


def in_child(work):
    return child_report(*fork_child(work))


@pytest.mark.parametrize("transport", ["quic", "http"])
def test_a_forked_child_reads_through_what_it_inherited_and_never_waits_on_the_parent(served, transport, tmp_path):
    """A child forked after its parent used a handle (a DataLoader worker,
    a multiprocessing pool under "fork"), children forked together that
    connect at once, and children forked while a fetch was in flight: the
    inherited handle opens the source again in the child and gets every
    tensor, instead of waiting for ever on the parent's runtime; closing
    and dropping it there leaves the parent's alone; a batch the parent
    started raises by name in the child instead of ending early; every
    fresh load in a child gets every tensor; the parent carries on. With
    the component cache on, a child forked after the parent used it
    stores into the same folder and loads from it, and the parent then
    loads what the child stored."""
    port, original = served
    url = urls(port)[transport]
    h = ztserve.safe_open(url, insecure=True)
    names = h.keys()
    assert np.array_equal(h.get_tensor(names[0]), original[names[0]])
    started = h.tensors(names)
    got = dict([next(started)])

    def fresh():
        got = ztserve.load(url, insecure=True, cache=False)
        return sorted(got) == sorted(original) and all(np.array_equal(got[k], v) for k, v in original.items())

    def inherited():
        return all(np.array_equal(h.get_tensor(n), original[n]) for n in names)

    def child():
        nonlocal h
        first = inherited()
        try:
            next(started)
            batch = "parent's batch: no error"
        except ztserve.Error as e:
            batch = f"parent's batch: {e}"
        h.close()
        try:
            h.get_tensor(names[0])
            closed = "closed: no error"
        except ztserve.Error as e:
            closed = f"closed: {e}"
        h = None
        gc.collect()
        return [f"inherited: {first}", batch, closed, f"fresh: {fresh()}"]

    first, batch, closed, loaded = in_child(child)
    assert first == "inherited: True"
    assert "before this process" in batch and url in batch, batch
    assert "the handle was closed" in closed, closed
    assert loaded == "fresh: True"
    got.update(started)
    same(got, original)
    assert np.array_equal(h.get_tensor(names[-1]), original[names[-1]])
    # Siblings forked from one state, connecting at the same moment: their
    # connections must not be taken for one another's.
    go_r, go_w = os.pipe()

    matrix = next(n for n in names if original[n].ndim == 2)

    def sibling():
        os.read(go_r, 1)
        # A slice first: the child's connection has had no manifest yet.
        cut = h.get_slice(matrix)[1:3, 2:5]
        sliced = np.array_equal(cut, original[matrix][1:3, 2:5])
        return [f"sliced: {sliced}", f"inherited: {inherited()}", f"fresh: {fresh()}"]

    siblings = [fork_child(sibling) for _ in range(3)]
    os.write(go_w, b"go!")
    for pid, r in siblings:
        assert child_report(pid, r) == ["sliced: True", "inherited: True", "fresh: True"]
    os.close(go_r)
    os.close(go_w)
    # Forks while the parent's fetch is in flight, one after another.
    for _ in range(3):
        h.prefetch(names)
        assert in_child(lambda: [f"inherited: {inherited()}"]) == ["inherited: True"]
    for n in names:
        assert np.array_equal(h.get_tensor(n), original[n]), n
    h.close()
    # The component cache, used by the parent before the fork.
    cache_dir = tmp_path / "cache"
    name = names[0]
    same(ztserve.load(url, insecure=True, cache_dir=str(cache_dir), select=[name]), {name: original[name]})
    before = {p for p in cache_dir.rglob("*") if p.is_file()}

    def cached():
        first = ztserve.load(url, insecure=True, cache_dir=str(cache_dir))
        again = ztserve.load(url, insecure=True, cache_dir=str(cache_dir))
        ok = all(np.array_equal(first[k], v) and np.array_equal(again[k], v) for k, v in original.items())
        return [f"cached: {ok}"]

    assert in_child(cached) == ["cached: True"]
    assert {p for p in cache_dir.rglob("*") if p.is_file()} > before, "the child stored nothing"
    same(ztserve.load(url, insecure=True, cache_dir=str(cache_dir)), original)


@pytest.mark.parametrize("transport", ["quic", "http"])
def test_many_threads_on_one_handle_each_get_every_tensor(served, transport):
    """48 threads reading through one handle, each tensor asked for by two
    of them at once: over ztp/1 more requests than a connection may have
    in flight (they wait their turn instead of being refused
    `too_many_requests`), and two callers of one tensor each get a copy
    of their own (neither is told it was already taken)."""
    import concurrent.futures

    port, original = served
    names = sorted(original)
    with ztserve.safe_open(urls(port)[transport], insecure=True, cache=False) as h:

        def one(name):
            return name, h.get_tensor(name)

        with concurrent.futures.ThreadPoolExecutor(48) as pool:
            got = list(pool.map(one, names + names))
    assert len(got) == 2 * len(names)
    for name, arr in got:
        assert np.array_equal(arr, original[name]), name
    # Two arrays of one tensor never share memory.
    first = {}
    for name, arr in got:
        if name in first:
            assert not np.shares_memory(arr, first[name]), name
        first[name] = arr


@pytest.mark.parametrize("transport", ["quic", "http"])
def test_a_forked_child_takes_what_the_parent_prefetched_without_fetching_it_again(served, transport):
    """A DataLoader pattern: the parent prefetches, then forks. What had
    arrived whole and was not taken is the child's own copy (verified in
    the parent, copy-on-write), not fetched again; what the parent took
    the child fetches; the parent's own copies stay the parent's."""
    port, original = served
    counter = {"quic": "ztserve_quic_bytes_sent_total", "http": "ztserve_bytes_sent_total"}[transport]
    names = sorted(original, key=lambda n: original[n].nbytes)
    total = sum(original[n].nbytes for n in names)
    taken = names[0]
    h = ztserve.safe_open(urls(port)[transport], insecure=True, cache=False)
    before = metric(port, counter)
    h.prefetch(names)
    deadline = time.monotonic() + 60
    while metric(port, counter) - before < total:
        assert time.monotonic() < deadline, "the prefetch did not finish"
        time.sleep(0.05)
    # Every arrival is in the table a moment after its last byte left.
    time.sleep(0.5)
    assert np.array_equal(h.get_tensor(taken), original[taken])

    def child():
        start = metric(port, counter)
        ok = all(np.array_equal(h.get_tensor(n), original[n]) for n in names)
        return [f"equal: {ok}", f"moved: {int(metric(port, counter) - start)}"]

    # The taken tensor again, the reopened source's manifest and the
    # /metrics answers; not the rest.
    most = original[taken].nbytes + (256 << 10)
    for settle in (0, 3):
        # The server's count says the bytes left, not that the parent has
        # verified them all: on a loaded machine, a second fork later.
        time.sleep(settle)
        equal, moved = in_child(child)
        assert equal == "equal: True"
        moved = int(moved.split(": ")[1])
        if moved <= most:
            break
    assert original[taken].nbytes <= moved <= most, (moved, total)
    for n in names[1:]:
        assert np.array_equal(h.get_tensor(n), original[n]), n
    h.close()


def etag_of(url):
    return urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10).headers["ETag"]


def test_a_forked_child_never_reads_a_changed_file_through_what_it_inherited(real_model, tmp_path):
    """A handle inherited by a forked child reads the version its parent
    opened: after the file is replaced, the child's read fails naming the
    change (over ztp/1, HTTP and from a local path), never mixing
    versions; the parent's handle refuses it the same way over the
    network, and from a local path reads the version it mapped."""
    root = tmp_path / "root"
    root.mkdir()
    path = root / "model.safetensors"
    shutil.copy(real_model, path)
    opened = safetensors.numpy.load_file(real_model)
    with daemon(root, tmp_path) as port:
        for round, at in enumerate([*urls(port).values(), str(path)], start=1):
            h = ztserve.safe_open(at, insecure=True)
            names = h.keys()
            version = {k: v + round if v.dtype.kind == "f" else v for k, v in opened.items()}
            safetensors.numpy.save_file(version, str(tmp_path / "next.safetensors"))
            before = etag_of(urls(port)["http"])
            os.replace(tmp_path / "next.safetensors", path)
            # The daemon notices a replaced file within a moment, serving
            # the version it had open (under its own ETag) meanwhile.
            deadline = time.monotonic() + 30
            while etag_of(urls(port)["http"]) == before:
                assert time.monotonic() < deadline, "the daemon never saw the new version"
                time.sleep(0.1)

            def child():
                try:
                    h.get_tensor(names[0])
                    return ["no error"]
                except ztserve.Error as e:
                    return [type(e).__name__, str(e)]

            report = in_child(child)
            assert report[0] == "ProtocolError" and "changed" in report[1], (at, report)
            if at == str(path):
                assert np.array_equal(h.get_tensor(names[0]), opened[names[0]])
            else:
                with pytest.raises(ztserve.ProtocolError, match="changed"):
                    h.get_tensor(names[0])
            h.close()
            opened = version


def test_an_unknown_option_is_a_type_error(served):
    port, _ = served
    with pytest.raises(TypeError, match="tokne"):
        ztserve.safe_open(urls(port)["http"], tokne="x")


def test_a_datagram_bound_is_taken_or_refused_by_name(served):
    """Issue 29, item 1: max_udp_payload bounds ztp/1's datagrams; outside
    what QUIC and quinn's offload allow (1200 to 6500 in batches, 32000 to
    65507 one to a system call) it is a ValueError naming it."""
    port, original = served
    for bound in [1500, 32000]:
        got = ztserve.load(urls(port)["quic"], insecure=True, max_udp_payload=bound)
        same(got, original)
    for bad in [1000, 9000, 31999]:
        with pytest.raises(ValueError, match="max_udp_payload=%d: .*32000 to 65507" % bad):
            ztserve.load(urls(port)["quic"], insecure=True, max_udp_payload=bad)


def test_a_busy_wait_is_taken_or_refused_by_name(served):
    """busy_wait= is how long, in all, requests the server refuses as busy
    are sent again (tests/rows.rs shows the waiting); a load with it works
    over both transports, and one it cannot be is a ValueError naming it."""
    port, original = served
    for url in urls(port).values():
        same(ztserve.load(url, insecure=True, busy_wait=0), original)
        same(ztserve.load(url, insecure=True, busy_wait=2.5), original)
        with pytest.raises(ValueError, match="busy_wait=-1"):
            ztserve.load(url, insecure=True, busy_wait=-1)


def test_a_fetch_spreads_over_the_connections_asked_for(served):
    """Issue 29, item 2: connections= spreads a ztp/1 load over that many
    QUIC connections (and an HTTP one over that many requests); the
    tensors are the same; fewer than one is a ValueError naming it."""
    port, original = served
    for url in urls(port).values():
        for n in [1, 3]:
            same(ztserve.load(url, insecure=True, connections=n), original)
        with pytest.raises(ValueError, match="connections=0"):
            ztserve.load(url, insecure=True, connections=0)


def test_closing_cancels_what_is_in_flight(served):
    port, _ = served
    f = ztserve.safe_open(urls(port)["quic"], insecure=True, max_buffered_bytes=1 << 20)
    f.prefetch(f.keys())
    f.close()
    with pytest.raises(ztserve.Error):
        f.get_tensor(f.keys()[-1])


def test_fetch_writes_what_zt_fetch_writes(served, real_model, tmp_path):
    port, original = served
    out = tmp_path / "sel.zt"
    seen = []
    w = ztserve.fetch(urls(port)["quic"], out, select="encoder.layer.0.*", insecure=True,
                      progress=lambda n, d, t: seen.append((n, d, t)))
    assert w["objects"] == len([k for k in original if k.startswith("encoder.layer.0.")])
    assert seen and seen[-1][1] == seen[-1][2]
    same(ztserve.load(out), {k: v for k, v in original.items() if k.startswith("encoder.layer.0.")})
    copy = tmp_path / "copy.safetensors"
    ztserve.fetch(urls(port)["http"], copy)
    # Named after its source: a byte-identical copy.
    assert copy.read_bytes() == open(real_model, "rb").read()


def test_gguf_objects_of_every_kind(tmp_path):
    """A GGUF file (written by llama.cpp's own `gguf` package): dense
    tensors, block-quantized ones, and the tokenizer's strings, over both
    transports and from the local file alike."""
    from test_gguf import write_zoo

    root = tmp_path / "root"
    root.mkdir()
    path = root / "zoo.gguf"
    write_zoo(path)
    import gguf

    reader = gguf.GGUFReader(str(path))
    want = {t.name: t for t in reader.tensors}
    tokens = [f"tok{i}▁é" for i in range(100)]
    with daemon(root, tmp_path) as port:
        for source in [*urls(port, "zoo.gguf").values(), str(path)]:
            with ztserve.safe_open(source, insecure=True) as f:
                assert f.source == "gguf"
                for name in ["blk.0.f32", "blk.0.f16"]:
                    t = f.get_tensor(name)
                    ref = np.asarray(want[name].data)
                    assert t.dtype == ref.dtype and np.array_equal(t.reshape(ref.shape), ref), (source, name)
                # Rows of a dense GGUF tensor, and a quantized one refused by name.
                assert np.array_equal(f.get_slice("blk.0.f32")[1:3], f.get_tensor("blk.0.f32")[1:3])
                with pytest.raises(ztserve.UsageError) as e:
                    f.get_tensor("blk.1.q8_0")
                assert "gguf_block" in str(e.value)
                block = f.get_object("blk.1.q8_0")["data"]
                assert block.tobytes() == bytes(want["blk.1.q8_0"].data.tobytes()), source
                ragged = f.get_object("@tokenizer.ggml.tokens")
                offs, vals = ragged["offsets"], ragged["values"].tobytes()
                assert [vals[a:b].decode() for a, b in zip(offs[:-1], offs[1:])] == tokens, source


def test_a_sharded_checkpoint_loads_as_one_model(tmp_path, real_model):
    original = safetensors.numpy.load_file(real_model)
    root = tmp_path / "root" / "minilm"
    root.mkdir(parents=True)
    write_shards(original, root, 2)
    with daemon(tmp_path / "root", tmp_path) as port:
        for url in urls(port, "minilm/model.safetensors.index.json").values():
            same(ztserve.load(url, insecure=True), original)
            with ztserve.safe_open(url, insecure=True) as f:
                assert f.source == "safetensors-index"
                name = "embeddings.word_embeddings.weight"
                assert np.array_equal(f.get_slice(name)[10:20], original[name][10:20])
        # fetch into a directory: the index and its shards, byte-identical.
        out = tmp_path / "copy"
        w = ztserve.fetch(urls(port, "minilm/model.safetensors.index.json")["quic"], str(out) + "/", insecure=True)
        assert w["objects"] == len(original)
        for f in root.iterdir():
            assert (out / f.name).read_bytes() == f.read_bytes(), f.name


def layered_tensors(layers=4):
    """A small model named like MiniLM: embeddings and `layers` encoder
    layers of two tensors each."""
    rng = np.random.default_rng(26)
    t = {"embeddings.weight": rng.standard_normal((16, 8)).astype(np.float32)}
    for i in range(layers):
        t[f"encoder.layer.{i}.attention.weight"] = rng.standard_normal((8, 8)).astype(np.float32)
        t[f"encoder.layer.{i}.output.bias"] = rng.standard_normal(8).astype(np.float32)
    return t


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory):
    """The same tensors as .zt, .safetensors, .gguf and a sharded
    checkpoint, served; (port, root, tensors, names of each kind)."""
    import gguf

    base = tmp_path_factory.mktemp("select")
    root = base / "root"
    root.mkdir()
    original = layered_tensors()
    safetensors.numpy.save_file(original, str(root / "m.safetensors"))
    subprocess.run([os.environ["ZT_BIN"], "pack", str(root / "m.safetensors"), "-o", str(root / "m.zt"),
                    "--digest", "sha256"], check=True)
    w = gguf.GGUFWriter(str(root / "m.gguf"), "bert")
    for name, arr in original.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (root / "sharded").mkdir()
    write_shards(original, root / "sharded", 2)
    kinds = ["m.zt", "m.safetensors", "m.gguf", "sharded/model.safetensors.index.json"]
    with daemon(root, base) as port:
        yield port, root, original, kinds


@pytest.mark.parametrize("where", ["quic", "http", "local"])
def test_select_restricts_every_source_kind(every_kind, where):
    """Issue 26: over HTTP a `.zt` file answered `select` with every object
    (the client read the file's own manifest and never applied the
    selection); each kind, over each transport and from a local path, opens
    and loads exactly the selected objects."""
    port, root, original, kinds = every_kind
    want = sorted(k for k in original if k.startswith("encoder.layer.3."))
    for kind in kinds:
        source = str(root / kind) if where == "local" else urls(port, kind)[where]
        if where == "local" and kind.endswith(".index.json"):
            continue  # a sharded checkpoint is served, not opened locally
        with ztserve.safe_open(source, insecure=True, select=["encoder.layer.3.*"]) as f:
            assert sorted(f.keys()) == want, (source, f.keys())
        got = ztserve.load(source, select=["encoder.layer.3.*"], insecure=True)
        assert sorted(got) == want, (source, sorted(got))
        for k in want:
            assert np.array_equal(got[k].reshape(original[k].shape), original[k]), (source, k)
        # Several patterns select their union; one that matches nothing is named.
        got = ztserve.load(source, select=["encoder.layer.3.*", "embeddings.*"], insecure=True)
        assert sorted(got) == sorted(want + ["embeddings.weight"]), source
        with pytest.raises(ztserve.Error, match=r"no\.such"):
            ztserve.load(source, select=["no.such.*"], insecure=True)


@contextlib.contextmanager
def tls_daemon(root, base, cert, key):
    """ztserve serving `root` over HTTPS and ztp/1 with `cert`; yields its
    port once /readyz answers over HTTPS."""
    port = free_port()
    log = open(base / "ztserve-tls.log", "wb")
    proc = subprocess.Popen(
        [os.environ["ZT_DAEMON_BIN"], "--root", str(root), "--listen", f"127.0.0.1:{port}",
         "--state-dir", str(base / "state-tls"), "--tls-cert", str(cert), "--tls-key", str(key)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    context = ssl.create_default_context(cafile=str(cert))
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=1, context=context)
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, (base / "ztserve-tls.log").read_text()
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_ca_file_trusts_the_certificate_in_it(tmp_path):
    """Issue 26: `ca=` refused a self-signed certificate made the usual
    way (`openssl req -x509`, CA:TRUE under Debian's default config) that
    curl --cacert and httpx accept; and a certificate that is refused says
    why and what to pass instead, over both transports."""
    if not shutil.which("openssl"):
        pytest.skip("the openssl command is not installed (apt-get install openssl)")

    def self_signed(name):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.pem", "-days", "1", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=IP:127.0.0.1"],
            cwd=tmp_path, check=True, capture_output=True,
        )
        return tmp_path / f"{name}.pem", tmp_path / f"{name}.key"

    cert, key = self_signed("server")
    other, _ = self_signed("other")
    root = tmp_path / "root"
    root.mkdir()
    original = layered_tensors(2)
    safetensors.numpy.save_file(original, str(root / "m.safetensors"))
    with tls_daemon(root, tmp_path, cert, key) as port:
        for url in [f"quic://127.0.0.1:{port}/m.safetensors", f"https://127.0.0.1:{port}/m.safetensors"]:
            same(ztserve.load(url, ca=str(cert)), original)
            with pytest.raises(ztserve.ConnectError) as e:
                ztserve.load(url, ca=str(other), timeout=5)
            message = str(e.value)
            assert "is not trusted" in message, message
            assert "CA used as end entity" in message or "unknown issuer" in message, message
            for remedy in ["--ca FILE", "--cert-fingerprint", "--insecure"]:
                assert remedy in message, (remedy, message)


def interrupted(code, ready, first="calling", timeout=60):
    """Runs `code` in a child Python (the client cache off, the default
    SIGINT handler in place) until it prints `first`, then until `ready()`
    holds (polled for 30 s), and sends it SIGINT. Returns what it printed
    after `first`, its standard error, its exit status, and the seconds
    from the signal to its exit."""
    # A child started from a shell's background job ignores SIGINT until
    # Python's handler is put back.
    prelude = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    p = subprocess.Popen(
        [sys.executable, "-c", prelude + code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, ZTSERVE_CACHE="off"),
    )
    try:
        assert p.stdout.readline().strip() == first, p.communicate()
        deadline = time.monotonic() + 30
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready(), "the call never reached the server"
        assert p.poll() is None, p.communicate()
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=timeout)
        return out, err, p.returncode, time.monotonic() - sent
    finally:
        p.kill()
        p.wait()


@contextlib.contextmanager
def silent_server():
    """A TCP server that accepts connections and never answers; yields its
    port and the list of connections it has accepted."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        stop.set()
        t.join()
        for c in accepted:
            c.close()
        listener.close()


@pytest.mark.parametrize(
    "call",
    [
        "ztserve.fetch(URL, OUT, timeout=300)",
        "ztserve.safe_open(URL, timeout=300)",
        "ztserve.load(URL, timeout=300)",
    ],
)
def test_ctrl_c_ends_a_call_waiting_on_a_silent_server(tmp_path, call):
    """A call waiting on the network lets Ctrl-C through: KeyboardInterrupt
    is raised while the server is still silent, far sooner than the
    client's own timeout (300 s of idleness here). Before, the calls that
    wait on the runtime (opening, fetch, rows, slice) ran their signal
    handler only once they returned."""
    with silent_server() as (port, accepted):
        code = (
            "import ztserve\n"
            f"URL = 'http://127.0.0.1:{port}/model.safetensors'\n"
            f"OUT = {str(tmp_path / 'out.safetensors')!r}\n"
            "print('calling', flush=True)\n"
            f"{call}\n"
        )
        _, err, _, took = interrupted(code, lambda: bool(accepted))
    assert "KeyboardInterrupt" in err, err
    # Ended by the signal, not by a timeout: the client waits 300 s.
    assert took < 30, f"{took:.1f} s after Ctrl-C"
    assert not (tmp_path / "out.safetensors").exists()


@pytest.mark.parametrize("transport", ["quic", "http"])
def test_ctrl_c_during_a_progress_callback_still_ends_the_fetch(served, tmp_path, transport):
    """Ctrl-C pressed while fetch's progress callback runs raises
    KeyboardInterrupt inside the callback, where fetch cannot stop; it is
    raised again from the wait instead of being reported as unraisable and
    dropped (the fetch then ran to its end)."""
    port, _ = served
    out = tmp_path / "model.safetensors"
    code = (
        "import time, ztserve\n"
        "def progress(name, done, total):\n"
        "    print('progress', flush=True)\n"
        "    time.sleep(0.2)\n"
        f"ztserve.fetch({urls(port)[transport]!r}, {str(out)!r}, progress=progress,\n"
        "              insecure=True, connections=1)\n"
        "print('completed', flush=True)\n"
    )
    # The callback is asleep once it has printed: the signal lands in it.
    rest, err, status, _ = interrupted(code, lambda: True, first="progress", timeout=120)
    assert "completed" not in rest, err
    assert "KeyboardInterrupt" in err, err
    assert status != 0
    assert not out.exists()


@contextlib.contextmanager
def stalling_proxy(upstream_port, stall):
    """An HTTP proxy to 127.0.0.1:upstream_port that passes every request
    on except those whose path contains one of `stall`, which it holds
    unanswered; yields its port and the list of paths it holds."""
    held = []
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self.forward()

        def do_GET(self):
            self.forward()

        def forward(self):
            if any(s in self.path for s in stall):
                held.append(self.path)
                stop.wait()
                self.close_connection = True
                return
            hop = {"connection", "keep-alive", "transfer-encoding", "host"}
            headers = {k: v for k, v in self.headers.items() if k.lower() not in hop}
            req = urllib.request.Request(
                f"http://127.0.0.1:{upstream_port}{self.path}", headers=headers, method=self.command
            )
            try:
                r = urllib.request.urlopen(req)
            except urllib.error.HTTPError as e:
                r = e
            body = r.read()
            self.send_response(r.status)
            for k, v in r.headers.items():
                if k.lower() not in hop | {"content-length"}:
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield server.server_address[1], held
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("what", ["rows", "slice"])
def test_ctrl_c_ends_rows_and_slices_waiting_on_the_server(served, what):
    """rows() and slice() (a 2-D tensor indexed through get_slice) end on
    Ctrl-C while the server holds their request unanswered."""
    port, original = served
    name = next(k for k, v in original.items() if v.ndim == 2 and v.shape[0] > 2 and v.shape[1] > 3)
    index = "[0:2]" if what == "rows" else "[0:2, 1:3]"
    with stalling_proxy(port, ["rows=", "slice="]) as (proxy, held):
        code = (
            "import ztserve\n"
            f"h = ztserve.safe_open('http://127.0.0.1:{proxy}/model.safetensors', timeout=300)\n"
            f"s = h.get_slice({name!r})\n"
            "print('calling', flush=True)\n"
            f"s{index}\n"
        )
        _, err, _, took = interrupted(code, lambda: bool(held))
        assert f"{what}=" in held[0], held
    assert "KeyboardInterrupt" in err, err
    assert took < 30, f"{took:.1f} s after Ctrl-C"
