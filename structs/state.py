"""Mirror of ``include/hwperfd/state.h``: the state page of one counting
context, written by the daemon and mapped read-only by the process it counts,
and ``HWPERFD_PIOCSTATEPAGE``, which tells that process where its page is.

A reader takes the page under its sequence counter (odd while the daemon
writes), then, under the real clock, its own CPU time, and extrapolates each
slot from the snapshot exactly as the daemon would (docs/state-pages.md):

    dt     = max(0, cpu clock - user_ns - system_ns)
    ds     = min((split_carry + dt * split_system) // (split_user + split_system),
                 system_room, dt)                              (0 if no parts)
    du     = dt - ds
    count  = snap + (residue + du * per_user + ds * per_system) // den
"""

from construct import Array, Bytes, Int16ul, Int32sl, Int32ul, Int64ul, PaddedString, Struct

from structs.core import (  # noqa: F401  (the state page's constants, re-exported beside its structs)
    HWPERFD_PIOCSTATEPAGE,
    HWPERFD_STATE_CLOCK_MANUAL,
    HWPERFD_STATE_CLOCK_MONOTONIC,
    HWPERFD_STATE_CLOCK_PROCESS,
    HWPERFD_STATE_CLOCK_THREAD,
    HWPERFD_STATE_DEAD,
    HWPERFD_STATE_FALLBACK,
    HWPERFD_STATE_MAGIC,
    HWPERFD_STATE_OWN,
    HWPERFD_STATE_PATH_MAX,
    HWPERFD_STATE_SIZE,
    HWPERFD_STATE_SLOTS,
    HWPERFD_STATE_VERSION,
)

hwperfd_state_slot_t = Struct(
    "count" / Int64ul,  # events at the snapshot
    "residue" / Int64ul,  # the carried part of an event at the snapshot, over den
    "per_user" / Int64ul,  # events per ns of user time, over den
    "per_system" / Int64ul,  # events per ns of system time, over den
    "den" / Int64ul,  # 0: the slot does not move (its count is the snapshot's)
)

hwperfd_state_t = Struct(
    "hs_magic" / Int32ul,
    "hs_version" / Int16ul,
    "hs_nslots" / Int16ul,
    "hs_seq" / Int32ul,
    "hs_flags" / Int32ul,
    "hs_clock" / Int32ul,
    "hs_generation" / Int32sl,
    "hs_user_ns" / Int64ul,  # the context's CPU times at the snapshot
    "hs_system_ns" / Int64ul,
    "hs_split_user" / Int64ul,  # the user:system parts of CPU time past the snapshot
    "hs_split_system" / Int64ul,
    "hs_system_room" / Int64ul,  # the most system time past the snapshot
    "hs_pid" / Int32sl,  # the process (or thread) counted
    "hs_pad" / Int32ul,
    "hs_split_carry" / Int64ul,  # a part of a ns of system time carried in, over the parts
    "hs_ncpus" / Int32ul,  # per-CPU counters: how many CPUs (0: one context)
    "hs_cpu_slots" / Int32ul,  # slots per CPU
    "hs_expires_ns" / Int64ul,  # CLOCK_MONOTONIC ns from which the snapshot no longer holds (0: never)
    "hs_reserved" / Bytes(32),
    "hs_slots" / Array(HWPERFD_STATE_SLOTS, hwperfd_state_slot_t),
)

hwperfd_statepage_t = Struct(
    "hp_path" / PaddedString(HWPERFD_STATE_PATH_MAX, "ascii"),
)

assert HWPERFD_PIOCSTATEPAGE >> 16 & 0x3FFF == hwperfd_statepage_t.sizeof()
