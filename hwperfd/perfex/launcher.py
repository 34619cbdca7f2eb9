"""Write the ``perfex`` launcher: the interpreter with ``-I -S`` and an explicit
``sys.path``.

pip's entry-point script starts perfex through the interpreter's full
start-up: ``site`` and every ``.pth`` hook of the site-packages directory
(editable installs, vendor hooks), which on some machines costs more than
perfex itself (docs/speed.md, perfex start-up).  perfex needs none of it - only the standard
library and this package - so the launcher runs ``python3 -IS`` (no site,
no user site, no PYTHON* variables, no script directory on the path) and
puts the directory holding ``hwperfd`` first on ``sys.path``; the
site-packages directories go last, without their ``.pth`` hooks, for the
rare import a tool might still need from them.

    python3 -m hwperfd.perfex.launcher [--python PY] PATH   # writes PATH (mode 0755)

scripts/install.sh writes it over pip's ``perfex`` script after ``pip install``.
"""

from __future__ import annotations

import os
import sys

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TEMPLATE = """\
#!{python} -IS
# perfex, started without site and its .pth hooks (python3 -m hwperfd.perfex.launcher wrote this).
import sys

sys.path[:0] = {first!r}
sys.path += {last!r}
from hwperfd.perfex import hold_start_signals

hold_start_signals()  # before the imports, which take most of perfex's start-up
from hwperfd.perfex.cli import main

sys.exit(main())
"""


def site_directories() -> list[str]:
    """The site-packages directories ``site`` would add (without their .pth files)."""
    import sysconfig

    out: list[str] = []
    for key in ("purelib", "platlib"):
        path = sysconfig.get_path(key)
        if path and path not in out:
            out.append(path)
    return out


def text(python: str = sys.executable, root: str = PACKAGE_ROOT) -> str:
    """The launcher's source for ``python``, finding hwperfd under ``root``."""
    if not os.path.isabs(python) or any(c.isspace() for c in python):
        raise ValueError(f"the interpreter must be an absolute path without spaces, not {python!r}")
    last = [d for d in site_directories() if d != root]
    return TEMPLATE.format(python=python, first=[root], last=last)


def write(path: str, python: str = sys.executable, root: str = PACKAGE_ROOT) -> None:
    """Write the launcher at ``path`` in one step (a running perfex keeps the old one)."""
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "w") as out:
        out.write(text(python, root))
    os.chmod(temporary, 0o755)
    os.replace(temporary, path)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    python = sys.executable
    if args[:1] == ["--python"] and len(args) >= 2:
        python, args = args[1], args[2:]
    if len(args) != 1 or args[0].startswith("-"):
        sys.stderr.write("usage: python3 -m hwperfd.perfex.launcher [--python PY] PATH\n")
        return 2
    try:
        write(args[0], python)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"hwperfd.perfex.launcher: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
