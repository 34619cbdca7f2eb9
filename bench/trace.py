#!/usr/bin/env python3
"""What recording costs (docs/trace.md): nothing measurable when off.

    python3 bench/trace.py [--calls N] [--rounds R]

Three daemons on the real clock, state pages off (so every counter read
reaches the daemon and catches its process up, which calls the recorder's
``ran`` hook once), the store off, each pinned with the client to CPU 0:

* ``stripped``: the recorder compiled out - every ``trace.active.*(...)``
  statement of the daemon's modules is removed from their source as they
  are imported (an import hook; byte code cached elsewhere);
* ``off``: the daemon as shipped, recording off (the null recorder);
* ``on``: recording (``--trace``) into a ring of 100 000 events.

bench/ioctl_client.c enables cycles on itself and times PIOCGETEVCTRS round
trips against each, interleaved over ROUNDS (each round in another order, so
that a trend in the machine's load falls on all alike); per daemon, the
median of the per-round medians and the best round's median (the one least
disturbed by others' load, as timeit takes the least), and the ratios off /
stripped (goal: within 2 %) and on / stripped of both.  Beside them, the cost
of one call of a null hook, in this process, against the round trip: what
recording off adds to a read that catches up, measured without the noise of
a round trip.

Needs root and a C compiler.  Everything is unmounted at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from restart import mounted, stop  # noqa: E402 - bench/restart.py, a sibling module

from hwperfd.trace import recorder  # noqa: E402

GOAL = 1.02
# Run as ``python -c``: strip the recorder's calls from hwperfd's modules, then start the daemon.
STRIPPED = r"""
import ast, importlib.machinery, sys, tempfile
sys.pycache_prefix = tempfile.mkdtemp(prefix="hwperfd-stripped-")  # never the shipped byte code
stripped = 0

class Strip(ast.NodeTransformer):
    def visit_Expr(self, node):
        global stripped
        func = getattr(node.value, "func", None)
        owner = getattr(func, "value", None)
        if (isinstance(owner, ast.Attribute) and owner.attr == "active" and isinstance(owner.value, ast.Name)
                and owner.value.id == "trace"):
            stripped += 1
            return ast.copy_location(ast.Pass(), node)
        return node

plain = importlib.machinery.SourceFileLoader.source_to_code

def source_to_code(self, data, path, *, _optimize=-1):
    if "/hwperfd/" not in str(path) or "/hwperfd/trace/" in str(path):
        return plain(self, data, path, _optimize=_optimize)
    tree = ast.fix_missing_locations(Strip().visit(ast.parse(data, path)))
    return compile(tree, path, "exec", dont_inherit=True, optimize=_optimize)

importlib.machinery.SourceFileLoader.source_to_code = source_to_code
from hwperfd import daemon, service  # noqa: the daemon's modules, stripped
print(f"stripped {stripped} recorder calls", file=sys.stderr, flush=True)
sys.argv[0] = "hwperfd"
sys.exit(daemon.main())
"""


def start(mount: Path, log: Path, argv: list[str]) -> subprocess.Popen:
    mount.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["taskset", "-c", "0", *argv, str(mount)], stdout=open(log, "a"),
                            stderr=subprocess.STDOUT, cwd=ROOT)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if mounted(mount) and (mount / "control").exists():
            return proc
        if proc.poll() is not None:
            raise RuntimeError(log.read_text())
        time.sleep(0.01)
    raise RuntimeError("hwperfd did not mount")


def round_trip(client: Path, mount: Path, calls: int) -> float:
    """The client's median PIOCGETEVCTRS round trip (us)."""
    done = subprocess.run(["taskset", "-c", "0", str(client), "-e", "-n", str(calls), "-w", "200", str(mount)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT"))
    return float(dict(f.split("=") for f in line.split()[1:])["median_us"])


def null_hook_ns(calls: int = 200_000) -> float:
    """One call of a null recorder's hook, as the layers make it (ns)."""
    block = object()
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter_ns()
        for _ in range(calls):
            recorder.active.ran(1, 0, block, None, 1, 0)
        best = min(best, (time.perf_counter_ns() - began) / calls)
    return best


def main() -> int:
    quick = os.environ.get("HWPERFD_BENCH_QUICK") == "1"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=300 if quick else 2000)
    p.add_argument("--rounds", type=int, default=1 if quick else 12)
    args = p.parse_args()
    daemon = [sys.executable, "-m", "hwperfd"]
    common = ["--clock", "real", "--state-dir", "", "--no-store", "--cpus", "2"]
    with tempfile.TemporaryDirectory(prefix="hwperfd-bench-trace-") as tmp:
        base = Path(tmp)
        os.chmod(base, 0o755)
        client = base / "ioctl_client"
        subprocess.run(["cc", "-O2", f"-I{ROOT / 'include'}", "-o", str(client), str(ROOT / "bench" / "ioctl_client.c"),
                        str(ROOT / "lib" / "state.c"), str(ROOT / "lib" / "state_open.c")], check=True)  # fmt: skip
        variants = {
            "stripped": [sys.executable, "-c", STRIPPED, *common],
            "off": [*daemon, *common],
            "on": [*daemon, *common, "--trace", str(base / "trace.json")],
        }
        running = {}
        try:
            for name, argv in variants.items():
                running[name] = start(base / f"mnt-{name}", base / f"{name}.log", argv)
            medians: dict[str, list[float]] = {name: [] for name in variants}
            names = list(variants)
            for turn in range(args.rounds):
                for name in names[turn % 3 :] + names[: turn % 3]:
                    medians[name].append(round_trip(client, base / f"mnt-{name}", args.calls))
        finally:
            for name, proc in running.items():
                stop(proc, base / f"mnt-{name}")
        stripped_log = (base / "stripped.log").read_text()
        assert "stripped " in stripped_log and "stripped 0 " not in stripped_log, stripped_log
        recorded = (base / "trace.json").stat().st_size if (base / "trace.json").exists() else 0
    middle = {name: statistics.median(values) for name, values in medians.items()}
    best = {name: min(values) for name, values in medians.items()}
    print(f"PIOCGETEVCTRS round trip, real clock, each read catching its process up ({args.rounds} rounds x "
          f"{args.calls} calls, daemon and client on CPU 0; load average {os.getloadavg()[0]:.1f}):")  # fmt: skip
    print(f"  {'':<9} {'median us':>10} {'best us':>9}   rounds")
    for name in variants:
        print(f"  {name:<9} {middle[name]:10.2f} {best[name]:9.2f}   {' '.join(f'{v:.1f}' for v in medians[name])}")
    for name in ("off", "on"):
        ratios = middle[name] / middle["stripped"], best[name] / best["stripped"]
        goal = f"  (goal <= {GOAL}: {'met' if ratios[1] <= GOAL else 'NOT met'} at best)" if name == "off" else ""
        print(f"  {name} / stripped: {ratios[0]:.3f} median, {ratios[1]:.3f} best{goal}")
    hook = null_hook_ns()
    print(f"one null hook call: {hook:.0f} ns, one per read that catches up: "
          f"{100 * hook / 1000 / best['stripped']:.2f} % of the best stripped round trip")  # fmt: skip
    print(f"trace written by 'on': {recorded} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
