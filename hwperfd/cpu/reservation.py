"""Who holds the counter hardware system-wide (seed 002, "Hardware reservation").

One reservation per emulated machine, shared by every personality: IRIX
system mode, pctr's programmed counters, and later libcpc's CPU binds and
perfctr's global mode.  ``reserve`` returns None on success, or the service
string of whoever holds the hardware, so each personality can say "busy" in
its own dialect.
"""

from __future__ import annotations

from hwperfd.trace import recorder as trace


class Reservation:
    def __init__(self) -> None:
        self._holder: str | None = None

    @property
    def holder(self) -> str | None:
        return self._holder

    def reserve(self, service: str) -> str | None:
        """perfctr_cpu_reserve.  Reserving again under the holder's own name
        succeeds: a personality may take the hardware for several counters."""
        if not service:
            raise ValueError("a service name is needed")
        holder, granted = self._holder, self._holder is None or self._holder == service
        trace.active.reservation(service, holder, granted)
        if granted:
            self._holder = service
            return None
        return holder

    def release(self, service: str) -> None:
        """perfctr_cpu_release: only the holder releases; others are ignored."""
        if self._holder == service:
            self._holder = None
            trace.active.unreserved(service)
