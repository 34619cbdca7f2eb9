"""Mirror of the machine description in ``include/sys/syssgi.h`` and of
``include/sys/sysmp.h``: what syssgi(), sysmp() and the CPU-speed queries of
libhwperf learn from hwperfd.

The control node is root's; the machine is not secret, so hwperfd answers
``HWPERFD_GETMACHINE`` on the mount's root directory, which any user may open.
"""

from construct import Int32sl, Int64ul, PaddedString, Struct

from structs.procfs import _IOR

# IRIX <sys/syssgi.h> request numbers libhwperf serves besides SGI_EVENTCTR.
SGI_GETNVRAM = 9
SGI_QUERY_CYCLECNTR = 13
SGI_CYCLECNTR_SIZE = 165
# IRIX <sys/sysmp.h>
MP_NPROCS = 1
MP_NAPROCS = 2

# Processor implementation numbers (PRId bits 15-8), IRIX <sys/sbd.h>.
C0_IMP_R10000 = 0x09
C0_IMP_R12000 = 0x0E
C0_IMP = {"r10000": C0_IMP_R10000, "r12000": C0_IMP_R12000}

hwperfd_machine_t = Struct(
    "hm_imp" / Int32sl,
    "hm_ncpus" / Int32sl,
    "hm_hz" / Int64ul,
    "hm_name" / PaddedString(16, "ascii"),
)

HWPERFD_GETMACHINE = _IOR("h", 128, hwperfd_machine_t.sizeof())

