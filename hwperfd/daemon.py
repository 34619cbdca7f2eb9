"""hwperfd: mount a /proc of live processes serving IRIX event-counter ioctls."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import resource
import subprocess
import sys

import hwperfd.lograte as lograte  # noqa: PLR0402 - the layering test reads module names
from hwperfd.cpu.models import MODELS
from hwperfd.startup import SetupError
from hwperfd.trace.recorder import DEFAULT_SIZE
from hwperfd.trace.session import MAX_SIZE

log = logging.getLogger("hwperfd")

DEFAULT_MOUNT = "/run/hwperfd"
# Descriptors the daemon needs at once: the FUSE device, its netlink sockets,
# trio's, and a few /proc files being read; an ordinary hard limit gives plenty.
MIN_FILES = 64


def default_mount() -> str:
    return os.environ.get("HWPERFD_MOUNT") or DEFAULT_MOUNT


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hwperfd",
        description="Mount a /proc whose files serve the IRIX R10000/R12000 event-counter ioctls.",
    )
    parser.add_argument(
        "mountpoint", nargs="?", default=None,
        help=f"where to mount (default: $HWPERFD_MOUNT or {DEFAULT_MOUNT}, created if missing)",
    )  # fmt: skip
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="emulated CPUs (default: host CPUs)")
    parser.add_argument("--cpu-type", choices=list(MODELS), default="r10000", help="CPU model (see --list-cpus)")
    parser.add_argument("--list-cpus", action="store_true", help="list the CPU models and exit")
    parser.add_argument(
        "--mhz", type=str, default=None,
        help="emulated clock rate (default: the model's; intel and amd on the real clock: the host's)",
    )
    parser.add_argument(
        "--clock", choices=("real", "manual"), default="real",
        help="real: host CPU time drives the counters; manual: time moves only when written to <mount>/control",
    )  # fmt: skip
    parser.add_argument(
        "--keep-cpus-awake", action="store_true",
        help="hold every host CPU out of its idle states while the daemon runs (/dev/cpu_dma_latency 0), so that "
        "the same work takes the same CPU time on a host that slows a CPU after it idled; costs power (real clock)",
    )  # fmt: skip
    parser.add_argument(
        "--linger", type=int, default=2000, metavar="USEC",
        help="after an ioctl, wait up to USEC on the FUSE device to answer the next one at once, within the burst's "
        "2 ms (0: off; default 2000, the burst's end)",
    )  # fmt: skip
    parser.add_argument(
        "--event-buffer", type=int, default=32 << 20, metavar="BYTES",
        help="receive buffer of each process-event stream (default 32 MiB; small ones lose events, "
        "which a rescan recovers: for tests)",
    )  # fmt: skip
    parser.add_argument(
        "--state-dir", default="/run/hwperfd-state", metavar="DIR",
        help="root's directory for the state pages processes read their own counters from "
        "(default: /run/hwperfd-state; '' turns them off)",
    )
    parser.add_argument(
        "--state-pages", type=int, default=256, metavar="N", help="state pages one user may have at once (default: 256)"
    )
    parser.add_argument(
        "--store", action=argparse.BooleanOptionalAction, default=True,
        help="keep what is set up in a store in --state-dir, so that a restarted daemon puts it back "
        "(default: on; docs/restart.md)",
    )  # fmt: skip
    parser.add_argument(
        "--restore-at-start", type=int, default=None, metavar="N",
        help="processes whose set-up a start puts back before it mounts; past N, each one's when it is "
        "first asked about, the rest in the background (default 64; docs/restart.md)",
    )  # fmt: skip
    parser.add_argument(
        "--trace", metavar="FILE", default=None,
        help="record every counter's life into FILE, written when the daemon stops (docs/trace.md)",
    )  # fmt: skip
    parser.add_argument(
        "--trace-size", type=int, default=DEFAULT_SIZE, metavar="EVENTS",
        help=f"events the trace holds; the oldest go past it, counted (default {DEFAULT_SIZE})",
    )  # fmt: skip
    parser.add_argument("--debug", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    if args.list_cpus:
        print(list_cpus(), end="")
        parser.exit(0)
    if not 4096 <= args.event_buffer <= 1 << 30:
        parser.error("--event-buffer must be 4096..1073741824 bytes")
    if not 0 <= args.linger <= 100_000:
        parser.error("--linger must be 0..100000 microseconds")
    if args.keep_cpus_awake and args.clock != "real":
        parser.error("--keep-cpus-awake is for the real clock: the manual clock's counts take no host time")
    if not 1 <= args.trace_size <= MAX_SIZE:
        parser.error(f"--trace-size must be 1..{MAX_SIZE} events")
    if args.trace is not None:
        args.trace = os.path.abspath(args.trace)
        if not os.path.isdir(os.path.dirname(args.trace)):
            parser.error(f"--trace: no directory {os.path.dirname(args.trace)}")
    return args


def list_cpus() -> str:
    """One line per CPU model: what --cpu-type takes."""
    lines = [f"{'name':<11} {'vendor':<13} {'arch':<8} {'ctrs':>4} {'bits':>5} {'MHz':>5}  description"]
    for model in MODELS.values():
        bits = f"{model.width}" if model.width == model.read_width else f"{model.width}/{model.read_width}"
        lines.append(
            f"{model.name:<11} {model.vendor:<13} {model.arch:<8} {model.counters:>4} {bits:>5} "
            f"{model.default_mhz:>5}  {model.description}"
        )
    return "\n".join(lines) + "\n"


def _unescape_mount_field(field: str) -> str:
    """A mount point as the kernel wrote it into mountinfo: space, tab, newline
    and backslash as three-digit octal escapes (``\\040``), the rest as is."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounted_at(path: str) -> str | None:
    """The fstype mounted exactly at ``path`` (read from mountinfo, so a dead
    FUSE server cannot hang us), or None."""
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        found = None
        for line in f:
            fields = line.split()
            point = _unescape_mount_field(fields[4])
            if point == real:
                found = fields[fields.index("-") + 1]
        return found


def prepare_mountpoint(path: str, explicit: bool) -> str:
    if os.geteuid() != 0:
        raise SetupError("hwperfd must run as root: it mounts with allow_other and reads every process's /proc")
    if not os.path.exists("/dev/fuse"):
        raise SetupError("/dev/fuse is missing: load the fuse module (modprobe fuse) or install fuse3")
    if os.path.islink(path):
        # FUSE would mount over wherever it points; say where instead.
        raise SetupError(f"mount point {path} is a symbolic link (to {os.readlink(path)}); give the real directory")
    fstype = mounted_at(path)
    if fstype is not None:
        try:
            # statfs always reaches the daemon (stat may be answered from
            # FUSE's attribute cache for a while after its daemon died).
            os.statvfs(path)
        except OSError as exc:
            if exc.errno != errno.ENOTCONN:
                raise
            # A crashed daemon left its mount behind: clear it.
            log.warning("clearing stale mount at %s", path)
            subprocess.run(["fusermount3", "-u", "-z", path], check=False)
            if mounted_at(path) is not None:
                subprocess.run(["umount", "-l", path], check=False)
        else:
            raise SetupError(f"{path} is already mounted ({fstype}); is another hwperfd running?")
    if not os.path.isdir(path):
        if explicit and not os.path.exists(path):
            raise SetupError(f"mount point {path} does not exist (create it with: mkdir -p {path})")
        if os.path.exists(path):
            raise SetupError(f"mount point {path} is not a directory")
        os.makedirs(path, exist_ok=True)
    return os.path.realpath(path)


def raise_file_limit() -> int:
    """Lift the soft RLIMIT_NOFILE to the hard one: running short of
    descriptors would make live processes look absent to clients."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # the kernel caps descriptors at fs.nr_open
        with open("/proc/sys/fs/nr_open") as f:
            target = int(f.read())
    if target < MIN_FILES:
        raise SetupError(
            f"the open-files limit is {target}; hwperfd needs at least {MIN_FILES} (ulimit -Hn, LimitNOFILE=)"
        )
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="hwperfd: %(levelname)s %(message)s",
    )
    limit = lograte.install(logging.getLogger().handlers[0])
    try:
        mount = prepare_mountpoint(args.mountpoint or default_mount(), explicit=args.mountpoint is not None)
        raise_file_limit()
        from hwperfd.service import serve

        code = serve(args, mount)
    except SetupError as exc:
        print(f"hwperfd: {exc}", file=sys.stderr)
        return 1
    finally:
        limit.flush()
    # serve() has unmounted and closed the store, pages and trace itself;
    # tearing down the interpreter's heap after that took 0.2 s of a quiet
    # CPU and over a second under load, all of it inside the 2 s a stop
    # (SIGTERM, systemctl stop) is promised in (docs/trust.md).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
