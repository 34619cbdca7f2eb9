"""hwperfd-run: run a program whose "/proc/%05d" opens reach hwperfd's mount.

IRIX programs open their process file as "/proc/%05d"; on Linux that is a
procfs directory.  The preloaded shim (lib/procredirect.c) sends exactly
those opens to ``$HWPERFD_MOUNT`` (default /run/hwperfd) and nothing else.

On an x86 model it also tells libpfm 3 (which PAPI's perfctr component
uses to name events) which CPU the mount emulates, ``LIBPFM_FORCE_PMU``,
unless the user has set it: libpfm asks the host's own CPUID otherwise.

It changes nothing else of the program's environment: how its threads
wait, spin or run is what the program counts.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from pathlib import Path

USAGE = "usage: hwperfd-run PROGRAM [ARGS...]"


def preload_library() -> Path:
    here = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = here / f"procredirect{suffix}"
        if candidate.exists():
            return candidate
    raise FileNotFoundError("the /proc redirect shim is not built: reinstall hwperfd (pip install .)")


def mount_point() -> Path:
    return Path(os.environ.get("HWPERFD_MOUNT") or "/run/hwperfd")


def libpfm_pmu(perfctr_node: str) -> str | None:
    """``LIBPFM_FORCE_PMU`` for the CPU the perfctr node describes (its
    ``vendor`` and ``cpuid`` lines), None if libpfm 3 has no PMU for it.
    libpfm 3 takes a PMU number; its AMD64 PMU (16) takes the family, model
    and stepping after it, which choose the event table (pfmlib_amd64.c)."""
    fields = dict(line.partition(" ")[::2] for line in perfctr_node.splitlines())
    try:
        family, model, stepping = (int(x) for x in fields.get("cpuid", "").split())
    except ValueError:
        return None
    vendor = fields.get("vendor")
    if vendor == "AuthenticAMD" and family >= 15:
        return f"16,{family},{model},{stepping}"
    if vendor == "GenuineIntel" and family == 6 and model in (15, 22, 23, 29):
        return "36"  # PFMLIB_INTEL_CORE_PMU: Core 2 (pfmlib_core.c's models)
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 0 if args else 2
    try:
        library = preload_library()
    except FileNotFoundError as exc:
        print(f"hwperfd-run: {exc}", file=sys.stderr)
        return 1
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(filter(None, [str(library), env.get("LD_PRELOAD", "")]))
    if "LIBPFM_FORCE_PMU" not in env:
        try:
            pmu = libpfm_pmu((mount_point() / "perfctr").read_text())
        except OSError:
            pmu = None  # no daemon there: the program will say so itself
        if pmu is not None:
            env["LIBPFM_FORCE_PMU"] = pmu
    try:
        os.execvpe(args[0], args, env)
    except OSError as exc:
        print(f"hwperfd-run: {args[0]}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
