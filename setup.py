"""C extension build; all project metadata lives in pyproject.toml."""

import shlex
import subprocess

from setuptools import Extension, setup

BRIDGE = "hwperfd/procfs/_ioctl_bridge"


def pkg_config(*options):
    try:
        out = subprocess.run(["pkg-config", *options, "fuse3"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = str(getattr(exc, "stderr", None) or exc).strip()
        raise SystemExit(
            "hwperfd: cannot build the FUSE ioctl bridge, `pkg-config fuse3` failed:\n"
            f"  {detail}\n"
            "On Debian install the packages fuse3 libfuse3-dev pkg-config.") from None
    return shlex.split(out)


def fuse3_extension(name, source, version_script):
    cflags, libs = pkg_config("--cflags"), pkg_config("--libs")
    return Extension(
        name,
        sources=[source],
        depends=[version_script, "include/hwperfd/state.h"],
        include_dirs=["include"] + [f[2:] for f in cflags if f.startswith("-I")],
        extra_compile_args=[f for f in cflags if not f.startswith("-I")],
        library_dirs=[f[2:] for f in libs if f.startswith("-L")],
        libraries=[f[2:] for f in libs if f.startswith("-l")],
        extra_link_args=[f for f in libs if not f.startswith(("-L", "-l"))]
        + [f"-Wl,--version-script={version_script}"],
        # Same API level as pyfuse3 3.5.0 is built with (its struct fuse_lowlevel_ops).
        define_macros=[("FUSE_USE_VERSION", "32")],
    )


setup(ext_modules=[
    fuse3_extension("hwperfd.procfs._ioctl_bridge", f"{BRIDGE}.c", f"{BRIDGE}.map"),
    # Not a Python module: the LD_PRELOAD shim `hwperfd-run` uses so that IRIX
    # programs opening "/proc/%05d" (and passing IRIX's pointer-carrying
    # PIOCENEVCTRSEX / PIOCGETEVCTRLEX) reach the mount unchanged.
    Extension(
        "hwperfd.procredirect", sources=["lib/procredirect.c", "lib/state.c"], include_dirs=["include"], libraries=["dl"],
        depends=["lib/checked_copy.h", "lib/overflow_timer.h", "lib/reconnect.h"],
    ),
])
