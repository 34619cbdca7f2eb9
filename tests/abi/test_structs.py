"""The construct definitions: sizes, round trips, the hwperf_spec encoding."""

import os
import random
import struct

import pytest
from construct import Container, ListContainer

from structs import hwperftypes as T
from structs import procfs as P

SIZES = {
    "hwperf_ctrl_t": (T.hwperf_ctrl_t, 2),
    "hwperf_eventctrl_t": (T.hwperf_eventctrl_t, 64),
    "hwperf_profevctrarg_t": (T.hwperf_profevctrarg_t, 196),
    "hwperf_cntr_t": (T.hwperf_cntr_t, 256),
    "hwperf_profevctraux_t": (T.hwperf_profevctraux_t, 264),
    "hwperf_eventctrlaux_t": (T.hwperf_eventctrlaux_t, 132),
    "timespec_t": (T.timespec_t, 16),
    "cpu_mon_t": (T.cpu_mon_t, 728),
    "hwperf_prusage_t": (T.hwperf_prusage_t, 1104),
    "hwperf_cpucntrs_arg_t": (P.hwperf_cpucntrs_arg_t, 264),
}


def plain(obj):
    """A parsed value as plain dicts/lists, construct's private keys dropped."""
    if isinstance(obj, (Container, dict)):
        return {k: plain(v) for k, v in obj.items() if not k.startswith("_")}
    if isinstance(obj, (ListContainer, list)):
        return [plain(v) for v in obj]
    return obj


def test_hwperf_ctrl_t_size():
    assert T.hwperf_ctrl_t.sizeof() == 2


def test_hwperf_eventctrl_t_size():
    assert T.hwperf_eventctrl_t.sizeof() == 64


def test_hwperf_profevctrarg_t_size():
    assert T.hwperf_profevctrarg_t.sizeof() == 196


def test_hwperf_cntr_t_size():
    assert T.hwperf_cntr_t.sizeof() == 256


def test_hwperf_profevctraux_t_size():
    assert T.hwperf_profevctraux_t.sizeof() == 264


def test_hwperf_eventctrlaux_t_size():
    assert T.hwperf_eventctrlaux_t.sizeof() == 132


def test_timespec_t_size():
    assert T.timespec_t.sizeof() == 16


def test_cpu_mon_t_size():
    assert T.cpu_mon_t.sizeof() == 728


def test_hwperf_prusage_t_size():
    assert T.hwperf_prusage_t.sizeof() == 1104


def test_hwperf_cpucntrs_arg_t_size():
    assert P.hwperf_cpucntrs_arg_t.sizeof() == 264


@pytest.mark.parametrize("name", sorted(SIZES))
def test_round_trip_random(name):
    """parse(build(x)) == x and build(parse(b)) == b for arbitrary contents."""
    con, size = SIZES[name]
    rng = random.Random(name)
    for _ in range(5):
        raw = bytes(rng.randrange(256) for _ in range(size))
        value = con.parse(raw)
        data = con.build(value)  # explicit padding comes back as zeros
        assert len(data) == size
        again = con.parse(data)
        assert plain(again) == plain(value)
        assert con.build(again) == data


def test_round_trip_profevctrarg_values():
    specs = [dict(hwp_ev=0, hwp_ie=False, hwp_mode=0) for _ in range(32)]
    specs[9] = dict(hwp_ev=9, hwp_ie=True, hwp_mode=T.HWPERF_CNTEN_U)
    specs[25] = dict(hwp_ev=9, hwp_ie=True, hwp_mode=T.HWPERF_CNTEN_U)
    freq = [0] * 32
    freq[9] = 1000
    value = dict(hwp_evctrargs=dict(hwp_evctrl=specs), hwp_ovflw_freq=freq, hwp_ovflw_sig=16)
    data = T.hwperf_profevctrarg_t.build(value)
    spec9 = (9 << 5) | 0x10 | 0x8
    assert data[18:20] == struct.pack("<H", spec9)
    assert data[50:52] == struct.pack("<H", spec9)
    assert struct.unpack_from("<i", data, 64 + 9 * 4)[0] == 1000
    assert struct.unpack_from("<i", data, 192)[0] == 16
    assert plain(T.hwperf_profevctrarg_t.parse(data)) == value


def test_round_trip_prusage_values():
    raw = bytearray(os.urandom(T.hwperf_prusage_t.sizeof()))
    raw[1104 - 728 + 0: 1104 - 728 + 4] = struct.pack("<i", T.HWPERF_CM_ENABLED)
    value = T.hwperf_prusage_t.parse(bytes(raw))
    assert value.pu_cpu_mon.cm_flags == T.HWPERF_CM_ENABLED
    assert T.hwperf_prusage_t.build(value) == bytes(raw)


def test_ctrl_encoding_user_ie_event9():
    word = (9 << 5) | 0x10 | 0x8
    built = T.hwperf_ctrl_t.build(dict(hwp_ev=9, hwp_ie=True, hwp_mode=T.HWPERF_CNTEN_U))
    assert built == struct.pack("<H", word)
    assert word == T.spec_word(9, T.HWPERF_CNTEN_U, ie=True)
    parsed = T.hwperf_ctrl_t.parse(struct.pack("<H", word))
    assert (parsed.hwp_ev, parsed.hwp_ie, parsed.hwp_mode) == (9, True, T.HWPERF_CNTEN_U)


@pytest.mark.parametrize(
    "ev,ie,mode",
    [(0, 0, 0), (0, 0, 8), (15, 0, 0xA), (16, 1, 0x1), (31, 1, 0xF), (2047, 1, 0xF), (1024, 0, 2)],
)
def test_ctrl_encoding_matches_spec_word(ev, ie, mode):
    word = T.spec_word(ev, mode, ie=bool(ie))
    assert T.hwperf_ctrl_t.build(dict(hwp_ev=ev, hwp_ie=bool(ie), hwp_mode=mode)) == struct.pack(
        "<H", word
    )
    assert T.spec_fields(word) == (ev, bool(ie), mode)
    assert (word & T.HWPERF_MODEMASK) == mode


def test_evmask_selects_counter_event():
    word = T.spec_word(13, T.HWPERF_CNTEN_U)
    assert (word & T.HWPERF_EVMASK) >> T.HWPERF_EVSHIFT == 13


def test_maxevent_is_per_counter():
    # PAPI: "if (index > HWPERF_MAXEVENT) -> counter 1, hwp_ev = index - 16".
    assert T.HWPERF_MAXEVENT == T.HWPERF_CNT1BASE - 1
    assert T.HWPERF_CNTEVENTMAX * 2 == T.HWPERF_EVENTMAX


def test_ioctl_sizes_and_directions():
    cases = {
        "PIOCENEVCTRS": (P._IOC_WRITE, 196, 233),
        "PIOCRELEVCTRS": (P._IOC_NONE, 0, 234),
        "PIOCGETEVCTRS": (P._IOC_READ, 256, 235),
        "PIOCGETPREVCTRS": (P._IOC_READ, 1104, 236),
        "PIOCGETEVCTRL": (P._IOC_READ, 64, 237),
        "PIOCSETEVCTRL": (P._IOC_WRITE, 196, 238),
        "PIOCSAVECCNTRS": (P._IOC_NONE, 0, 239),
    }
    for name, (direction, size, nr) in cases.items():
        cmd = getattr(P, name)
        assert P.ioc_dir(cmd) == direction, name
        assert P.ioc_size(cmd) == size, name
        assert (cmd >> 8) & 0xFF == ord("q"), name
        assert cmd & 0xFF == nr, name
    assert P.HWIOC_GET_CPUCNTRS == (3 << 30) | (264 << 16) | (ord("h") << 8) | 4
