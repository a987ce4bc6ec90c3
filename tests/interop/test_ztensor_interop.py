"""Interop with ztensor 1.2.3 (an independent v1.2 implementation), safetensors and numpy."""
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import ztensor

RNG = np.random.default_rng(1234)

DTYPES = {
    "f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
    "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
    "u64": np.uint64, "u32": np.uint32, "u16": np.uint16, "u8": np.uint8, "bool": np.bool_,
}


def sample(dtype, shape=(3, 5)):
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(np.dtype(dtype), np.integer):
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return RNG.standard_normal(shape).astype(dtype)


def reference_objects():
    """name -> (ztensor.Tensor, {component: bytes})"""
    objs = {}
    for name, dt in DTYPES.items():
        a = sample(dt)
        objs[f"dense.{name}"] = (ztensor.Tensor({"data": a}), {"data": a.tobytes()})
    f8 = np.linspace(-2, 2, 8).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    objs["fp8.e4m3"] = (ztensor.Tensor({"data": f8}, type="f8_e4m3fn"), {"data": f8.tobytes()})
    f8b = np.linspace(-2, 2, 8).astype(ml_dtypes.float8_e5m2).view(np.uint8)
    objs["fp8.e5m2"] = (ztensor.Tensor({"data": f8b}, type="f8_e5m2"), {"data": f8b.tobytes()})
    c = (RNG.standard_normal(4) + 1j * RNG.standard_normal(4)).astype(np.complex64).view(np.float32)
    objs["complex"] = (ztensor.Tensor({"data": c}, shape=[4], type="complex64"), {"data": c.tobytes()})
    vals = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    ind = np.array([0, 2, 1], dtype=np.uint64)
    ptr = np.array([0, 2, 3], dtype=np.uint64)
    objs["sparse.csr"] = (
        ztensor.Tensor({"values": vals, "indices": ind, "indptr": ptr}, shape=[2, 3], format="sparse_csr"),
        {"values": vals.tobytes(), "indices": ind.tobytes(), "indptr": ptr.tobytes()},
    )
    coords = np.array([0, 1, 1, 2, 0, 1], dtype=np.uint64)
    objs["sparse.coo"] = (
        ztensor.Tensor({"values": vals, "coords": coords}, shape=[2, 3], format="sparse_coo"),
        {"values": vals.tobytes(), "coords": coords.tobytes()},
    )
    pw = RNG.integers(-(2**31), 2**31 - 1, size=16, dtype=np.int32)
    sc = RNG.standard_normal(4).astype(np.float16)
    ze = RNG.standard_normal(4).astype(np.float16)
    objs["model.layers.0.q"] = (
        ztensor.Tensor({"packed_weight": pw, "scales": sc, "zeros": ze}, shape=[8, 16], format="quantized_group",
                       dtype="int32", attributes={"bits": 4, "group_size": 8, "packing": "8_per_i32"}),
        {"packed_weight": pw.tobytes(), "scales": sc.tobytes(), "zeros": ze.tobytes()},
    )
    return objs


VARIANTS = [(None, "none"), (None, "crc32c"), (None, "sha256"), (3, "crc32c"), (9, "sha256"), (1, "none")]


def write_reference(path, compress, checksum):
    objs = reference_objects()
    with ztensor.Writer(str(path)) as w:
        for name, (t, _) in objs.items():
            w.write(name, t, compress=compress, checksum=checksum)
    return objs


@pytest.mark.parametrize("compress,checksum", VARIANTS)
def test_reference_files_read_identically(tmp_path, zt, compress, checksum):
    path = tmp_path / "ref.zt"
    objs = write_reference(path, compress, checksum)
    zt("verify", path)
    for name, (_, comps) in objs.items():
        for role, expected in comps.items():
            got = zt("cat", path, name, role).stdout
            assert got == expected, f"{name}/{role}"


@pytest.mark.parametrize("compress,checksum", VARIANTS)
@pytest.mark.parametrize("ours", [["--digest", "sha256"], ["--digest", "crc32c", "--compress", "zstd:5"], ["--digest", "none"]])
def test_our_files_read_by_reference(tmp_path, zt, compress, checksum, ours):
    src = tmp_path / "ref.zt"
    objs = write_reference(src, compress, checksum)
    out = tmp_path / "ours.zt"
    zt("pack", src, "-o", out, *ours)
    zt("verify", out)
    r = ztensor.Reader(str(out))
    assert sorted(r.keys()) == sorted(objs)
    for name, (t, comps) in objs.items():
        meta = r.metadata(name)
        assert meta.format == t.format
        assert list(meta.shape) == list(t.shape)
        assert meta.type == t.type
        for role, expected in comps.items():
            # ztensor 1.2.3's read() reshapes complex data to the logical
            # shape and fails, even on its own files; its raw component read works.
            buf, _ = r._inner._read_component_raw(name, role)
            assert bytes(buf) == expected, f"{name}/{role}"


def test_safetensors_pack_then_export_gives_the_same_tensors(tmp_path, zt):
    tensors = {f"model.layers.{i}.{n}": sample(dt, (4, 3)) for i, (n, dt) in enumerate(DTYPES.items())}
    tensors["model.embed_tokens.weight"] = sample(np.float32, (10, 4))
    src = tmp_path / "in.safetensors"
    safetensors.numpy.save_file(tensors, str(src), metadata={"format": "np"})
    packed = tmp_path / "p.zt"
    zt("pack", src, "-o", packed, "--compress", "zstd")
    info = zt("info", "--json", packed).stdout
    assert b'"format": "np"' in info
    back = tmp_path / "back.safetensors"
    zt("export", packed, "-o", back)
    loaded = safetensors.numpy.load_file(str(back))
    assert sorted(loaded) == sorted(tensors)
    for k, v in tensors.items():
        assert loaded[k].dtype == v.dtype and loaded[k].shape == v.shape
        assert loaded[k].tobytes() == v.tobytes(), k


def test_npz_and_npy_inputs(tmp_path, zt):
    a = sample(np.int16, (2, 2))
    b = sample(np.float64, (3,)).astype(">f8")
    np.savez_compressed(tmp_path / "x.npz", a=a, b=b)
    np.save(tmp_path / "c.npy", sample(np.uint8, (5,)))
    out = tmp_path / "o.zt"
    zt("pack", tmp_path / "x.npz", tmp_path / "c.npy", "-o", out)
    r = ztensor.Reader(str(out))
    assert r.read_numpy("a").tobytes() == a.tobytes()
    assert np.array_equal(r.read_numpy("b"), b.astype("<f8"))
    assert r.read_numpy("c").shape == (5,)


def test_export_refuses_what_safetensors_cannot_express(tmp_path, zt):
    src = tmp_path / "ref.zt"
    write_reference(src, None, "none")
    p = zt("export", src, "-o", tmp_path / "x.safetensors", check=False)
    assert p.returncode == 1
    assert b"cannot be expressed" in p.stderr or b"has no safetensors dtype" in p.stderr
    assert not (tmp_path / "x.safetensors").exists()


def test_corruption_is_reported_by_name(tmp_path, zt):
    src = tmp_path / "ref.zt"
    write_reference(src, None, "sha256")
    data = bytearray(src.read_bytes())
    off = ztensor.Reader(str(src)).metadata("dense.f32").components["data"]["offset"]
    data[off] ^= 0xFF
    src.write_bytes(bytes(data))
    p = zt("verify", src, check=False)
    assert p.returncode == 1
    assert b'object "dense.f32", component "data"' in p.stdout
    assert b"digest mismatch" in p.stdout
