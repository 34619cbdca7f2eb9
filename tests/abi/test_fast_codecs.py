"""structs.fast (the construct-free codecs perfex and the client use) against
the construct definitions, which stay the declaration of the ABI.

Each construct definition is walked into a flat list of (dotted name, struct
format) fields; the fast codec must list exactly those.  Then values packed
by one side decode to the same values on the other, field by field.
"""

from __future__ import annotations

import random
import subprocess
import sys

import construct
import pytest

import structs
from structs import core
from tests.conftest import ROOT


def flatten(con, prefix: str = "") -> list[tuple[str, str]]:
    """(name, struct format) per field of a construct definition, in order."""
    if isinstance(con, construct.Struct):
        out: list[tuple[str, str]] = []
        for sub in con.subcons:
            if isinstance(sub, construct.Renamed):
                out += flatten(sub.subcon, f"{prefix}{sub.name}.")
            elif isinstance(sub, construct.Padded) and sub.subcon is construct.Pass:
                out.append(("", f"{sub.length}x"))
            else:
                raise AssertionError(f"unexpected field {sub!r} in {prefix}")
        return out
    name = prefix[:-1]
    if isinstance(con, construct.Array):
        ((_, fmt),) = flatten(con.subcon, prefix)  # arrays of scalars only
        return [(name, f"{con.count}{fmt}")]
    if isinstance(con, construct.FormatField):
        return [(name, con.fmtstr.lstrip("<"))]
    if isinstance(con, construct.Adapter):  # hwperf_ctrl_t: a 16-bit word seen through bit-fields
        return flatten(con.subcon, prefix)
    raise AssertionError(f"no struct format for {con!r} at {name}")


def plain(value):
    """A construct-parsed value as the fast codec gives it (control words as spec words)."""
    if isinstance(value, construct.Container):
        if set(value) - {"_io"} == {"hwp_ev", "hwp_ie", "hwp_mode"}:
            return structs.spec_word(value.hwp_ev, value.hwp_mode, value.hwp_ie)
        return {k: plain(v) for k, v in value.items() if k != "_io"}
    if isinstance(value, list):
        return tuple(plain(v) for v in value)
    return value


def dotted(value, prefix: str = "") -> dict:
    out = {}
    for key, item in value.items():
        if isinstance(item, dict):
            out.update(dotted(item, f"{prefix}{key}."))
        else:
            out[prefix + key] = item
    return out


def random_value(fmt: str, rnd: random.Random, *, control: bool = False):
    count = int(fmt[:-1]) if fmt[:-1] else 0
    code = fmt[-1]
    if code == "H" and control:
        one = lambda: structs.spec_word(rnd.randrange(1 << 11), rnd.randrange(16), rnd.random() < 0.5)  # noqa: E731
    else:
        bits = {"H": 16, "l": 32, "Q": 64, "q": 64}[code]
        signed = code in "lq"
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        one = lambda: rnd.choice((lo, hi, 0, rnd.randint(lo, hi)))  # noqa: E731
    return tuple(one() for _ in range(count)) if count else one()


LAYOUT_NAMES = sorted(core.LAYOUTS)


def test_every_codec_mirrors_a_construct_definition():
    assert {"hwperf_cntr_t", "hwperf_eventctrl_t", "hwperf_profevctrarg_t", "hwperf_prusage_t"} <= set(LAYOUT_NAMES)


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_fields_names_formats_and_size_agree_with_construct(name):
    layout = core.LAYOUTS[name]
    definition = getattr(structs, name)
    assert list(layout.fields) == flatten(definition)
    assert layout.size == definition.sizeof()


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_values_round_trip_between_construct_and_the_fast_codec(name):
    layout, definition = core.LAYOUTS[name], getattr(structs, name)
    rnd = random.Random(name)
    controls = {field for field, _ in flatten(definition) if field.endswith(("evctrl", "cm_evctrl"))}
    for _ in range(20):
        values = {
            field: random_value(fmt, rnd, control=field in controls)
            for field, fmt in layout.fields if field
        }  # fmt: skip
        data = layout.pack(**{k.replace(".", "__"): v for k, v in values.items()})
        assert dotted(plain(definition.parse(data))) == values
        assert layout.unpack(definition.build(definition.parse(data))) == values


def test_pack_refuses_unknown_fields_and_too_many_values():
    with pytest.raises(ValueError, match="no field"):
        structs.fast.hwperf_cntr_t.pack(hwp_evctl=(1,))
    with pytest.raises(ValueError, match="holds 32"):
        structs.fast.hwperf_cntr_t.pack(hwp_evctr=(0,) * 33)


def test_ioctl_numbers_follow_the_construct_sizes():
    assert structs.PIOCGETPREVCTRS == structs._IOR("q", 236, structs.hwperf_prusage_t.sizeof())
    assert structs.PIOCENEVCTRS == structs._IOW("q", 233, structs.hwperf_profevctrarg_t.sizeof())
    assert structs.HWIOC_GET_CPUCNTRS == structs._IOWR("h", 4, structs.hwperf_cpucntrs_arg_t.sizeof())
    assert structs.HWPERFD_PIOCENEVCTRSEX == structs._IOW("q", 240, structs.hwperfd_enevctrsex_t.sizeof())


def test_importing_structs_and_the_client_does_not_load_construct():
    code = (
        "import sys, structs, hwperfd.client, hwperfd.perfex.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'construct'))\n"
        "structs.hwperf_cntr_t\n"
        "print('construct' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out == "[]\nTrue\n"
