"""Files written by `zt fetch`, over both transports, read by ztensor 1.2.3."""
import os
import socket
import subprocess
import time
import urllib.request

import numpy as np
import pytest
import ztensor

from test_ztensor_interop import reference_objects

RNG = np.random.default_rng(99)


def free_port():
    """A port free on TCP and UDP (ztserve serves QUIC on the HTTP port number)."""
    for _ in range(50):
        with socket.socket() as t, socket.socket(type=socket.SOCK_DGRAM) as u:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            try:
                u.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """ztserve ($ZT_DAEMON_BIN) serving one reference file; yields (port, objects)."""
    binary = os.environ.get("ZT_DAEMON_BIN")
    assert binary and os.path.exists(binary), "set ZT_DAEMON_BIN to the built ztserve binary"
    base = tmp_path_factory.mktemp("served")
    root = base / "root"
    root.mkdir()
    objs = reference_objects()
    # Large components: the fetched file places them on page boundaries.
    for i, shape in enumerate([(1024, 512), (300, 1025)]):
        a = RNG.standard_normal(shape).astype(np.float32)
        objs[f"model.layers.{i}.mlp.weight"] = (ztensor.Tensor({"data": a}), {"data": a.tobytes()})
    with ztensor.Writer(str(root / "ref.zt")) as w:
        for name, (t, _) in objs.items():
            w.write(name, t, checksum="sha256")
    port = free_port()
    log = open(base / "ztserve.log", "wb")
    proc = subprocess.Popen(
        [binary, "--root", str(root), "--listen", f"127.0.0.1:{port}", "--state-dir", str(base / "state")],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, (base / "ztserve.log").read_text()
                time.sleep(0.1)
        yield port, objs
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("via", ["quic", "http"])
@pytest.mark.parametrize("io", [[], ["--no-direct-io"]])
def test_fetched_files_read_by_reference(tmp_path, zt, served, via, io):
    port, objs = served
    url = f"quic://127.0.0.1:{port}/ref.zt" if via == "quic" else f"http://127.0.0.1:{port}/v1/files/ref.zt"
    out = tmp_path / "fetched.zt"
    zt("fetch", url, "--insecure", "-o", out, *io)
    zt("verify", "--require-digest", out)
    r = ztensor.Reader(str(out))
    assert sorted(r.keys()) == sorted(objs)
    for name, (_, comps) in objs.items():
        for role, expected in comps.items():
            buf, _ = r._inner._read_component_raw(name, role)
            assert bytes(buf) == expected, f"{via}: {name}/{role}"
    assert not list(tmp_path.glob("*.part*")), "no part file or journal left"
