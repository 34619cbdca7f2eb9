"""JSON forms of the counter layer's records, for the set-up store.

Tagged, so a record reads back as the same objects: dataclasses by their
fields (a field added later takes its default when an older record lacks
it, and a field since removed is ignored: an upgrade keeps what was set up),
named tuples, enums, fractions, tuples and frozensets; a list of one
value repeated is stored once with its count.  Only the classes
registered here decode; anything else is refused as corrupt.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import operator
from fractions import Fraction
from typing import Any, Callable, Mapping

_CLASSES: dict[str, type] = {}
_MAKERS: dict[type, Callable[..., Any]] = {}


class CodecError(ValueError):
    """A stored form that is not one of ours."""


def register(*classes: type, maker: Callable[..., Any] | None = None) -> None:
    """Let ``classes`` decode; ``maker(**fields)`` builds one, instead of
    filling its fields in place (which skips ``__post_init__``)."""
    for cls in classes:
        _CLASSES[cls.__qualname__] = cls
        if maker is not None:
            _MAKERS[cls] = maker


_SHARED_KEPT = 4096
_MAX_RUN = 1 << 16
_RUN = 4  # a list of this many equal items or more is stored as one item and a count
# Forms of immutable values by identity (requests and register states are
# shared by many records): (the value, kept alive so its id stays its own; its form).
_shared: dict[int, tuple[Any, Any]] = {}


_PLAIN = frozenset({int, str, bool, type(None)})  # their own forms
_INTS = {int}


def encode(value: Any) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is list:
        if not value or set(map(type, value)) == _INTS:
            return value  # counts: the most of a record
        return _encode_list(value)
    known = _shared.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    encoder = _ENCODERS.get(kind)
    if encoder is None:
        encoder = _ENCODERS[kind] = _encoder_for(kind)
    form = encoder(value)
    if kind in _SHAREABLE:
        if len(_shared) >= _SHARED_KEPT:
            _shared.clear()
        _shared[id(value)] = (value, form)
    return form


# How each type encodes, found once per type (a record is written on every
# change of set-up, before the call answers: its encoding is on that path).
_ENCODERS: dict[type, Callable[[Any], Any]] = {}
_SHAREABLE: set[type] = set()  # immutable: forms kept by identity


def _encode_list(value: list[Any]) -> Any:
    first = value[0]
    if len(value) >= _RUN and all(v is first for v in value):
        return {"R": [len(value), encode(first)]}  # one object throughout (a block's untouched slots)
    forms = [encode(v) for v in value]
    if len(forms) >= _RUN and all(f is forms[0] or f == forms[0] for f in forms):
        return {"R": [len(forms), forms[0]]}  # a run of one value (a block's 32 untouched slots)
    return forms


def _encoder_for(kind: type) -> Callable[[Any], Any]:
    name = kind.__qualname__
    if issubclass(kind, (bool, int, str)):
        return lambda v: v
    if issubclass(kind, float):
        raise CodecError("no floats in set-up")
    if issubclass(kind, Fraction):
        return lambda v: {"F": [v.numerator, v.denominator]}
    if issubclass(kind, enum.Enum):
        return lambda v: {"E": [name, v.value]}
    if dataclasses.is_dataclass(kind):
        if kind.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            _SHAREABLE.add(kind)
        names = tuple(f.name for f in dataclasses.fields(kind))
        fields = operator.attrgetter(*names) if len(names) > 1 else lambda v: (getattr(v, names[0]),)
        plain = _PLAIN
        return lambda v: {
            "D": [name, dict(zip(names, [x if type(x) in plain else encode(x) for x in fields(v)]))]
        }
    if issubclass(kind, tuple):
        _SHAREABLE.add(kind)
        if hasattr(kind, "_fields"):
            return lambda v: {"N": [name, [encode(x) for x in v]]}
        return lambda v: {"T": list(v) if set(map(type, v)) <= _INTS else [encode(x) for x in v]}
    if issubclass(kind, list):
        return _encode_list
    if issubclass(kind, (set, frozenset)):
        return lambda v: {"S": [encode(x) for x in sorted(v)]}
    if issubclass(kind, Mapping):
        return lambda v: {"M": {str(k): encode(x) for k, x in v.items()}}
    raise CodecError(f"cannot store a {kind.__name__}")


def decode(form: Any) -> Any:
    kind = type(form)
    if form is None or kind is int or kind is str or kind is bool:
        return form
    if kind is list:
        if all(type(v) is int for v in form):
            return form
        return [decode(v) for v in form]
    if kind is dict and len(form) == 1 and "T" in form and all(type(v) is int for v in form["T"]):
        return tuple(form["T"])
    if not isinstance(form, dict) or len(form) != 1:
        raise CodecError(f"not a stored form: {form!r:.60}")
    ((tag, body),) = form.items()
    if tag == "N":
        key = _flat(body)
        if key is not None:
            found = _named.get(key)
            if found is None:
                if len(_named) >= _SHARED_KEPT:
                    _named.clear()
                found = _named[key] = _decode_tagged(tag, body)
            return found
    return _decode_tagged(tag, body)


# Named tuples decoded, by their flattened form: a register state recurs in
# many records (most are the one of a slot without a threshold).
_named: dict[tuple[Any, ...], Any] = {}


def _flat(body: Any) -> tuple[Any, ...] | None:
    """(name, items) of a named tuple of ints and fractions, hashable; None for others."""
    if type(body) is not list or len(body) != 2 or type(body[1]) is not list:
        return None
    items: list[Any] = [body[0]]
    for v in body[1]:
        if type(v) is int:
            items.append(v)
        elif type(v) is dict and len(v) == 1 and type(v.get("F")) is list:
            items.append(("F", *v["F"]))
        else:
            return None
    try:
        hash(items[0])
    except TypeError:
        return None
    return tuple(items)


def _decode_tagged(tag: str, body: Any) -> Any:
    if tag == "F":
        return Fraction(*_ints(body, 2))
    if tag == "T":
        return tuple(decode(v) for v in _list(body))
    if tag == "S":
        return frozenset(decode(v) for v in _list(body))
    if tag == "R":
        count, form = _list(body, 2)
        if type(count) is not int or not 0 < count <= _MAX_RUN:
            raise CodecError("malformed run")
        item = decode(form)
        if isinstance(item, (list, dict, set)) or (
            dataclasses.is_dataclass(item) and not item.__dataclass_params__.frozen  # type: ignore[union-attr]
        ):
            return [decode(copy.deepcopy(form)) for _ in range(count)]  # mutable: one each
        return [item] * count
    if tag == "M":
        if not isinstance(body, dict):
            raise CodecError("a mapping is an object")
        return {k: decode(v) for k, v in body.items()}
    name, data = _list(body, 2)
    cls = _CLASSES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise CodecError(f"unknown class {name!r:.60}")
    if tag == "E" and issubclass(cls, enum.Enum):
        return cls(data)
    if tag == "N" and issubclass(cls, tuple):
        return cls(*(decode(v) for v in _list(data)))
    if tag == "D" and dataclasses.is_dataclass(cls):
        if not isinstance(data, dict):
            raise CodecError("a dataclass's fields are an object")
        return _dataclass(cls, {k: decode(v) for k, v in data.items()})
    raise CodecError(f"bad tag {tag!r:.10} for {name}")


def _dataclass(cls: type, values: dict[str, Any]) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    maker = _MAKERS.get(cls)
    if maker is not None or cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        return (maker or cls)(**{k: v for k, v in values.items() if k in fields and fields[k].init})
    obj: Any = object.__new__(cls)
    for name, f in fields.items():
        if name in values:
            value = values[name]
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            raise CodecError(f"{cls.__qualname__} lacks {name}")
        setattr(obj, name, value)
    return obj


def _list(body: Any, length: int | None = None) -> list[Any]:
    if not isinstance(body, list) or (length is not None and len(body) != length):
        raise CodecError("malformed list")
    return body


def _ints(body: Any, length: int) -> list[int]:
    items = _list(body, length)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise CodecError("malformed integers")
    return items
