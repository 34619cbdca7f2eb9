"""Linux perfctr 2.6 (vperfctr, rvperfctr, gperfctr) on the emulated PMU (docs/perfctr.md)."""
