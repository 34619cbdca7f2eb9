"""A timeline of every counter's life (docs/trace.md).

``recorder`` is what the daemon's layers call: its ``active`` recorder is a
``NullRecorder`` whose hooks do nothing until recording starts (``hwperfd
--trace FILE``, or ``trace start`` on the control node).  ``export`` writes
what was recorded in the Chrome JSON trace format the Perfetto UI opens;
``summary`` reads such a file back (``hwperfd-trace summary``).

The package imports nothing of the daemon: every layer may call it, and it
learns what it records from the objects it is handed (duck-typed).
"""
