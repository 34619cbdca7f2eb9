"""Shared pieces of the robustness tests: figures, mounts, decoy processes."""

from __future__ import annotations

import contextlib
import errno
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import Mount, is_mounted, start_hwperfd, stop_hwperfd

HERE = Path(__file__).resolve().parent

# Answers that mean the daemon or the bridge broke: never acceptable.
BROKEN = {errno.EIO, errno.ENOTCONN, errno.ENOSYS, errno.EFAULT}

# A process file that ignores every signal it can: overflow signals that a
# random request asks for must not kill it (SIGKILL/SIGSTOP are never asked for).
DECOY = (
    "import signal, sys\n"
    "for s in range(1, signal.NSIG):\n"
    "    try:\n        signal.signal(s, signal.SIG_IGN)\n"
    "    except (OSError, ValueError, RuntimeError):\n        pass\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def errname(code: int) -> str:
    return errno.errorcode.get(code, f"E{code}")


@dataclass
class Figures:
    """What a robustness test did: calls, outcomes by errno, crashes."""

    name: str
    calls: int = 0
    outcomes: Counter = field(default_factory=Counter)  # "ok" or an errno name
    crashes: Counter = field(default_factory=Counter)  # kind -> count; must stay empty
    notes: dict = field(default_factory=dict)

    def ok(self) -> None:
        self.calls += 1
        self.outcomes["ok"] += 1

    def failed(self, code: int) -> None:
        self.calls += 1
        self.outcomes[errname(code)] += 1
        if code in BROKEN:
            self.crashes[errname(code)] += 1

    def answered(self, code: int) -> None:
        """An errno that is right in the circumstances (ENOTCONN once the daemon is gone)."""
        self.calls += 1
        self.outcomes[errname(code)] += 1

    def crash(self, kind: str, n: int = 1) -> None:
        if n:
            self.crashes[kind] += n

    def merge_raw(self, text: str) -> dict:
        """Add the "key value" figures printed by raw_fuzz."""
        extra: dict[str, int] = {}
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["errno"] and len(words) == 3:
                self.outcomes[words[1]] += int(words[2])
            elif words[:1] == ["broken"] and len(words) == 3:  # raw_fuzz judged it: no command allows it
                self.crashes[words[1]] += int(words[2])
            elif len(words) == 2 and words[1].isdigit():
                extra[words[0]] = extra.get(words[0], 0) + int(words[1])
        self.calls += extra.get("calls", 0)
        self.outcomes["ok"] += extra.get("ok", 0)
        return extra

    @property
    def total_crashes(self) -> int:
        return sum(self.crashes.values())

    def report(self) -> str:
        errors = {k: v for k, v in self.outcomes.items() if k != "ok"}
        lines = [
            f"[{self.name}] calls made: {self.calls}",
            f"[{self.name}] succeeded: {self.outcomes.get('ok', 0)}",
            f"[{self.name}] errors by errno: "
            + (", ".join(f"{k} {v}" for k, v in sorted(errors.items(), key=lambda kv: -kv[1])) or "none"),
            f"[{self.name}] crashes: {self.total_crashes}"
            + (f" ({', '.join(f'{k} {v}' for k, v in self.crashes.items())})" if self.crashes else ""),
        ]
        lines += [f"[{self.name}] {k}: {v}" for k, v in self.notes.items()]
        return "\n".join(lines)


REPORTS: list[Figures] = []


def publish(figures: Figures) -> None:
    """Print the figures now (visible with -s) and in pytest's summary."""
    REPORTS.append(figures)
    print("\n" + figures.report(), flush=True)


def daemon_alive(mount: Mount) -> bool:
    if mount.process.poll() is not None or not is_mounted(mount.path):
        return False
    try:
        return "system mode" in (mount.path / "control").read_text()
    except OSError:
        return False


def fresh_mount(base: Path, name: str) -> Mount:
    return start_hwperfd(base / f"mnt-{name}", base / f"{name}.log", "--clock", "manual", "--cpus", "2", "--mhz", "200")


def finish_mount(mount: Mount) -> str:
    """SIGTERM the daemon; it must exit 0, unmount, and have logged no traceback."""
    code = stop_hwperfd(mount)
    log = mount.log_text()
    assert code == 0, f"hwperfd exited {code}:\n{log}"
    assert not is_mounted(mount.path)
    assert "Traceback" not in log, log
    return log


@contextlib.contextmanager
def own_mount(base: Path, name: str):
    """A mount of its own for a module's destructive tests, finished (and
    checked) by ``finish_mount`` whatever the tests did to it."""
    mount = fresh_mount(base, name)
    try:
        yield mount
    finally:
        finish_mount(mount)


class Decoys:
    """Processes whose files take random requests; they ignore signals."""

    def __init__(self, n: int) -> None:
        self.procs = [
            subprocess.Popen([sys.executable, "-c", DECOY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(n)
        ]
        for p in self.procs:
            assert p.stdout.readline().strip() == "ready"
        self.pids = [p.pid for p in self.procs]

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
