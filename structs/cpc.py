"""Mirror of ``include/sys/cpc_impl.h``: Solaris libcpc's constants and the
transport between ``libcpc.so`` and ``<mount>/cpc``.

The public constants (request and set flags, capabilities, error subcodes)
are Solaris's, from ``<sys/cpc_impl.h>``.  Solaris's library reached the
kernel through the cpc system call and ``CPCIO_*`` ioctls with pointers; a
FUSE server can follow no pointer, so our library sends one fixed-size
``hwperfd_cpc_io`` both ways (a restricted ``_IOWR`` ioctl) and the reply
carries the errno and subcode (the kernel's ``&subcode`` out-argument) in
the struct: the ioctl itself succeeds whenever the daemon understood it.
"""

import struct
from collections.abc import Mapping
from typing import Any

from construct import Array, Bytes, Container, Int32sl, Int32ul, Int64sl, Int64ul, ListContainer, PaddedString, Struct

from structs.procfs import _IOWR

# Request flags (cpc_set_add_request(3CPC)).
CPC_OVF_NOTIFY_EMT = 0x1
CPC_COUNT_USER = 0x2
CPC_COUNT_SYSTEM = 0x4
CPC_COUNT_HV = 0x8
KCPC_REQ_ALL_FLAGS = CPC_OVF_NOTIFY_EMT | CPC_COUNT_USER | CPC_COUNT_SYSTEM | CPC_COUNT_HV
# Set flags (cpc_bind_curlwp(3CPC)).
CPC_BIND_LWP_INHERIT = 0x1
CPC_SET_ALL_FLAGS = 0x1
# Capabilities (cpc_caps(3CPC)).
CPC_CAP_OVERFLOW_INTERRUPT = 0x1
CPC_CAP_OVERFLOW_PRECISE = 0x2
CPC_VER_CURRENT = 2

# Error subcodes, passed to the error handler (cpc_seterrhndlr(3CPC)).
CPC_INVALID_EVENT = 1
CPC_INVALID_PICNUM = 2
CPC_INVALID_ATTRIBUTE = 3
CPC_ATTRIBUTE_OUT_OF_RANGE = 4
CPC_RESOURCE_UNAVAIL = 5
CPC_PIC_NOT_CAPABLE = 6
CPC_REQ_INVALID_FLAGS = 7
CPC_CONFLICTING_REQS = 8
CPC_ATTR_REQUIRES_PRIVILEGE = 9
CPC_PBIND_FAILED = 10
CPC_HV_NO_ACCESS = 11

CPC_MAX_ATTR_LEN = 32
# Transport limits (ours): more requests than any model has counters, event
# names longer than any model's, attributes per request.
HWPERFD_CPC_MAXREQS = 8
HWPERFD_CPC_EVLEN = 64
HWPERFD_CPC_MAXATTRS = 8

# ci_target: what a bind, sample or release is about.
HWPERFD_CPC_LWP = 0  # the calling thread (the cpc system call's curlwp)
HWPERFD_CPC_PCTX = 1  # thread ci_id of process ci_pid (cpc_bind_pctx)
HWPERFD_CPC_CPU = 2  # CPU ci_id, held by this open file (cpc_bind_cpu)
# A sample's ci_flags (pctx only, for cputrack, which cannot stop the process
# at an exec as libpctx did): answer the values at the LWP's oldest exec not
# yet told, with this flag in the answer's ci_flags; without one, as a sample.
HWPERFD_CPC_SAMPLE_EXECS = 1

# Linux has no SIGEMT.  The daemon signals an overflow with this real-time
# signal (SIGRTMAX - 2 on Linux); libcpc catches it and raises SIGEMT (our
# SIGSTKFLT, which Linux never sends) in the same thread with si_code
# EMT_CPCOVF, as Solaris's kernel did.
HWPERFD_CPC_SIGCARRIER = 62
# ci_preset of a bind, restart or sample of the caller's own set: TIMED asks
# for the CPU ns before the set's nearest overflow interrupt, answered in it
# (NO_OVERFLOW: none can come); libcpc arms a timer on it.
HWPERFD_CPC_TIMED = 1
HWPERFD_CPC_LOOK = 2  # the timer's look (a sample), never made again
HWPERFD_CPC_NO_OVERFLOW = 2**64 - 1
SIGEMT = 16  # SIGSTKFLT
EMT_CPCOVF = 1  # illumos x86's value (SPARC used 2, after EMT_TAGOVF)

cpc_attr = Struct(
    "ka_name" / PaddedString(CPC_MAX_ATTR_LEN, "ascii"),
    "ka_val" / Int64ul,
)

cpc_req = Struct(
    "cr_event" / PaddedString(HWPERFD_CPC_EVLEN, "ascii"),
    "cr_preset" / Int64ul,
    "cr_flags" / Int32ul,
    "cr_nattrs" / Int32ul,
    "cr_attr" / Array(HWPERFD_CPC_MAXATTRS, cpc_attr),
)

# The header and results every call reads and answers; the requests after it
# only a bind reads (the daemon parses them for binds alone, and answers the
# rest of the struct unchanged: a sample need not decode 3 KB of requests).
cpc_io_head = Struct(
    "ci_error" / Int32sl,
    "ci_subcode" / Int32sl,
    "ci_target" / Int32ul,
    "ci_flags" / Int32ul,
    "ci_pid" / Int64sl,
    "ci_id" / Int64sl,
    "ci_index" / Int32sl,
    "ci_nreqs" / Int32ul,
    "ci_preset" / Int64ul,
    "ci_hrtime" / Int64sl,
    "ci_tick" / Int64ul,
    "ci_data" / Array(HWPERFD_CPC_MAXREQS, Int64ul),
)
cpc_io = Struct(*cpc_io_head.subcons, "ci_req" / Array(HWPERFD_CPC_MAXREQS, cpc_req))

# The same header as struct packs it: every cpc call reads and answers it, and
# construct takes 30-50 us a way (tests/cpc check the two agree).
_HEAD_PACK = struct.Struct(f"<iiIIqqiIQqQ{HWPERFD_CPC_MAXREQS}Q")
_HEAD_NAMES = [sub.name for sub in cpc_io_head.subcons]


def parse_head(data: bytes) -> Container:
    """``cpc_io_head.parse`` in about a microsecond."""
    values = _HEAD_PACK.unpack_from(data)
    head = Container(zip(_HEAD_NAMES[:-1], values[:-HWPERFD_CPC_MAXREQS]))
    head.ci_data = ListContainer(values[-HWPERFD_CPC_MAXREQS:])
    return head


def build_head(head: Mapping[str, Any]) -> bytes:
    """``cpc_io_head.build`` in about a microsecond."""
    return _HEAD_PACK.pack(*(head[name] for name in _HEAD_NAMES[:-1]), *head["ci_data"])
CPC_IO_HEAD_SIZE = cpc_io_head.sizeof()  # 128
CPC_IO_SIZE = cpc_io.sizeof()  # 3328
CPC_REQ_SIZE = cpc_req.sizeof()  # 400
CPC_IO_RAW = Bytes(CPC_IO_SIZE)

# A bind carries the whole struct, every other call its head alone.
HWPERFD_CPCIO_BIND = _IOWR("C", 1, CPC_IO_SIZE)
HWPERFD_CPCIO_SAMPLE = _IOWR("C", 2, CPC_IO_HEAD_SIZE)
HWPERFD_CPCIO_RELE = _IOWR("C", 3, CPC_IO_HEAD_SIZE)
HWPERFD_CPCIO_PRESET = _IOWR("C", 4, CPC_IO_HEAD_SIZE)
HWPERFD_CPCIO_RESTART = _IOWR("C", 5, CPC_IO_HEAD_SIZE)
HWPERFD_CPCIO_ENABLE = _IOWR("C", 6, CPC_IO_HEAD_SIZE)
HWPERFD_CPCIO_DISABLE = _IOWR("C", 7, CPC_IO_HEAD_SIZE)
HEAD_CALLS = (HWPERFD_CPCIO_SAMPLE, HWPERFD_CPCIO_RELE, HWPERFD_CPCIO_PRESET, HWPERFD_CPCIO_RESTART,
              HWPERFD_CPCIO_ENABLE, HWPERFD_CPCIO_DISABLE)  # fmt: skip
# Each of them sent with the whole struct (the requests after the head unread)
# is the same call: number -> the head's number.
WHOLE_IO_CALLS = {_IOWR("C", cmd & 0xFF, CPC_IO_SIZE): cmd for cmd in HEAD_CALLS}

CPC_NODE = "cpc"  # <mount>/cpc

__all__ = [name for name in dir() if name.startswith(("CPC", "KCPC", "HWPERFD", "cpc", "SIGEMT", "EMT"))]
