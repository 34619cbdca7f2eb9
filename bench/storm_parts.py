"""What bench/storm.py and tests/security/test_storm.py share: the storm
client (bench/storm_client.c), root's counting process that times its own
reads through the daemon, and the daemon's RSS.  No ``main()``: bench/run.py
does not run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Root's counting process: reads its own counts through the daemon
# (PIOCGETEVCTRS, not its state page: a counting process's own request works
# off the event backlog the kernel had queued before it) for argv[2]
# seconds, one read each argv[3] seconds, and prints each read's seconds.
COUNTED = """
import sys, time
from hwperfd.client import ProcessCounters, user
c = ProcessCounters(mount=sys.argv[1], fast=False)
c.enable({0: user(0)})
print("ready", flush=True)
sys.stdin.readline()
times = []
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    began = time.perf_counter()
    c.read_ioctl()
    times.append(time.perf_counter() - began)
    time.sleep(float(sys.argv[3]))
print(" ".join(f"{t:.6f}" for t in times), flush=True)
"""


def build_client(out: Path) -> Path:
    """bench/storm_client.c, linked with the tree's libcpc, at ``out`` (where
    uid 65534 may run it)."""
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", f"-I{ROOT / 'include'}", "-o", str(out),
                    str(ROOT / "bench" / "storm_client.c"), f"-L{ROOT / 'lib'}", f"-Wl,-rpath,{ROOT / 'lib'}",
                    "-lcpc", "-pthread"], check=True)  # fmt: skip
    return out


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


class Counted:
    """Root's counting process (``COUNTED``) on ``mount``: started and
    enabled here, reading once ``start()`` is called, for ``seconds``."""

    def __init__(self, mount: Path, seconds: float, gap: float = 0.005, stderr: int | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", COUNTED, str(mount), str(seconds), str(gap)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                        cwd=ROOT)  # fmt: skip
        if self.process.stdout is None or self.process.stdout.readline() != "ready\n":
            self.stop()
            raise RuntimeError("the counting process did not start")

    def start(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def times(self, timeout: float = 600) -> list[float]:
        """Each read's seconds, once it is done."""
        return [float(t) for t in self.process.communicate(timeout=timeout)[0].split()]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
