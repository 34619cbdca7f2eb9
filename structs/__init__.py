"""The IRIX hwperf client ABI as construct definitions.

Each module mirrors one C header under ``include/sys``; a test compiles the
headers and checks that sizes, offsets and bit-field encodings agree.
The modules have no computed ``__all__``: a type checker cannot follow one, and
would see none of the names the star imports below bring in.

``import structs`` loads only ``structs.core`` (constants, spec words, ioctl
numbers and ``struct`` codecs, ``structs.fast``): a client such as perfex
starts without construct.  The construct definitions load on the first use
of one of their names (PEP 562 ``__getattr__``).
"""

from __future__ import annotations


from structs.core import *  # noqa: F401,F403
# Star imports carry no underscore names; the _IO* encoders are part of the ABI too.
from structs.core import _IO, _IOC, _IOC_NONE, _IOC_READ, _IOC_WRITE, _IOR, _IOW, _IOWR  # noqa: F401

TYPE_CHECKING = False  # typing stays off perfex's start-up
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    from structs.hwperftypes import *  # noqa: F401,F403
    from structs.procfs import *  # noqa: F401,F403
    from structs.prinfo import *  # noqa: F401,F403
    from structs.machine import *  # noqa: F401,F403
    from structs.state import *  # noqa: F401,F403

_CONSTRUCT_MODULES = ("structs.hwperftypes", "structs.procfs", "structs.prinfo", "structs.machine", "structs.state")


def __getattr__(name: str) -> Any:
    """The construct modules' names, loaded once on first use."""
    if name.startswith("__"):
        raise AttributeError(name)
    import importlib

    namespace = globals()
    for module_name in _CONSTRUCT_MODULES:
        module = importlib.import_module(module_name)
        for key, value in vars(module).items():
            if not key.startswith("_"):
                namespace.setdefault(key, value)
    if name in namespace:
        return namespace[name]
    raise AttributeError(f"module 'structs' has no attribute {name!r}")
