"""Workload profiles: how many of each event a cycle of a process produces.

The emulated CPUs see no instructions, only CPU time.  A profile turns the
cycles a process spent into the other events, deterministically: every rate
is an exact fraction of events per cycle, so a test (or a user modelling a
workload) can predict every count.  Rates are keyed by event *kind* (see
``hwperfd.cpu.events.KINDS``), so one profile serves the R10000 and R12000.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Mapping

from hwperfd.cpu.events import KINDS


def _rates(**rates: str) -> Mapping[str, Fraction]:
    return MappingProxyType({kind: Fraction(value) for kind, value in rates.items()})


# Events per cycle.  "balanced" is integer code with a modest working set;
# the others move the rates a user would expect to move.  Unlisted kinds are 0.
_BALANCED = dict(
    cycles="1",
    issued_instructions="0.9",
    decoded_instructions="0.95",
    graduated_instructions="0.8",
    issued_loads="0.25",
    decoded_loads="0.23",
    graduated_loads="0.22",
    issued_stores="0.1",
    decoded_stores="0.095",
    graduated_stores="0.09",
    issued_store_conditionals="0.001",
    graduated_store_conditionals="0.001",
    failed_store_conditionals="0.0001",
    decoded_branches="0.12",
    resolved_branches="0.11",
    mispredicted_branches="0.006",
    # Of the resolved branches: taken (loop back-edges, calls), conditional;
    # of the mispredicted: taken ones, conditional ones.
    taken_branches="0.07",
    mispredicted_taken_branches="0.002",
    conditional_branches="0.09",
    mispredicted_conditional_branches="0.005",
    graduated_fp_instructions="0.05",
    fu_completion_cycles="0.6",
    icache_misses="0.002",
    scache_icache_misses="0.0002",
    scache_iway_mispredictions="0.0001",
    dcache_misses="0.01",
    scache_dcache_misses="0.001",
    scache_dway_mispredictions="0.0005",
    dcache_writebacks="0.008",
    scache_writebacks="0.002",
    tlb_misses="0.0005",
    external_interventions="0.0001",
    external_invalidations="0.0001",
    external_intervention_hits="0.00005",
    external_invalidation_hits="0.00005",
    store_exclusive_clean="0.0005",
    store_exclusive_shared="0.0001",
    mht_occupancy="0.05",
    mht_memory_cycles="0.03",
    prefetch_instructions="0.002",
    prefetch_dcache_misses="0.0005",
)

PROFILE_RATES: Mapping[str, Mapping[str, Fraction]] = MappingProxyType(
    {
        "balanced": _rates(**_BALANCED),
        # Dense floating point: high IPC, many FP instructions, few misses.
        "compute": _rates(
            **{
                **_BALANCED,
                "graduated_instructions": "1.6",
                "issued_instructions": "1.8",
                "decoded_instructions": "1.9",
                "graduated_fp_instructions": "0.7",
                "dcache_misses": "0.002",
                "scache_dcache_misses": "0.0001",
                "mispredicted_branches": "0.001",
                "mispredicted_taken_branches": "0.0003",
                "mispredicted_conditional_branches": "0.0008",
            }
        ),
        # Streaming over memory: low IPC, misses everywhere, busy MHT.
        "memory": _rates(
            **{
                **_BALANCED,
                "graduated_instructions": "0.25",
                "issued_instructions": "0.3",
                "decoded_instructions": "0.32",
                "graduated_loads": "0.1",
                "graduated_stores": "0.05",
                "dcache_misses": "0.04",
                "scache_dcache_misses": "0.02",
                "dcache_writebacks": "0.03",
                "scache_writebacks": "0.015",
                "tlb_misses": "0.004",
                "mht_occupancy": "0.6",
                "mht_memory_cycles": "0.4",
            }
        ),
        # One event per cycle of every kind: counts equal cycles, for tests.
        "unit": _rates(**{kind: "1" for kind in KINDS}),
    }
)

DEFAULT_PROFILE = "balanced"


MAX_RATE = 64  # events per cycle: far above any real R10000/R12000 event
_PLAIN_NUMBER = re.compile(r"\d{1,12}(\.\d{1,12})?(/\d{1,12})?")


def _bounded_fraction(kind: str, value: Fraction | str | int) -> Fraction:
    """A rate from a user: plain digits only (``1e999999`` would make the
    daemon build a huge integer), between 0 and MAX_RATE."""
    if isinstance(value, str) and not _PLAIN_NUMBER.fullmatch(value):
        raise ValueError(f"{kind}: rate must look like 0.8 or 1/20, got {value[:40]!r}")
    value = Fraction(value)
    if not 0 <= value <= MAX_RATE:
        raise ValueError(f"{kind}: rate must be between 0 and {MAX_RATE}")
    return value


@dataclass(frozen=True)
class WorkloadProfile:
    """Rates of a workload, plus the share of system time spent at exception level.

    ``exl_share`` splits a process's system time into kernel (K) and
    exception-level (EXL) time, the two kernel modes r10k_counters(5) tells
    apart in the control register.
    """

    name: str = DEFAULT_PROFILE
    rates: Mapping[str, Fraction] = field(default_factory=lambda: PROFILE_RATES[DEFAULT_PROFILE])
    exl_share: Fraction = Fraction(1, 10)

    @classmethod
    def named(cls, name: str) -> "WorkloadProfile":
        try:
            return cls(name=name, rates=PROFILE_RATES[name])
        except KeyError:
            raise ValueError(f"unknown profile {name!r}; known: {', '.join(PROFILE_RATES)}") from None

    def with_rates(self, **overrides: Fraction | str | int) -> "WorkloadProfile":
        """A copy with some rates replaced (``exl_share`` may be given too)."""
        rates = dict(self.rates)
        exl_share = self.exl_share
        for kind, value in overrides.items():
            value = _bounded_fraction(kind, value)
            if kind == "exl_share":
                if value > 1:
                    raise ValueError("exl_share must be between 0 and 1")
                exl_share = value
            elif kind in KINDS:
                rates[kind] = value
            else:
                raise ValueError(f"unknown event kind {kind!r}")
        name = self.name if self.name.endswith("*") else self.name + "*"
        return replace(self, name=name, rates=MappingProxyType(rates), exl_share=exl_share)

    def rate(self, kind: str) -> Fraction:
        return self.rates.get(kind, Fraction(0))

    @classmethod
    def parse(cls, text: str) -> "WorkloadProfile":
        """Parse ``NAME [kind=rate ...]`` as written to a process or control file."""
        words = text.split()
        if not words:
            raise ValueError("empty profile")
        base, *overrides = words
        if "=" in base:
            base, overrides = DEFAULT_PROFILE, words
        profile = cls.named(base)
        pairs: dict[str, str] = {}
        for word in overrides:
            kind, sep, value = word.partition("=")
            if not sep:
                raise ValueError(f"expected kind=rate, got {word!r}")
            pairs[kind] = value
        try:
            return profile.with_rates(**pairs) if pairs else profile
        except (ValueError, ZeroDivisionError) as exc:
            raise ValueError(str(exc)) from None

    def describe(self) -> str:
        return self.name
