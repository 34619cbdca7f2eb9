"""The IRIX hwperf client ABI as construct definitions.

Each module mirrors one C header under ``include/sys``; a test compiles the
headers and checks that sizes, offsets and bit-field encodings agree.
The modules have no computed ``__all__``: a type checker cannot follow one, and
would see none of the names the star imports below bring in.
"""

from structs.hwperftypes import *  # noqa: F401,F403
from structs.procfs import *  # noqa: F401,F403
from structs.prinfo import *  # noqa: F401,F403
from structs.machine import *  # noqa: F401,F403
# Star imports carry no underscore names; the _IO* encoders are part of the ABI too.
from structs.procfs import _IO, _IOC, _IOC_NONE, _IOC_READ, _IOC_WRITE, _IOR, _IOW, _IOWR  # noqa: F401
from structs.state import *  # noqa: F401,F403
