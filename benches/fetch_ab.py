#!/usr/bin/env python3
"""Two or more builds fetching the same file, by turns: an A/B of `zt fetch`.

Each case is NAME=ZT_BINARY,URL: a `zt` binary and the URL it fetches
(usually one daemon per build, started by hand on its own port with
ZTSERVE_DIGESTS_VERIFY_BACKGROUND=false). Every round runs each case once,
in order, writing to OUT with the component cache off and `sync` first, so
no round pays for the last one's writeback. Prints each case's median and
every round, then each case's time against the first case's.

    benches/fetch_ab.py 10 target/tmp/ab-out.zt \\
        'old=/tmp/old/zt,quic://127.0.0.1:18002/layers-crc32c.zt' \\
        'new=target/release/zt,quic://127.0.0.1:18005/layers-crc32c.zt' \\
        'http=target/release/zt,http://127.0.0.1:18005/layers-crc32c.zt'

Not part of `.ci/run`.
"""

import os
import statistics
import subprocess
import sys
import time


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rounds, out = int(sys.argv[1]), sys.argv[2]
    cases = []
    for arg in sys.argv[3:]:
        name, rest = arg.split("=", 1)
        zt, url = rest.split(",", 1)
        cases.append((name, zt, url))
    env = dict(os.environ, ZTSERVE_CACHE="off")
    times = {name: [] for name, _, _ in cases}
    for _ in range(rounds):
        for name, zt, url in cases:
            if os.path.exists(out):
                os.remove(out)
            subprocess.run(["sync"], check=True)
            start = time.perf_counter()
            done = subprocess.run(
                [zt, "fetch", "--insecure", "-o", out, url], capture_output=True, env=env
            )
            took = time.perf_counter() - start
            if done.returncode != 0:
                sys.exit(f"{name}: {done.stderr.decode(errors='replace').strip()}")
            times[name].append(took)
    first = statistics.median(times[cases[0][0]])
    for name, _, _ in cases:
        m = statistics.median(times[name])
        rounds_s = " ".join(f"{t:.3f}" for t in times[name])
        print(f"{name:<12} median {m:.3f} s  {m / first:.3f}x {cases[0][0]}'s time  [{rounds_s}]")


if __name__ == "__main__":
    main()
