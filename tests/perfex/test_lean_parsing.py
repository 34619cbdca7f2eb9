"""perfex's start-up without ``typing`` and ``re`` (docs/speed.md): the
record classes behave as ``typing.NamedTuple``'s, and the hand parsers read
exactly what the patterns they replace read."""

from __future__ import annotations

import re
import typing

from hypothesis import given, settings
from hypothesis import strategies as st

from hwperfd.perfex.costs import normal_name
from hwperfd.perfex.machine import parse_cpu_line
from hwperfd.perfex.runner import descendants
from hwperfd.records import NamedTuple

CPU_LINE = re.compile(r"^cpu (\S+) x(\d+) @ ([0-9.]+) MHz", re.M)
DESCENDANT = re.compile(r"^descendant (\d+) (\S+)((?: \d+){32})\s*$", re.M)


class Lean(NamedTuple):
    """A record."""

    name: str
    count: int = 0

    @property
    def twice(self) -> int:
        return 2 * self.count

    def label(self) -> str:
        return f"{self.name}={self.count}"


class Typed(typing.NamedTuple):
    """A record."""

    name: str
    count: int = 0


def test_a_record_is_a_named_tuple_as_typing_makes_it():
    lean, typed = Lean("a"), Typed("a")
    assert lean == typed == ("a", 0) and Lean._fields == Typed._fields
    assert Lean._field_defaults == Typed._field_defaults == {"count": 0}
    assert lean._replace(count=3).twice == 6 and Lean("b", 2).label() == "b=2"
    assert repr(Lean("a", 1)) == "Lean(name='a', count=1)" and Lean.__doc__ == "A record."
    assert Lean.__qualname__ == "Lean" and Lean.__module__ == __name__
    try:
        lean.count = 1  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("a record's field was assigned")


def test_a_record_binds_and_refuses_arguments_as_typing_s_does():
    import pickle

    assert Lean(count=2, name="k") == Typed(count=2, name="k") and Lean("k", count=2) == ("k", 2)
    assert Lean._make(["m", 4]) == ("m", 4) and Lean("a", 1)._asdict() == Typed("a", 1)._asdict()
    assert pickle.loads(pickle.dumps(Lean("p", 5))) == Lean("p", 5) and Lean.__match_args__ == ("name", "count")
    for args, kwargs in [((), {}), (("a", 1, 2), {}), (("a",), {"name": "b"}), (("a",), {"other": 1})]:
        for cls in (Lean, Typed):
            try:
                cls(*args, **kwargs)
            except TypeError:
                continue
            raise AssertionError(f"{cls.__name__}{args}{kwargs} was accepted")
    try:
        Lean("a")._replace(nope=1)
    except ValueError:
        pass
    else:
        raise AssertionError("_replace took a field the record has not")


def _regex_cpu_line(text: str) -> tuple[str, int, float] | None:
    match = CPU_LINE.search(text)
    if not match or match.group(1) not in ("r10000", "r12000", "intel", "amd", "ultrasparc"):
        return None
    return match.group(1), int(match.group(2)), float(match.group(3))


words = st.sampled_from(["cpu", "r10000", "r12000", "intel", "x2", "x", "x١", "@", "195", "1.5", "MHz", "MHz,", "",
                         "  ", "\t", "descendant", "thread", "7", "ab", "1" * 3])  # fmt: skip
texts = st.lists(st.lists(words, max_size=8).map(" ".join), max_size=5).map("\n".join)


@settings(max_examples=400, deadline=None)
@given(texts)
def test_the_cpu_line_parses_as_its_pattern(text):
    try:
        expected = _regex_cpu_line(text)
    except ValueError:
        expected = ValueError
    try:
        got = parse_cpu_line(text)
    except ValueError:
        got = ValueError
    assert got == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 99999), st.sampled_from(["sh", "a.out", "x\ty", "", "é"]),
                          st.lists(st.integers(0, 10**12), min_size=31, max_size=33),
                          st.sampled_from(["", " ", "  \t", "x"])), max_size=4))  # fmt: skip
def test_descendant_lines_parse_as_their_pattern(rows):
    text = "\n".join(f"descendant {pid} {comm} " + " ".join(map(str, counts)) + tail for pid, comm, counts, tail in rows)
    expected = [(int(m.group(1)), m.group(2), tuple(int(x) for x in m.group(3).split())) for m in DESCENDANT.finditer(text)]
    assert [(d.pid, d.comm, d.raw) for d in descendants(text)] == expected


@given(st.text(max_size=30))
def test_event_names_normalize_as_their_pattern(name):
    assert normal_name(name) == " ".join(re.sub(r"[^0-9a-z/]+", " ", name.casefold()).split())
