"""Mirror of ``include/linux/perfctr.h`` and ``include/asm/perfctr.h``: the
Linux perfctr 2.6 user ABI (x86 layout), as libperfctr passes it to hwperfd.

The structs are perfctr 2.6's, field for field.  The kernel driver passed
most of them through ``struct perfctr_struct_buf`` in a tagged encoding; a
FUSE ioctl needs the size in the command number, so hwperfd's commands carry
each struct as it is laid out in memory (same names and numbers, ``_IOC``
size = the struct's).  ``_IO`` commands keep their argument (a tid, an
interval) in ``arg``.
"""

import struct

from construct import Array, Bytes, Int32sl, Int32ul, Int64ul, Padding, Struct

from structs.procfs import _IO, _IOR, _IOW, _IOWR

NR_CTRS = 18  # the x86 arrays' length (pmc_map[18], ...)
PERFCTR_API_VERSION = 0x0502
PERFCTR_CPU_VERSION = 0x0501
PERFCTR_ABI_VERSION = (PERFCTR_API_VERSION << 16) | PERFCTR_CPU_VERSION
DRIVER_VERSION = "2.6.41-hwperfd"

PERFCTR_FEATURE_RDPMC = 0x01
PERFCTR_FEATURE_RDTSC = 0x02
PERFCTR_FEATURE_PCINT = 0x04

# cpu_type values (asm-x86/perfctr.h) of the emulated models.
PERFCTR_X86_GENERIC = 0
PERFCTR_X86_AMD_K8 = 13
PERFCTR_X86_INTEL_CORE2 = 18
CPU_TYPES = {"intel": PERFCTR_X86_INTEL_CORE2, "amd": PERFCTR_X86_AMD_K8}

VPERFCTR_CONTROL_CLOEXEC = 0x01
SI_PMC_OVF = ord("P")  # user-space value of si_code

perfctr_info = Struct(
    "abi_version" / Int32ul,
    "driver_version" / Bytes(32),
    "cpu_type" / Int32ul,
    "cpu_features" / Int32ul,
    "cpu_khz" / Int32ul,
    "tsc_to_cpu_mult" / Int32ul,
    "_reserved" / Array(3, Int32ul),
)
PERFCTR_INFO_SIZE = perfctr_info.sizeof()  # 64

perfctr_sum_ctrs = Struct("tsc" / Int64ul, "pmc" / Array(NR_CTRS, Int64ul))
SUM_CTRS_SIZE = perfctr_sum_ctrs.sizeof()  # 152

perfctr_cpu_control = Struct(
    "tsc_on" / Int32ul,
    "nractrs" / Int32ul,
    "nrictrs" / Int32ul,
    "pmc_map" / Array(NR_CTRS, Int32ul),
    "evntsel" / Array(NR_CTRS, Int32ul),
    # the union of p4.escr[18] + pebs fields / evntsel_high[18] / nhlm.offcore_rsp
    "evntsel_high" / Array(NR_CTRS + 2, Int32ul),
    "ireset" / Array(NR_CTRS, Int32sl),
    "_reserved" / Array(4, Int32ul),
)
CPU_CONTROL_SIZE = perfctr_cpu_control.sizeof()  # 324

vperfctr_control = Struct(
    "si_signo" / Int32sl,
    "cpu_control" / perfctr_cpu_control,
    "preserve" / Int32ul,
    "flags" / Int32ul,
    "_reserved" / Array(3, Int32ul),
)
VPERFCTR_CONTROL_SIZE = vperfctr_control.sizeof()  # 348

gperfctr_cpu_control = Struct(
    "cpu" / Int32ul,
    "cpu_control" / perfctr_cpu_control,
    "_reserved" / Array(4, Int32ul),
)
GPERFCTR_CPU_CONTROL_SIZE = gperfctr_cpu_control.sizeof()  # 344

gperfctr_cpu_state = Struct(
    "cpu" / Int32ul,
    "cpu_control" / perfctr_cpu_control,
    "sum" / perfctr_sum_ctrs,  # at offset 328, already 8-aligned
    "_reserved" / Array(4, Int32ul),
)
GPERFCTR_CPU_STATE_SIZE = gperfctr_cpu_state.sizeof()  # 496

# The state a thread's own reads need (hwperfd's addition: what perfctr's
# mmap()ed page gave the library): cstatus in the x86 encoding, and the sums
# brought up to date.
vperfctr_state = Struct("cstatus" / Int32ul, Padding(4), "sum" / perfctr_sum_ctrs)
VPERFCTR_STATE_SIZE = vperfctr_state.sizeof()  # 160

# The same two layouts for the read path, packed without construct's cost
# (a thread's reads are the hot path; the ABI test compares them).
SUM_CTRS_PACK = struct.Struct(f"<Q{NR_CTRS}Q")
VPERFCTR_STATE_PACK = struct.Struct(f"<I4xQ{NR_CTRS}Q")
assert SUM_CTRS_PACK.size == SUM_CTRS_SIZE and VPERFCTR_STATE_PACK.size == VPERFCTR_STATE_SIZE

# PERFCTR_CPUS: a fixed mask of 32 words (1024 CPUs); nrwords says how many count.
CPU_MASK_WORDS = 32
perfctr_cpu_mask = Struct("nrwords" / Int32ul, "mask" / Array(CPU_MASK_WORDS, Int32ul))
CPU_MASK_SIZE = perfctr_cpu_mask.sizeof()

# hwperfd's binding of an open <mount>/perfctr to a thread's vperfctr (what
# VPERFCTR_CREAT/OPEN did by returning a new descriptor, which a FUSE server cannot).
vperfctr_attach = Struct("tid" / Int32sl, "creat" / Int32ul)
VPERFCTR_ATTACH_SIZE = vperfctr_attach.sizeof()

# hwperfd: a control the calling thread stamped with its CPU clock (ns) as it
# made it, given later (libperfctr's vperfctr that counts its TSC alone is set up
# in the daemon only when the thread first asks more of it, docs/perfctr.md).
vperfctr_control_ns = Struct("ns" / Int64ul, "control" / vperfctr_control, Padding(4))
VPERFCTR_CONTROL_NS_SIZE = vperfctr_control_ns.sizeof()  # 360

VPERFCTR_STATEPAGE_SIZE = 128  # hwperfd_vperfctr_statepage: a path, as HWPERFD_STATE_PATH_MAX

_P = 0xD0  # _PERFCTR_IOCTL, 'P' + 128


def _ior(nr: int, size: int) -> int:
    return _IOR(chr(_P), nr, size)


PERFCTR_ABI = _ior(0, 4)
PERFCTR_INFO = _ior(1, PERFCTR_INFO_SIZE)
PERFCTR_CPUS = _IOWR(chr(_P), 2, CPU_MASK_SIZE)
PERFCTR_CPUS_FORBIDDEN = _IOWR(chr(_P), 3, CPU_MASK_SIZE)
VPERFCTR_CREAT = _IO(chr(_P), 6)
VPERFCTR_OPEN = _IO(chr(_P), 7)
VPERFCTR_READ_SUM = _ior(8, SUM_CTRS_SIZE)
VPERFCTR_UNLINK = _IO(chr(_P), 9)
VPERFCTR_CONTROL = _IOW(chr(_P), 10, VPERFCTR_CONTROL_SIZE)
VPERFCTR_IRESUME = _IO(chr(_P), 11)
VPERFCTR_READ_CONTROL = _ior(12, VPERFCTR_CONTROL_SIZE)
VPERFCTR_READ_STATE = _ior(13, VPERFCTR_STATE_SIZE)  # hwperfd
VPERFCTR_ATTACH = _IOW(chr(_P), 14, VPERFCTR_ATTACH_SIZE)  # hwperfd
# hwperfd: the path of the calling thread's state page (<hwperfd/state.h>),
# what perfctr's mmap() of the vperfctr file gave its owning thread.
VPERFCTR_STATEPAGE = _ior(15, VPERFCTR_STATEPAGE_SIZE)  # hwperfd
# hwperfd: the CPU ns the calling thread may run before its vperfctr's nearest
# i-mode overflow (a uint64_t; NO_OVERFLOW when none can come): libperfctr
# arms a timer on it that lands the overflow on its instant (docs/overflow.md).
VPERFCTR_OVERFLOW_NS = _ior(20, 8)  # hwperfd
# hwperfd: VPERFCTR_IRESUME told the calling thread's CPU clock as it called (0: not
# told), where the counters start again, and answering what VPERFCTR_OVERFLOW_NS
# would after it (one round trip).
VPERFCTR_IRESUME_NS = _IOWR(chr(_P), 21, 8)  # hwperfd
# hwperfd: VPERFCTR_CONTROL and VPERFCTR_UNLINK as of a CPU-clock stamp of the
# calling thread's own (vperfctr_control_ns; a uint64_t), and whether the daemon
# takes such stamps (a uint32_t: 1 when it counts threads by their own CPU clocks).
VPERFCTR_CONTROL_NS = _IOW(chr(_P), 22, VPERFCTR_CONTROL_NS_SIZE)  # hwperfd
VPERFCTR_UNLINK_NS = _IOW(chr(_P), 23, 8)  # hwperfd
PERFCTR_THREAD_CLOCKS = _ior(24, 4)  # hwperfd
NO_OVERFLOW = 2**64 - 1
OVERFLOW_NS_PACK = struct.Struct("<Q")
GPERFCTR_CONTROL = _IOWR(chr(_P), 16, GPERFCTR_CPU_CONTROL_SIZE)
GPERFCTR_READ = _IOWR(chr(_P), 17, GPERFCTR_CPU_STATE_SIZE)
GPERFCTR_STOP = _IO(chr(_P), 18)
GPERFCTR_START = _IO(chr(_P), 19)

_PATH_PERFCTR = "/dev/perfctr"
PERFCTR_NODE = "perfctr"  # <mount>/perfctr

__all__ = [name for name in dir() if name.isupper() or name.startswith(("perfctr", "vperfctr", "gperfctr", "_PATH"))]
