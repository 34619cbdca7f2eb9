"""host_mhz reads the first CPU's "cpu MHz" of /proc/cpuinfo, to the kHz."""

from fractions import Fraction

from hwperfd.host.clockrate import host_mhz


def test_the_first_cpus_rate_to_the_khz(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\ncpu MHz\t\t: 2596.1204\n\nprocessor\t: 1\ncpu MHz\t\t: 800.000\n")
    assert host_mhz(str(info)) == Fraction(2596120, 1000)


def test_no_rate_none_and_no_guess(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nBogoMIPS\t: 48.00\n")
    assert host_mhz(str(info)) is None
    info.write_text("cpu MHz\t\t: fast\n")
    assert host_mhz(str(info)) is None
    info.write_text("cpu MHz\t\t: 0.000\n")
    assert host_mhz(str(info)) is None
    assert host_mhz(str(tmp_path / "absent")) is None
