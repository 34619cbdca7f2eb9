"""``NamedTuple`` without importing ``typing`` or ``collections``: what
perfex's start-up pays for.

``typing`` (with ``re``, ``enum``, ``functools``, ``contextlib`` under it)
costs perfex more than its own modules, and ``collections.namedtuple``
imports ``collections`` (with ``operator``, ``reprlib``, ``keyword``) and
compiles a ``__new__`` for each class (docs/speed.md, perfex start-up).
A record class written ``class Cost(NamedTuple): ...`` under
``from __future__ import annotations`` needs of it only the class statement:
here that statement makes a named tuple from the class's annotations,
defaults (trailing fields with a value) and its other members (methods,
properties, the docstring), as ``typing.NamedTuple`` does - the same
``_fields``, ``_field_defaults``, ``_make``, ``_replace``, ``_asdict``,
repr, pickling and read-only fields - with one shared ``__new__`` that binds
its arguments instead of one compiled per class.  Type checkers see
``typing.NamedTuple`` itself::

    TYPE_CHECKING = False
    if TYPE_CHECKING:
        from typing import NamedTuple
    else:
        from hwperfd.records import NamedTuple
"""

from __future__ import annotations

from _collections import _tuplegetter  # type: ignore[import-not-found]  # the C module: collections.namedtuple's fields

_NOT_MEMBERS = {"__annotations__", "__module__", "__qualname__", "__orig_bases__", "__dict__", "__weakref__"}


class _Record(tuple):
    """The methods every record shares (collections.namedtuple's, by name)."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _field_defaults: dict[str, object] = {}

    def __new__(cls, *args, **kwargs):
        if not kwargs and len(args) == len(cls._fields):
            return tuple.__new__(cls, args)
        return tuple.__new__(cls, cls._bind(args, kwargs))

    @classmethod
    def _bind(cls, args: tuple, kwargs: dict[str, object]) -> list[object]:
        fields, name = cls._fields, cls.__name__
        if len(args) > len(fields):
            raise TypeError(f"{name}() takes {len(fields)} positional arguments but {len(args)} were given")
        values = list(args)
        for field in fields[len(args) :]:
            if field in kwargs:
                values.append(kwargs.pop(field))
            elif field in cls._field_defaults:
                values.append(cls._field_defaults[field])
            else:
                raise TypeError(f"{name}() missing required argument: {field!r}")
        for key in kwargs:
            why = "got multiple values for argument" if key in fields else "got an unexpected keyword argument"
            raise TypeError(f"{name}() {why} {key!r}")
        return values

    @classmethod
    def _make(cls, iterable):
        result = tuple.__new__(cls, iterable)
        if len(result) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
        return result

    def _replace(self, /, **kwds):
        result = self._make(map(kwds.pop, self._fields, self))
        if kwds:
            raise ValueError(f"Got unexpected field names: {list(kwds)!r}")
        return result

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in zip(self._fields, self))})"

    def _asdict(self) -> dict[str, object]:
        return dict(zip(self._fields, self))

    def __getnewargs__(self) -> tuple:
        return tuple(self)


class _RecordMeta(type):
    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, object]):
        if not bases:  # NamedTuple itself
            return super().__new__(mcls, name, bases, namespace)
        annotations: dict[str, object] = namespace.get("__annotations__", {})  # type: ignore[assignment]
        fields = tuple(annotations)
        members = {key: value for key, value in namespace.items() if key not in fields and key not in _NOT_MEMBERS}
        members.update(
            __slots__=(),
            __module__=str(namespace.get("__module__")),
            __qualname__=str(namespace.get("__qualname__", name)),
            __match_args__=fields,
            _fields=fields,
            _field_defaults={field: namespace[field] for field in fields if field in namespace},
        )
        members.setdefault("__doc__", f"{name}({', '.join(fields)})")
        for index, field in enumerate(fields):
            members[field] = _tuplegetter(index, f"Alias for field number {index}")
        return type(name, (_Record,), members)


class NamedTuple(metaclass=_RecordMeta):
    """Base of a record class: the class statement makes a named tuple."""
