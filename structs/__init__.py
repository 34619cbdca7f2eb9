"""The IRIX hwperf client ABI as construct definitions.

Each module mirrors one C header under ``include/sys``; a test compiles the
headers and checks that sizes, offsets and bit-field encodings agree.
"""

from structs.hwperftypes import *  # noqa: F401,F403
from structs.procfs import *  # noqa: F401,F403
from structs.prinfo import *  # noqa: F401,F403
from structs.machine import *  # noqa: F401,F403
