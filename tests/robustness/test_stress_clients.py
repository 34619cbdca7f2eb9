"""Load: 64 concurrent clients on one mount, every count exactly as the clock says.

Each client (stress_client.py) counts itself or a child of its own and reads
its counters all the time.  The test moves each target's manual clock in many
small random steps, from four writer threads, and now and then reads a
target itself.  Under the manual clock every count is predictable:

    slot 0  (cycles, U and EXL)  = user time x 200 cycles/us
                                   + system time x 200 cycles/us x 1/10
                                   (the EXL share; the other 9/10 is K)
    slot 25 (D-cache misses, U)  = user cycles / 100   (balanced profile)

so every value a client ever saw must be one of the prefix sums of its
steps, in order, and the last one must be the total: nothing lost, nothing
counted twice, nothing read half-updated.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time

import pytest

import structs
from hwperfd.client import Control, ProcessCounters, pack_request
from tests.conftest import finish
from tests.robustness.helpers import HERE, Figures, daemon_alive, own_mount, publish

CLIENTS = 64
STEPS = 40  # clock steps per client


def expected(user_us: int, system_us: int) -> tuple[int, int]:
    return user_us * 200 + system_us * 200 // 10, user_us * 200 // 100


@pytest.fixture(scope="module")
def stress_mount(shared_tmp):
    with own_mount(shared_tmp, "stress") as mount:
        yield mount


def test_64_concurrent_clients_count_exactly(stress_mount):
    figures = Figures(f"stress: {CLIENTS} concurrent clients")
    started = time.monotonic()
    clients = [
        subprocess.Popen(
            [sys.executable, str(HERE / "stress_client.py"), str(stress_mount.path), "child" if i % 4 == 3 else "self"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        for i in range(CLIENTS)
    ]
    try:
        targets, gens = [], []
        for c in clients:
            words = c.stdout.readline().split()
            assert words[:1] == ["ready"], c.stderr.read()
            targets.append(int(words[1]))
            gens.append(int(words[2]))
        assert len(set(targets)) == CLIENTS

        rng = random.Random(20260611)
        steps = [[(rng.randint(0, 2000), rng.randint(0, 2000)) for _ in range(STEPS)] for _ in range(CLIENTS)]
        done = [0] * CLIENTS  # steps applied per client
        checks = [0]
        failures: list[str] = []
        lock = threading.Lock()

        def writer(part: int) -> None:
            mine = [i for i in range(CLIENTS) if i % 4 == part]
            with Control(mount=stress_mount.path) as control:
                files = {i: ProcessCounters(targets[i], mount=stress_mount.path) for i in mine}
                try:
                    for step in range(STEPS):
                        for i in mine:
                            user_us, system_us = steps[i][step]
                            control.advance(targets[i], user_us * 1000, system_us * 1000)
                            with lock:
                                done[i] += 1
                                figures.ok()
                            if (step + i) % 3 == 0:  # interleaved reads, exact at that moment
                                total_u = sum(u for u, _ in steps[i][: step + 1])
                                total_s = sum(s for _, s in steps[i][: step + 1])
                                gen, counts = files[i].read()
                                with lock:
                                    figures.ok()
                                    checks[0] += 1
                                    if (gen, counts[0], counts[25]) != (gens[i],) + expected(total_u, total_s):
                                        failures.append(f"client {i} step {step}: {gen} {counts[0]} {counts[25]}")
                                    if any(counts[k] for k in range(32) if k not in (0, 25)):
                                        failures.append(f"client {i} step {step}: counts in unused slots")
                finally:
                    for f in files.values():
                        f.close()

        threads = [threading.Thread(target=writer, args=(part,)) for part in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        assert done == [STEPS] * CLIENTS
        assert not failures, failures[:5]

        for c in clients:
            c.stdin.write("stop\n")
            c.stdin.flush()
        reports = []
        for c in clients:
            out, err = finish(c, timeout=60)
            assert c.returncode == 0, err
            reports.append(json.loads(out))
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
                c.wait()

    lost = 0
    for i, report in enumerate(reports):
        assert report["target"] == targets[i]
        prefixes, u, s = [expected(0, 0)], 0, 0
        for user_us, system_us in steps[i]:
            u, s = u + user_us, s + system_us
            prefixes.append(expected(u, s))
        figures.calls += report["reads"]
        figures.outcomes["ok"] += report["reads"] - sum(report["errors"].values())
        for name, n in report["errors"].items():
            figures.outcomes[name] += n
        # Every value seen is a prefix sum, in order, in the enabling generation.
        position = 0
        for gen, *counts in report["seen"]:
            assert gen == gens[i], f"client {i}: generation changed {gens[i]} -> {gen}"
            assert tuple(counts) in prefixes[position:], f"client {i}: {counts} is no prefix sum at/after step {position}"
            position = prefixes.index(tuple(counts), position)
        final = tuple(report["final"])
        if final != (gens[i],) + prefixes[-1]:
            lost += 1
        assert final == (gens[i],) + prefixes[-1], f"client {i}: final {final}, expected {prefixes[-1]}"
    figures.crash("daemon died", 0 if daemon_alive(stress_mount) else 1)
    figures.crash("client errors", sum(1 for n in figures.outcomes if n != "ok"))
    figures.notes.update(
        {
            "clock steps": CLIENTS * STEPS,
            "exact checks during the run": checks[0],
            "distinct values seen by clients": sum(len(r["seen"]) for r in reports),
            "final counts off the prediction": lost,
            "seconds": round(time.monotonic() - started, 1),
        }
    )
    publish(figures)
    assert figures.total_crashes == 0
    assert "Traceback" not in stress_mount.log_text()


def test_client_scripts_use_the_abi_numbers():
    """proc_ioctls.py spells the numbers out so that clients start fast; they must be structs'."""
    from tests.robustness import proc_ioctls

    for name in ("PIOCENEVCTRS", "PIOCRELEVCTRS", "PIOCGETEVCTRS", "PIOCGETPREVCTRS", "PIOCGETEVCTRL", "PIOCSETEVCTRL"):
        assert getattr(proc_ioctls, name) == getattr(structs, name), name
    words = {0: structs.spec_word(0, structs.HWPERF_CNTEN_U), 25: structs.spec_word(9, structs.HWPERF_CNTEN_U)}
    assert bytes(proc_ioctls.request(words)) == pack_request(words)
