"""The FUSE filesystem of hwperfd.

The ioctl bridge is imported first: it must be loaded before pyfuse3.
"""

from hwperfd.procfs import bridge  # noqa: F401  (must precede any pyfuse3 import)
