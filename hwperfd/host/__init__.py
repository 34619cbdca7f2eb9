"""Host process tracking: what hwperfd knows about real Linux processes.

``processes`` reads /proc (identity, CPU time, usage, wait state);
``procevents`` streams fork/exec/exit from the kernel's process-events
connector.  Nothing here knows about counters or FUSE.
"""
