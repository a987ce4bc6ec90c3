"""A ztserve for a Python bench: `ZT_DAEMON_BIN` (default
target/release/ztserve) serving `root` on 127.0.0.1:`port`, its digests
computed on demand without a rate limit, ready (and `warm`'s manifest
read, so its digests are in) when `start` returns."""
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request


def start(root, port, warm=None):
    """(the process, its state folder); `stop` ends both."""
    state = tempfile.mkdtemp()
    with open(os.path.join(state, "c.toml"), "w") as f:
        f.write('root = "/unused"\n[digests]\nrate_mib_s = 0\n')
    d = subprocess.Popen([os.environ.get("ZT_DAEMON_BIN", "target/release/ztserve"),
                          "--config", os.path.join(state, "c.toml"), "--root", root,
                          "--listen", f"127.0.0.1:{port}", "--state-dir", state, "--log-level", "warn"])
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    if warm is not None:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/files/{warm}/manifest", timeout=600).read()
    return d, state


def stop(d, state):
    d.terminate()
    d.wait(30)
    shutil.rmtree(state, ignore_errors=True)
