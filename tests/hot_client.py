"""Driving a test client that reads state pages (tests/hot_client.h) a line
at a time, and holding the daemon still while it reads: a read answered
while the daemon is stopped (SIGSTOP) made no round trip, as a FUSE request
would wait for it."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

from tests.conftest import NOBODY, ROOT, read_line


def build(out: Path, source: Path, library: str) -> Path:
    """``source`` linked with lib/``library``.a, into ``out`` (made, readable by nobody)."""
    subprocess.run(["make", "-s", "-C", str(ROOT / "lib"), library], check=True)
    out.mkdir(mode=0o755, exist_ok=True)
    target = out / source.stem
    flags = ["-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", f"-I{ROOT / 'tests'}"]
    subprocess.run(["cc", *flags, "-o", str(target), str(source), str(ROOT / "lib" / f"{library}.a"), "-pthread"],
                   check=True)  # fmt: skip
    return target


class Program:
    """The client, started on ``mount`` (pinned to host CPU ``cpu``, as uid 65534 if ``nobody``)."""

    def __init__(self, binary: Path, mount, *, cpu: int | None = None, nobody: bool = False) -> None:
        prefix = NOBODY if nobody else []
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        self.proc = subprocess.Popen([*pin, *prefix, str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=mount.env())  # fmt: skip
        assert self.line() == "ready"

    def line(self, timeout: float = 20.0) -> str:
        assert self.proc.stdout is not None
        try:
            return read_line(self.proc.stdout, timeout).strip()
        except TimeoutError:
            raise TimeoutError("no answer") from None

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def ask(self, command: str, timeout: float = 20.0) -> dict[str, int]:
        """The answer's ``name=number`` pairs."""
        self.send(command)
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", self.line(timeout))}

    def page(self) -> Path:
        """The state page it mapped last."""
        self.send("m")
        _, count, path = self.line().split()
        assert int(count.removeprefix("n=")) >= 1, "no state page mapped"
        return Path(path)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Stopped:
    """The daemon stopped: nothing it would have to answer is answered."""

    def __init__(self, mount) -> None:
        self.mount = mount

    def __enter__(self) -> None:
        self.mount.process.send_signal(signal.SIGSTOP)

    def __exit__(self, *exc: object) -> None:
        self.mount.process.send_signal(signal.SIGCONT)
