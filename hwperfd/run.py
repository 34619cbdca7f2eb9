"""hwperfd-run: run a program whose "/proc/%05d" opens reach hwperfd's mount.

IRIX programs open their process file as "/proc/%05d"; on Linux that is a
procfs directory.  The preloaded shim (lib/procredirect.c) sends exactly
those opens to ``$HWPERFD_MOUNT`` (default /run/hwperfd) and nothing else.
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
    try:
        os.execvpe(args[0], args, env)
    except OSError as exc:
        print(f"hwperfd-run: {args[0]}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
