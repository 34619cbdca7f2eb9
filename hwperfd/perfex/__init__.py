"""perfex(1) and libperfex(3) for hwperfd.

``python3 -m hwperfd.perfex`` (installed as ``perfex``) runs a command and
reports its event counts; ``hwperfd.perfex.libperfex`` is the procedural
interface of libperfex(3) in Python (``lib/libperfex.c`` is the C one).

Modules: ``plan`` (which events, which slots), ``machine`` (what hwperfd
emulates), ``runner`` (fork, count, wait, read, project), ``costs`` (the -y
cost table as data), ``stats`` (derived statistics), ``report`` (text,
JSON, CSV), ``cli`` (the command line).
"""
