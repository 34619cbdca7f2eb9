"""Who may do what, and bad input: one clear line and a non-zero exit, never a traceback."""

import pytest

from tests.conftest import run_as_nobody

NOT_ROOT = "ecadmin: must be root to enable, disable or release the global event counters\n"


def as_nobody(nobody_python, mount, name, *args):
    return run_as_nobody(nobody_python, "-m", f"hwperfd.ec.{name}", *args, mount=mount)


@pytest.mark.parametrize("args", [["-e", "0"], ["-a"], ["-d", "0"], ["-r"], ["-e", "0", "-l"]])
def test_only_root_may_change_the_global_counters(ec, manual_mount, nobody_python, args):
    got = as_nobody(nobody_python, manual_mount, "ecadmin", *args)
    assert (got.returncode, got.stderr, got.stdout) == (1, NOT_ROOT, "")
    assert "system mode free" in (manual_mount.path / "control").read_text()


def test_another_user_can_list_the_events(ec, manual_mount, nobody_python):
    got = as_nobody(nobody_python, manual_mount, "ecadmin", "-e", "?")
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith(f"Events of the MIPS R10000 CPU (hwperfd at {manual_mount.path}: 2 CPUs at 200 MHz)")
    assert "\n 25  1        Primary data cache misses\n" in got.stdout
    # The control node is readable by everyone: held global counters change nothing.
    assert ec("ecadmin", "-e", "0").returncode == 0
    held = as_nobody(nobody_python, manual_mount, "ecadmin", "-e", "?")
    assert held.returncode == 0, held.stderr
    assert held.stdout.startswith(f"Events of the MIPS R10000 CPU (hwperfd at {manual_mount.path}: 2 CPUs at 200 MHz)")
    assert "Primary data cache misses" in held.stdout


def test_another_user_lists_and_samples_but_cannot_change(ec, manual_mount, nobody_python):
    """ecadmin(1): root is needed "for any option other than -l"; hwperfd's
    control node answers a non-root user's read commands, as syssgi did."""
    assert ec("ecadmin", "-e", "0").returncode == 0
    listing = as_nobody(nobody_python, manual_mount, "ecadmin", "-l")
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout == ec("ecadmin", "-l").stdout
    assert " 0 Cycles" in listing.stdout
    stats = as_nobody(nobody_python, manual_mount, "ecstats", "-a", "-s", "1", "0.01")
    assert stats.returncode == 0, stats.stderr
    assert "Cycles" in stats.stdout
    change = as_nobody(nobody_python, manual_mount, "ecadmin", "-e", "1")
    assert change.returncode == 1 and "must be root" in change.stderr
    assert ec("ecadmin", "-l").stdout == listing.stdout


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("ecadmin", ["-e", "nosuch"], "unknown event 'nosuch' for the R10000"),
        ("ecadmin", ["-e", "32"], "event 32 is outside 0..31"),
        ("ecadmin", ["-e", "0,-1"], "event -1 is outside 0..31"),
        ("ecadmin", ["-d", "0,,1"], "empty event name in '0,,1'"),
        ("ecadmin", ["-x"], "option -x not recognized"),
        ("ecadmin", ["-e"], "option -e requires argument"),
        ("ecadmin", [], "no option given"),
        ("ecadmin", ["-l", "garbage"], "unexpected argument 'garbage'"),
        ("ecstats", ["0"], "the interval must be more than 0 seconds"),
        ("ecstats", ["--", "-1"], "the interval must be more than 0 seconds"),
        ("ecstats", ["soon"], "the interval must be a number of seconds, not 'soon'"),
        ("ecstats", ["inf"], "the interval must be more than 0 seconds"),
        ("ecstats", ["-s", "0", "1"], "-s needs a whole number of samples of at least 1"),
        ("ecstats", ["-s", "many"], "-s needs a whole number of samples of at least 1"),
        ("ecstats", ["1", "2"], "unexpected argument '2'"),
        ("ecstats", ["-C", "0.1"], "-C needs a terminal on stdin and stdout"),
        ("ecstats", ["-s", "1", "0.01"], "no global event counters are enabled"),
        ("ecfind", ["-z"], "option -z not recognized"),
        ("ecfind", ["pid"], "unexpected argument 'pid'"),
    ],
)
def test_bad_input_gets_one_line_and_a_non_zero_exit(ec, name, args, message):
    got = ec(name, *args)
    assert got.returncode == 1
    assert got.stdout == ""
    assert got.stderr.startswith(f"{name}: ") and got.stderr.count("\n") == 1, got.stderr
    assert message in got.stderr


@pytest.mark.parametrize("name, args", [("ecadmin", ["-e", "0"]), ("ecadmin", ["-l"]), ("ecstats", []), ("ecfind", [])])
def test_a_missing_mount_is_said_as_perfex_says_it(ec, manual_mount, tmp_path, name, args):
    got = ec(name, *args, env=manual_mount.env(HWPERFD_MOUNT=str(tmp_path)))
    assert (got.returncode, got.stdout) == (1, "")
    assert got.stderr == (
        f"{name}: hwperfd is not mounted at {tmp_path} (start it with `hwperfd {tmp_path}` as root, "
        "or set HWPERFD_MOUNT to where it is mounted)\n"
    )


def test_help_describes_the_decisions(ec):
    for name, words in [("ecadmin", "HWPERF_SET_SYSEVCTRL"), ("ecstats", "multiplied by m"), ("ecfind", "mode 0600")]:
        got = ec(name, "-h")
        assert got.returncode == 0 and got.stdout.startswith(f"usage: {name} ")
        assert words in " ".join(got.stdout.split())
