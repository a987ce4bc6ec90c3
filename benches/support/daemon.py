"""A ztserve for a Python bench: `ZT_DAEMON_BIN` (default
target/release/ztserve) serving `root` on 127.0.0.1:`port`, its digests
computed on demand without a rate limit, ready (and `warm`'s manifest
read, so its digests are in) when `start` returns."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request


def start(root, port, warm=None, binary=None, pin=()):
    """(the process, its state folder); `stop` ends both. `binary`
    overrides `ZT_DAEMON_BIN`; `pin` is a command it runs under (taskset)."""
    state = tempfile.mkdtemp()
    with open(os.path.join(state, "c.toml"), "w") as f:
        f.write('root = "/unused"\n[digests]\nrate_mib_s = 0\n')
    binary = binary or os.environ.get("ZT_DAEMON_BIN", "target/release/ztserve")
    d = subprocess.Popen([*pin, binary,
                          "--config", os.path.join(state, "c.toml"), "--root", root,
                          "--listen", f"127.0.0.1:{port}", "--state-dir", state, "--log-level", "warn"])
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
            break
        except OSError:
            if d.poll() is not None:
                raise SystemExit(f"{binary} exited with {d.returncode}")
            time.sleep(0.2)
    if warm is not None:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/files/{warm}/manifest", timeout=600).read()
    return d, state


def stop(d, state):
    d.terminate()
    d.wait(30)
    shutil.rmtree(state, ignore_errors=True)


def bench_model(data):
    """(the root under `data`, the 1 GiB bench model in it), written by
    one_gib_safetensors.py when missing."""
    root = os.path.join(data, "root")
    os.makedirs(root, exist_ok=True)
    model = os.path.join(root, "one-gib.safetensors")
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([sys.executable, os.path.join(here, "one_gib_safetensors.py"), model], check=True)
    return root, model
