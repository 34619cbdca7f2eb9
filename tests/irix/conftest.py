"""IRIX counter programs built from C sources in these tests, and a real-clock mount."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, start_hwperfd, stop_hwperfd


def build(folder: Path, name: str, source: str, *flags: str) -> Path:
    """``source`` compiled against the tree's IRIX headers into ``folder``."""
    src = folder / f"{name}.c"
    src.write_text(source)
    out = folder / name
    subprocess.run(
        ["cc", "-O1", "-Wall", "-Werror", f"-I{ROOT / 'include'}", "-o", str(out), str(src), *flags], check=True
    )
    return out


@pytest.fixture(scope="module")
def real_mount(shared_tmp, request):
    """hwperfd on the real clock, its model named by the module's MODEL (default r10000)."""
    model = getattr(request.module, "MODEL", "r10000")
    name = f"irix-real-{request.module.__name__.rsplit('.', 1)[-1]}"
    mount = start_hwperfd(shared_tmp / name, shared_tmp / f"{name}.log", "--clock", "real", "--cpu-type", model)
    yield mount
    assert stop_hwperfd(mount) == 0
    assert "Traceback" not in mount.log_text()
