import os
import shutil
import subprocess

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
