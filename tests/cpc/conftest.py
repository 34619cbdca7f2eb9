"""Mounts of several CPU models and the libcpc C programs (tests/cpc/*.c).

Programs link libcpc statically and sit where any user can run them.  The
page's examples are built from the page's text unchanged, with the error()
routine the page assumes (page_error.h/.c).
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from fractions import Fraction
from pathlib import Path

import pytest

from hwperfd.cpu.profiles import WorkloadProfile
from tests.conftest import NOBODY, ROOT, Mount, running_hwperfd

HERE = Path(__file__).resolve().parent
MHZ = 1000  # 1 us of CPU time = 1000 cycles
RATES = WorkloadProfile().rates  # the default ("balanced") profile
TIMEOUT = 20.0


def events(kinds: str, ns: int, sign_kinds: str = "") -> int:
    """Exact events in ``ns`` of CPU time at MHZ for the sum of ``kinds``
    less ``sign_kinds`` (the emulator carries fractions, so this is exact
    from a zero residue)."""
    rate = sum((RATES.get(k, Fraction(0)) for k in kinds.split()), Fraction(0))
    rate -= sum((RATES.get(k, Fraction(0)) for k in sign_kinds.split()), Fraction(0))
    exact = Fraction(ns) * MHZ / 1000 * rate
    return exact.numerator // exact.denominator


@pytest.fixture(scope="session")
def cpc_programs(shared_tmp) -> dict[str, Path]:
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib"), "libcpc"], check=True)
    out = shared_tmp / "cpc-bin"
    out.mkdir(mode=0o755, exist_ok=True)
    lib, inc = str(ROOT / "lib" / "libcpc.a"), f"-I{ROOT / 'include'}"
    strict = ["-O2", "-Wall", "-Wextra", "-Werror"]
    # Example 2's global "index" is also the name of a GCC built-in (the
    # strings.h function): a warning only, off here.
    page = ["-O2", "-Wall", "-Wno-misleading-indentation", "-Wno-builtin-declaration-mismatch", "-include",
            str(HERE / "page_error.h")]  # fmt: skip
    builds = {
        "cpc_driver": (strict, ["cpc_driver.c"]),
        "lwp_threads": (strict, ["lwp_threads.c"]),
        "bind_overflow": (strict, ["bind_overflow.c"]),
        "example1": (page, ["example1.c", "page_error.c"]),
        "example2": (page, ["example2.c", "page_error.c"]),
    }
    built = {}
    for name, (flags, sources) in builds.items():
        target = out / name
        subprocess.run(["cc", *flags, inc, "-o", str(target), *(str(HERE / s) for s in sources), lib, "-pthread"],
                       check=True)  # fmt: skip
        built[name] = target
    return built


def _mount(shared_tmp, name: str, model: str, clock: str = "manual", cpus: int = 2):
    return running_hwperfd(shared_tmp / f"mnt-cpc-{name}", shared_tmp / f"hwperfd-cpc-{name}.log", "--clock", clock,
                           "--cpus", str(cpus), "--cpu-type", model, "--mhz", str(MHZ))  # fmt: skip


@pytest.fixture(scope="session")
def sparc(shared_tmp):
    """Two UltraSPARC IIs at 1000 MHz on the manual clock."""
    with _mount(shared_tmp, "sparc", "ultrasparc") as m:
        yield m


@pytest.fixture(scope="session")
def intel(shared_tmp):
    with _mount(shared_tmp, "intel", "intel") as m:
        yield m


@pytest.fixture(scope="session")
def mips(shared_tmp):
    with _mount(shared_tmp, "mips", "r10000") as m:
        yield m


@pytest.fixture(scope="session")
def intel_real(shared_tmp):
    with _mount(shared_tmp, "intel-real", "intel", clock="real") as m:
        yield m


class Driver:
    """tests/cpc/cpc_driver.c, one command at a time."""

    def __init__(self, mount: Mount, program: Path, *, nobody: bool = False) -> None:
        prefix = NOBODY if nobody else []
        self.proc = subprocess.Popen([*prefix, str(program)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=mount.env())  # fmt: skip
        self._buf = b""
        self.handled: list[str] = []
        first = self.line()
        assert first.startswith("ready "), first + self.stderr()
        self.tid = int(first.split()[1])

    def line(self, timeout: float = TIMEOUT) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, left))
            if not ready:
                raise TimeoutError(f"no line from the driver; so far {self._buf!r}")
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                raise EOFError(f"driver ended: {self._buf!r} {self.stderr()}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def __call__(self, command: str) -> str:
        """Run one command; its "ok ..."/"err ..." line (handler lines go to ``handled``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()
        while True:
            line = self.line()
            if line.startswith("handler "):
                self.handled.append(line)
            elif line.startswith(("ok", "err")):
                return line
            elif line.startswith("end"):
                continue

    def lines_until(self, command: str, end: str = "end") -> list[str]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()
        out = []
        while (line := self.line()) != end:
            out.append(line)
        return out

    def values(self, command: str = "sample") -> list[int]:
        reply = self(command)
        assert reply.startswith("ok "), reply
        words = reply.split()[1:]
        return [int(w) for w in words[: words.index("tick")]]

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return ""
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode()

    def close(self) -> str:
        """End the driver; its stderr."""
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=TIMEOUT)
        return self.proc.stderr.read().decode()


@pytest.fixture
def driver(cpc_programs):
    """Start drivers on mounts; every one is ended after the test."""
    started: list[Driver] = []

    def start(mount: Mount, *, nobody: bool = False) -> Driver:
        d = Driver(mount, cpc_programs["cpc_driver"], nobody=nobody)
        started.append(d)
        return d

    yield start
    for d in started:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
