"""``NamedTuple`` without importing ``typing``: what perfex's start-up pays for.

``typing`` (with ``re``, ``enum``, ``functools``, ``contextlib`` under it)
costs perfex more than its own modules (docs/speed.md, perfex start-up).
A record class written ``class Cost(NamedTuple): ...`` under
``from __future__ import annotations`` needs of it only the class statement:
here that statement makes a ``collections.namedtuple`` from the class's
annotations, defaults (trailing fields with a value) and its other members
(methods, properties, the docstring), as ``typing.NamedTuple`` does.  Type
checkers see ``typing.NamedTuple`` itself::

    TYPE_CHECKING = False
    if TYPE_CHECKING:
        from typing import NamedTuple
    else:
        from hwperfd.records import NamedTuple
"""

from __future__ import annotations

import collections

_NOT_MEMBERS = {"__annotations__", "__module__", "__qualname__", "__orig_bases__", "__dict__", "__weakref__"}


class _RecordMeta(type):
    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, object]):
        if not bases:  # NamedTuple itself
            return super().__new__(mcls, name, bases, namespace)
        fields = list(namespace.get("__annotations__", {}))  # type: ignore[call-overload]
        defaults = [namespace[field] for field in fields if field in namespace]
        record = collections.namedtuple(name, fields, defaults=defaults, module=str(namespace.get("__module__")))  # type: ignore[misc]
        for key, value in namespace.items():
            if key not in fields and key not in _NOT_MEMBERS:
                setattr(record, key, value)
        record.__qualname__ = str(namespace.get("__qualname__", name))
        return record


class NamedTuple(metaclass=_RecordMeta):
    """Base of a record class: the class statement makes a named tuple."""
