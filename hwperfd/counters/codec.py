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
import itertools
import marshal
import operator
import types
import typing
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


# -- packed forms: what the journal holds -------------------------------------
#
# A record goes into the store's journal before its call answers, so its form
# is made on that path; its JSON form (``encode``) waits for the flush, once a
# record however many calls changed it.  A packed form is what marshal takes,
# made with as little Python as can be.  Each dataclass and named tuple packs
# by a layout built once per class from its fields' declared types: a field of
# ints, strings and tuples, lists and frozensets of them goes as it is (marshal
# copies it and reads it back as it was); an enum as its value, a fraction as
# its two ints, a list of counter-layer values run by run; anything else by
# its own type.  A class's form names its fields, so a successor with other
# fields reads it as ``decode`` reads a record of another version.  Other
# values are a tuple whose first item says what they are.  ``unpack`` builds
# the values again (only of the registered classes), and
# ``encode(unpack(pack(v))) == encode(v)``.  Should a value not be of its
# declared type, marshal refuses what it cannot take, and the store packs
# the record again by each value's own type (``pack(v, exact=True)``).

# _OWN: a class's values by their own types; _MARSHALLED: a packed form as marshal's bytes
_TUPLE, _SET, _FRACTION, _ENUM, _LAYOUT, _OWN, _MARSHALLED = range(7)
_PACKERS: dict[type, Callable[[Any], Any]] = {}
_EXACT: dict[type, Callable[[Any], Any]] = {}
_packed: dict[int, tuple[Any, Any]] = {}  # packed forms of immutable values, by identity (as ``_shared``)
# Immutable through and through (a request): packed once into marshal's bytes,
# which marshal then copies whole each time (a request's 64 ints are most of a block).
_SEALED: set[type] = set()


def pack(value: Any, *, exact: bool = False) -> Any:
    """``value``'s packed form (a snapshot once marshalled: lists may be the
    value's own).  ``exact``: by each value's type, not its field's declared one."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if exact:
        return _pack_exact(value)
    if kind is list:
        return _pack_list(value)
    known = _packed.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    packer = _PACKERS.get(kind)
    if packer is None:
        packer = _PACKERS[kind] = _packer_for(kind, exact=False)
    form = packer(value)
    if kind in _SHAREABLE:
        if kind in _SEALED:
            form = (_MARSHALLED, marshal.dumps(form, 4))
        if len(_packed) >= _SHARED_KEPT:
            _packed.clear()
        _packed[id(value)] = (value, form)
    return form


def _pack_exact(value: Any) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is list:
        return [_pack_exact(v) for v in value]
    packer = _EXACT.get(kind)
    if packer is None:
        packer = _EXACT[kind] = _packer_for(kind, exact=True)
    return packer(value)


def _pack_list(value: list[Any]) -> Any:
    if not value or _PLAIN.issuperset(map(type, value)):
        return value
    return [pack(v) for v in value]


def _packer_for(kind: type, *, exact: bool) -> Callable[[Any], Any]:
    name = kind.__qualname__
    plain = _PLAIN
    each = _pack_exact if exact else pack
    if issubclass(kind, bool):
        return bool
    if issubclass(kind, int):
        return int  # as ``encode``: an int subclass reads back as an int
    if issubclass(kind, str):
        return str
    if issubclass(kind, float):
        raise CodecError("no floats in set-up")
    if issubclass(kind, Fraction):
        return lambda v: (_FRACTION, v.numerator, v.denominator)
    if issubclass(kind, enum.Enum):
        return lambda v: (_ENUM, name, each(v.value))
    if dataclasses.is_dataclass(kind) or (issubclass(kind, tuple) and hasattr(kind, "_fields")):
        layout = _layout(kind)
        if issubclass(kind, tuple) or kind.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            _SHAREABLE.add(kind)
            if layout.sealed and not issubclass(kind, tuple):
                _SEALED.add(kind)
        return layout.exact if exact else layout.pack
    if issubclass(kind, tuple):
        _SHAREABLE.add(kind)
        return lambda v: (_TUPLE, v if plain.issuperset(map(type, v)) else tuple([each(x) for x in v]))
    if issubclass(kind, list):
        return lambda v: [each(x) for x in v]
    if issubclass(kind, (set, frozenset)):
        return lambda v: (_SET, tuple([each(x) for x in v]))
    if issubclass(kind, Mapping):
        return lambda v: {k if type(k) in plain else str(k): each(x) for k, x in v.items()}
    raise CodecError(f"cannot store a {kind.__name__}")


class _Layout:
    """How one class's values pack: ``pack`` by its fields' declared types
    (compiled once), ``exact`` by each value's own, ``fields`` each field's
    reader of either form."""

    def __init__(self, kind: type) -> None:
        _BUILDING.add(kind)
        try:
            self._build(kind)
        finally:
            _BUILDING.discard(kind)

    def _build(self, kind: type) -> None:
        if dataclasses.is_dataclass(kind):
            names = tuple(f.name for f in dataclasses.fields(kind))
        else:
            names = tuple(kind._fields)  # type: ignore[attr-defined]
        try:
            hints = typing.get_type_hints(kind)
        except (NameError, TypeError):
            hints = {}
        exprs: list[str] = []
        self.fields: dict[str, Callable[[Any], Any]] = {}
        self.sealed = True  # every field immutable (no list, mapping or class of its own)
        # The names as one string: marshal writes it as one object, not one each.
        scope: dict[str, Any] = {"pack": pack, "_runs": _runs, "plain": _PLAIN, "NAMES": ",".join(names),
                                 "NAME": kind.__qualname__}
        for i, name in enumerate(names):
            how, optional, inner = _field_kind(hints.get(name))
            self.sealed &= how in ("fraction", "enum") or (how == "as-is" and typing.get_origin(inner) is not list)
            x = f"v.{name}" if name.isidentifier() and not name.startswith("__") else f"_get{i}(v)"
            scope[f"_get{i}"] = operator.attrgetter(name)
            if how == "as-is":
                exprs.append(x)
                self.fields[name] = _same
            elif how == "fraction":
                exprs.append(f"(None if (_x := {x}) is None else (_x.numerator, _x.denominator))" if optional
                             else f"((_x := {x}).numerator, _x.denominator)")  # fmt: skip
                self.fields[name] = _fraction
            elif how == "enum":
                exprs.append(f"(None if (_x := {x}) is None else _x.value)" if optional else f"{x}.value")
                self.fields[name] = _enum_reader(inner)
            elif how == "runs":
                exprs.append(f"_runs({x})")
                self.fields[name] = _unruns
            elif how in ("class", "classes") and inner not in _BUILDING:
                # One of ours, mutable: its own layout's packer at once (pack() when it is another type).
                scope[f"C{i}"], scope[f"P{i}"] = inner, _layout(inner).pack
                exprs.append(f"(P{i}(_x) if type(_x := {x}) is C{i} else None if _x is None else pack(_x))"
                             if how == "class" else
                             f"([P{i}(e) if type(e) is C{i} else pack(e) for e in _x] if type(_x := {x}) is list"
                             " else pack(_x))")  # fmt: skip
                self.fields[name] = unpack
            else:
                exprs.append(f"(_x if type(_x := {x}) in plain else pack(_x))")
                self.fields[name] = unpack
        body = ", ".join(exprs) + ("," if len(exprs) == 1 else "")
        code = f"def packer(v):\n    return ({_LAYOUT}, NAME, NAMES, ({body}))\n"
        exec(compile(code, f"<layout of {kind.__qualname__}>", "exec"), scope)  # noqa: S102 - our own field names
        self.pack: Callable[[Any], Any] = scope["packer"]
        getter = operator.attrgetter(*names) if len(names) > 1 else lambda v: (getattr(v, names[0]),)
        # The exact form: each value tagged by its own type, read back by ``unpack`` whatever the field's type.
        self.exact: Callable[[Any], Any] = lambda v: (
            _OWN, kind.__qualname__, ",".join(names), tuple([_pack_exact(x) for x in getter(v)])
        )


def _same(form: Any) -> Any:
    return form


def _enum_reader(cls: type[enum.Enum]) -> Callable[[Any], Any]:
    return lambda form: None if form is None else cls(form)


def _field_kind(hint: Any) -> tuple[str, bool, Any]:
    """How a field of type ``hint`` packs: ("as-is" | "fraction" | "enum" |
    "runs" | "own", whether it may be None, the type within)."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            return "own", False, None
        hint, optional = args[0], True
    if _as_is(hint):
        return "as-is", optional, hint
    if hint is Fraction:
        return "fraction", optional, hint
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "enum", optional, hint
    if _mutable_class(hint):
        return "class", optional, hint
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint) or (None,)
        if isinstance(item, type) and issubclass(item, tuple) and hasattr(item, "_fields") and not optional:
            return "runs", False, item  # immutable values, mostly one repeated (a block's untouched slots)
        if _mutable_class(item):
            return "classes", optional, item
    return "own", optional, hint


def _mutable_class(hint: Any) -> bool:
    """A dataclass of ours whose values change in place (packed anew each time, by its layout)."""
    return (
        isinstance(hint, type) and dataclasses.is_dataclass(hint) and _CLASSES.get(hint.__qualname__) is hint
        and not hint.__dataclass_params__.frozen  # type: ignore[attr-defined]
    )  # fmt: skip


def _as_is(hint: Any) -> bool:
    """Whether values of type ``hint`` come back from marshal as they went."""
    if hint in (int, bool, str, type(None)):
        return True
    origin = typing.get_origin(hint)
    if origin in (tuple, list, frozenset):
        return all(arg is Ellipsis or _as_is(arg) for arg in typing.get_args(hint))
    return False


def _runs(value: list[Any]) -> Any:
    """A list of immutable values as (count, form) runs of equal ones."""
    if type(value) is not list:
        raise ValueError("not a list")  # marshal would take a tuple: the exact form tags it
    return [(len(list(group)), pack(item)) for item, group in itertools.groupby(value)]


def _unruns(form: Any) -> list[Any]:
    if form is None or type(form) is not list:
        raise CodecError("malformed runs")
    out: list[Any] = []
    for run in form:
        if type(run) is not tuple or len(run) != 2 or type(run[0]) is not int or not 0 < run[0] <= _MAX_RUN:
            raise CodecError("malformed run")
        out += [unpack(run[1])] * run[0]
        if len(out) > _MAX_RUN:
            raise CodecError("malformed runs")
    return out


def _fraction(form: Any) -> Fraction | None:
    if form is None:
        return None
    if type(form) is not tuple:
        raise CodecError("malformed fraction")
    return Fraction(*_ints(list(form), 2))


_LAYOUTS: dict[type, _Layout] = {}
_BUILDING: set[type] = set()  # layouts being built: a class within itself packs by pack()


def _layout(kind: type) -> _Layout:
    layout = _LAYOUTS.get(kind)
    if layout is None:
        layout = _LAYOUTS[kind] = _Layout(kind)
    return layout


def unpack(form: Any) -> Any:
    """The value of a packed form; CodecError for anything that is not one."""
    kind = type(form)
    if kind in _PLAIN:
        return form
    if kind is list:
        return form if _PLAIN.issuperset(map(type, form)) else [unpack(v) for v in form]
    if kind is dict:
        return {k: unpack(v) for k, v in form.items()}
    if kind is not tuple or len(form) < 2:
        raise CodecError(f"not a packed form: {form!r:.60}")
    tag = form[0]
    if tag == _MARSHALLED and len(form) == 2 and type(form[1]) is bytes:
        try:
            inner = marshal.loads(form[1])
        except (ValueError, EOFError, TypeError) as exc:
            raise CodecError(f"malformed bytes: {exc}") from None
        if type(inner) is tuple and inner and inner[0] == _MARSHALLED:
            raise CodecError("nested bytes")
        return unpack(inner)
    if tag == _TUPLE and len(form) == 2 and type(form[1]) is tuple:
        return tuple(unpack(v) for v in form[1])
    if tag == _SET and len(form) == 2 and type(form[1]) is tuple:
        return frozenset(unpack(v) for v in form[1])
    if tag == _FRACTION and len(form) == 3:
        return Fraction(*_ints(list(form[1:]), 2))
    cls = _CLASSES.get(form[1]) if type(form[1]) is str else None
    if cls is None:
        raise CodecError(f"unknown class {form[1]!r:.60}")
    if tag == _ENUM and len(form) == 3 and issubclass(cls, enum.Enum):
        return cls(unpack(form[2]))
    if tag in (_LAYOUT, _OWN) and len(form) == 4 and (dataclasses.is_dataclass(cls) or issubclass(cls, tuple)):
        names, values = form[2], form[3]
        if type(names) is not str or type(values) is not tuple or len(names := names.split(",")) != len(values):
            raise CodecError(f"malformed {cls.__qualname__}")
        if tag == _OWN:
            items = {k: unpack(v) for k, v in zip(names, values)}
        else:
            fields = _layout(cls).fields
            items = {k: fields[k](v) for k, v in zip(names, values) if k in fields}
        if dataclasses.is_dataclass(cls):
            return _dataclass(cls, items)
        return cls(**{k: v for k, v in items.items() if k in cls._fields})  # type: ignore[attr-defined]
    raise CodecError(f"bad tag {tag!r:.10} for {form[1]}")


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
