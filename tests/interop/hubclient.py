"""What the Hub tests share: a Hub client run in a fresh Python against a
daemon, a file's SHA-256, and a proxy that cuts a transfer."""
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import daemon


def client(port, code, tmp, token=None, check=True, cache="cache", env=None):
    """Runs `code` in a fresh Python with the Hub's settings pointing at the
    daemon on `port` (and `env` added); returns what it printed as JSON on
    its last line."""
    extra = env
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        HF_ENDPOINT=f"http://127.0.0.1:{port}",
        HF_HUB_CACHE=str(tmp / cache),
        HF_HOME=str(tmp / "hf-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_UPDATE_CHECK="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    if token:
        env["HF_TOKEN"] = token
    env.update(extra or {})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=tmp, capture_output=True,
                       timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"client failed ({p.returncode}):\n{p.stderr.decode()[-4000:]}")
    out = p.stdout.decode().strip().splitlines()
    return json.loads(out[-1]) if out else None


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class CuttingProxy:
    """A TCP proxy to the daemon that cuts the first connection to carry
    more than `cut` bytes back, mid-body, and records every request head."""

    def __init__(self, port, cut):
        self.upstream, self.cut, self.cuts, self.heads = port, cut, 0, []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self.up, args=(c, u), daemon=True).start()
            threading.Thread(target=self.down, args=(u, c), daemon=True).start()

    def up(self, c, u):
        with contextlib.suppress(OSError):
            while data := c.recv(65536):
                self.heads.append(data.split(b"\r\n\r\n")[0].decode(errors="replace"))
                u.sendall(data)
        with contextlib.suppress(OSError):
            u.shutdown(socket.SHUT_WR)

    def down(self, u, c):
        sent, cutting = 0, self.cuts == 0
        with contextlib.suppress(OSError):
            while data := u.recv(65536):
                c.sendall(data)
                sent += len(data)
                if cutting and sent > self.cut and self.cuts == 0:
                    self.cuts += 1
                    break
        for s in (c, u):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


@pytest.fixture(scope="module")
def hub(layout):
    """The daemon serving the test module's `layout` fixture's root:
    (port, root)."""
    base, root = layout
    with daemon(root, base) as port:
        yield port, root
