"""Mirror of ``include/machine/pctr.h``: OpenBSD's pctr(4) ABI, Linux-encoded.

``PCIOCRD`` is ``_IOR('c', 1, struct pctrst)`` and ``PCIOCS0..3`` are
``_IOW('c', 8..11, unsigned int)``, as OpenBSD defines them, with Linux's
``_IOC`` layout (direction and size in the number, which FUSE needs).
"""

from construct import Array, Int32ul, Int64ul, Struct

from structs.procfs import _IOR, _IOW

PCTR_NUM = 4

pctrst = Struct(
    "pctr_fn" / Array(PCTR_NUM, Int32ul),
    "pctr_tsc" / Int64ul,
    "pctr_hwc" / Array(PCTR_NUM, Int64ul),
)
PCTRST_SIZE = pctrst.sizeof()  # 56

PCTR_U = 0x010000
PCTR_K = 0x020000
PCTR_E = 0x040000
PCTR_EN = 0x400000
PCTR_I = 0x800000
PCTR_UM_M = 0x0800
PCTR_UM_E = 0x0400
PCTR_UM_S = 0x0200
PCTR_UM_I = 0x0100
PCTR_UM_MESI = PCTR_UM_M | PCTR_UM_E | PCTR_UM_S | PCTR_UM_I
PCTR_UM_A = 0x2000
PCTR_UM_SHIFT = 8
PCTR_CM_SHIFT = 24
# Bits the driver refuses in a function (pctrsel: "fn & 0x380000"): the
# pin control, APIC interrupt and any-thread bits.
PCTR_RESERVED = 0x380000

PCIOCRD = _IOR("c", 1, PCTRST_SIZE)
PCIOCS0 = _IOW("c", 8, 4)
PCIOCS1 = _IOW("c", 9, 4)
PCIOCS2 = _IOW("c", 10, 4)
PCIOCS3 = _IOW("c", 11, 4)
PCIOCS = (PCIOCS0, PCIOCS1, PCIOCS2, PCIOCS3)

_PATH_PCTR = "/dev/pctr"
PCTR_NODE = "pctr"  # <mount>/pctr

__all__ = [name for name in dir() if name.startswith(("PC", "pctr", "_PATH"))]
