"""The host's clock rate, as /proc/cpuinfo says it.

An x86 program reads the host's time-stamp counter with the rdtsc
instruction itself - no daemon sits between - and on the hardware an amd64
model stands for, the TSC and the cycle counter tick at the same rate.  PAPI
takes its clock rate from here too (linux-common.c, "cpu MHz" when cpufreq is
absent) and compares cycles with the TSC (ctests/zero.c).
"""

from __future__ import annotations

from fractions import Fraction

CPUINFO = "/proc/cpuinfo"


def host_mhz(path: str = CPUINFO) -> Fraction | None:
    """The first CPU's "cpu MHz", to the kHz; None when the file has none
    (not x86, or a kernel that does not say)."""
    try:
        with open(path) as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "cpu MHz":
                    khz = round(Fraction(value.strip()) * 1000)
                    return Fraction(khz, 1000) if khz > 0 else None
    except (OSError, ValueError):
        return None
    return None
