"""Issue 31, item 1: rectangular slices gathered by the daemon
(`?slice=`), checked against numpy's own slicing of the original tensors:
every mix of dimensions on 1-D to 4-D tensors of f32, bf16, f16 and i8,
empty slices, out-of-range bounds refused by name, and the digest of
exactly the bytes sent."""
import base64
import hashlib
import itertools
import json
import urllib.error
import urllib.request

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from conftest import daemon

SHAPES = {1: (11,), 2: (6, 7), 3: (3, 4, 5), 4: (2, 3, 4, 5)}
DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i8": np.int8}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("slices")
    root = base / "root"
    root.mkdir()
    rng = np.random.default_rng(31)
    tensors = {}
    for (rank, shape), (dname, dtype) in itertools.product(SHAPES.items(), DTYPES.items()):
        n = int(np.prod(shape))
        values = rng.integers(-100, 100, n) if dname == "i8" else rng.standard_normal(n)
        tensors[f"t{rank}.{dname}"] = values.astype(dtype).reshape(shape)
    safetensors.numpy.save_file(tensors, str(root / "m.safetensors"))
    with daemon(root, base) as port:
        yield port, tensors


def get(port, name, spec):
    url = f"http://127.0.0.1:{port}/v1/files/m.safetensors/objects/{name}/data?slice={spec}"
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def ranges_of(shape):
    """A few ranges per dimension: whole, a middle part, one index, empty."""
    for dims in itertools.product(*[[(0, n), (1, n - 1), (n - 1, n), (2, 2)] for n in shape]):
        yield dims


def test_every_slice_is_numpys(served):
    port, tensors = served
    checked = 0
    for name, t in tensors.items():
        for dims in ranges_of(t.shape):
            spec = ",".join(f"{a}:{b}" for a, b in dims)
            status, headers, body = get(port, name, spec)
            assert status == 200, (name, spec, body[:200])
            want = np.ascontiguousarray(t[tuple(slice(a, b) for a, b in dims)])
            assert body == want.tobytes(), (name, spec)
            assert headers["x-zt-shape"] == ",".join(map(str, want.shape)) or want.ndim == 0, (name, spec)
            digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
            assert headers["content-digest"] == f"sha-256=:{digest}:", (name, spec)
            checked += 1
    assert checked > 1000


def test_numpy_style_shorthands(served):
    port, tensors = served
    t = tensors["t3.f32"]
    for spec, index in [(":,1:3", (slice(None), slice(1, 3))), ("1:", (slice(1, None),)),
                        (":2,:,3:", (slice(None, 2), slice(None), slice(3, None)))]:
        status, headers, body = get(port, "t3.f32", spec)
        assert status == 200, spec
        assert body == np.ascontiguousarray(t[index]).tobytes(), spec


def test_bad_slices_are_refused_by_name(served):
    port, _ = served
    for spec, status, rule in [("0:12", 416, "slice-out-of-bounds"), ("3:2", 416, "slice-out-of-bounds"),
                               ("0:1,0:1,0:1", 416, "slice-out-of-bounds"), ("a:b", 400, "slice-malformed"),
                               ("1", 400, "slice-malformed")]:
        got, _, body = get(port, "t2.f32", spec)
        detail = json.loads(body)["detail"]
        assert got == status, (spec, got, detail)
        assert rule in detail and "t2.f32" in detail and "m.safetensors" in detail, detail


def urls(port, root):
    return {
        "http": f"http://127.0.0.1:{port}/m.safetensors",
        "quic": f"quic://127.0.0.1:{port}/m.safetensors",
    }


def test_get_slice_fetches_what_numpy_slices(served, tmp_path):
    """The Python package's get_slice with any mix of integers and
    step-1 slices, over HTTP (gathered by the daemon), ztp/1 and a local
    file (the whole component verified, then cut), equal to numpy's."""
    import ztserve

    port, tensors = served
    local = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(tensors, str(local))
    keys = [
        (slice(1, 3),), (slice(None), slice(1, 3)), (1, slice(2, 4)), (slice(0, 2), 3),
        (slice(None), slice(None), slice(1, 4)), (0, 1), (slice(2, 2),), (-1,),
    ]
    sources = {**urls(port, None), "local": str(local)}
    for how, src in sources.items():
        with ztserve.safe_open(src, insecure=True) as f:
            for name, t in tensors.items():
                sl = f.get_slice(name)
                for key in keys:
                    if len(key) > t.ndim:
                        continue
                    try:
                        want = t[key]
                    except IndexError:
                        with pytest.raises(IndexError):
                            sl[key]
                        continue
                    got = sl[key]
                    assert got.shape == want.shape, (how, name, key)
                    got, want = np.asarray(got), np.asarray(want)
                    assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (how, name, key)


def test_a_tensor_parallel_split_moves_its_share_and_reassembles(served):
    """Four ranks each take a column block of a 2-D tensor over HTTP: the
    daemon sends about a quarter of the bytes each, and the blocks put
    side by side are the tensor."""
    import ztserve

    from conftest import metric

    port, tensors = served
    t = tensors["t2.f32"]
    cols = t.shape[1]
    blocks = []
    with ztserve.safe_open(f"http://127.0.0.1:{port}/m.safetensors") as f:
        f.get_slice("t2.f32")[0:1]  # the component checked once, before counting
        for rank in range(4):
            a, b = rank * cols // 4, (rank + 1) * cols // 4
            before = metric(port, "ztserve_bytes_sent_total")
            blocks.append(f.get_slice("t2.f32")[:, a:b])
            sent = metric(port, "ztserve_bytes_sent_total") - before
            assert sent == t[:, a:b].nbytes, (rank, sent)
    assert np.array_equal(np.concatenate(blocks, axis=1), t)


def test_ranks_of_a_tensor_parallel_load_reassemble_the_model(served):
    """`ztserve.load(url, shard=(rank, 4), dims=...)`: the tensors named
    split along their dimension, the rest whole; the four ranks' blocks
    put together are the originals."""
    import ztserve

    port, tensors = served
    split = {"t3.f32": 1, "t4.bf16": 2}
    ranks = [ztserve.load(f"http://127.0.0.1:{port}/m.safetensors", select=["t3.*", "t4.*", "t1.*"],
                          shard=(r, 4), dims=split) for r in range(4)]
    for name, dim in split.items():
        joined = np.concatenate([r[name] for r in ranks], axis=dim)
        assert joined.tobytes() == tensors[name].tobytes(), name
        assert ranks[0][name].shape[dim] == tensors[name].shape[dim] // 4
    # Not split: every rank holds the whole tensor.
    assert all(np.array_equal(r["t3.f16"], tensors["t3.f16"]) for r in ranks)
    assert all(np.array_equal(r["t1.i8"], tensors["t1.i8"]) for r in ranks)
    with ztserve.safe_open(f"http://127.0.0.1:{port}/m.safetensors") as f:
        rows = [f.shard("t3.f16", r, 3, 0) for r in range(3)]
        assert np.array_equal(np.concatenate(rows, axis=0), tensors["t3.f16"])
        with pytest.raises(ztserve.UsageError, match="does not split"):
            f.shard("t2.f32", 0, 4, 0)
        with pytest.raises(ztserve.UsageError, match="dimensions"):
            f.shard("t1.f32", 0, 1, 1)


@pytest.mark.parametrize("via", ["http", "quic"])
def test_zt_fetch_writes_slices_as_objects(served, zt, tmp_path, via):
    """`zt fetch --slice 'GLOB=SPEC'`: each matched object's slice as an
    object of a .zt that ztensor 1.2.3 reads and `zt verify` checks, with
    attributes naming the source."""
    import ztensor

    port, tensors = served
    out = tmp_path / "slices.zt"
    url = f"{via}://127.0.0.1:{port}/m.safetensors"
    zt("fetch", url, "--insecure", "-o", out, "--slice", "t2.*=:,1:3", "--slice", "t3.f32=1:2,:,2:", "--select", "t2.f32",
       "--select", "t2.i8", "--select", "t3.f32")
    zt("verify", "--require-digest", out)
    r = ztensor.Reader(str(out))
    assert sorted(r.keys()) == ["t2.f32", "t2.i8", "t3.f32"]
    for name, index in [("t2.f32", (slice(None), slice(1, 3))), ("t2.i8", (slice(None), slice(1, 3))),
                        ("t3.f32", (slice(1, 2), slice(None), slice(2, None)))]:
        buf, _ = r._inner._read_component_raw(name, "data")
        assert bytes(buf) == np.ascontiguousarray(tensors[name][index]).tobytes(), name
    bad = zt("fetch", url, "--insecure", "-o", tmp_path / "bad.zt", "--slice", "t2.f32=0:99", check=False)
    assert bad.returncode != 0 and b"slice-out-of-bounds" in bad.stderr, bad.stderr
    assert not (tmp_path / "bad.zt").exists()


def test_a_gathered_slice_whose_bytes_do_not_match_its_digest_is_refused(served, tmp_path):
    """A proxy between the client and the daemon flips one byte of every
    gathered slice it passes on (headers untouched): the client checks the
    slice against its Content-Digest and raises IntegrityError naming the
    object; rows and whole tensors through the same proxy still load."""
    import http.server
    import threading

    import ztserve

    port, tensors = served

    class Corrupting(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def forward(self, method):
            req = urllib.request.Request(f"http://127.0.0.1:{port}{self.path}", method=method)
            for k in ("Range", "If-Match", "If-None-Match", "If-Range", "Authorization", "Accept"):
                if self.headers.get(k):
                    req.add_header(k, self.headers[k])
            try:
                r = urllib.request.urlopen(req, timeout=30)
            except urllib.error.HTTPError as e:
                r = e
            body = r.read() if method == "GET" else b""
            if "slice=" in self.path and len(body) > 0:
                body = bytearray(body)
                body[len(body) // 2] ^= 0x01
                body = bytes(body)
            self.send_response(r.status if hasattr(r, "status") else r.code)
            for k, v in r.headers.items():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body) if method == "GET" else r.headers.get("Content-Length", 0)))
            self.end_headers()
            if method == "GET":
                self.wfile.write(body)

        def do_GET(self):
            self.forward("GET")

        def do_HEAD(self):
            self.forward("HEAD")

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Corrupting)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{proxy.server_address[1]}/m.safetensors"
        with ztserve.safe_open(url, cache=False) as f:
            s = f.get_slice("t2.f32")
            with pytest.raises(ztserve.IntegrityError) as e:
                s[:, 2:5]
            assert "t2.f32" in str(e.value)
            # Rows and whole tensors are not gathered: they pass untouched.
            assert np.array_equal(s[1:3], tensors["t2.f32"][1:3])
            assert np.array_equal(f.get_tensor("t3.f16"), tensors["t3.f16"])
    finally:
        proxy.shutdown()
