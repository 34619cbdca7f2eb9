"""ecadmin(1), ecstats(1) and ecfind(1): IRIX's global event counter tools.

The global counters are hwperfd's system mode, driven through the syssgi
ioctls of ``<mount>/control``.  ``ecadmin`` enables and releases them,
``ecstats`` samples them, ``ecfind`` names the processes whose /proc
counters would stand in the way.  Details and decisions: ``README.md`` here.

Modules: ``common`` (options, events, slots, reading system mode),
``procs`` (the scan of the mount that ecfind and ecadmin share), and one
module per command, each with ``main``.
"""
