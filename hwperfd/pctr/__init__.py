"""OpenBSD's pctr(4) and pctr(1) on the emulated PMU (docs/pctr.md)."""
