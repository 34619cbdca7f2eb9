"""What perfex's start-up path leaves out (docs/speed.md, perfex start-up).

A counted run through the -I -S launcher loads neither ``dataclasses`` (which
imports ``inspect``) nor ``pathlib``, nor ``typing``, ``re`` or ``signal``
(with ``enum`` under them), nor ``collections`` (records are
``hwperfd.records``'), nor the state page's ``mmap`` and ``resource``, nor
what only some options need (-y's cost table and statistics); the report's
command line is still quoted exactly as ``shlex.join`` quotes it.
"""

from __future__ import annotations

import shlex
import subprocess

import pytest

from hwperfd.perfex import launcher
from hwperfd.perfex.report import command_line
from tests.conftest import ROOT

NOT_AT_START = ("dataclasses", "inspect", "pathlib", "shlex", "json", "csv", "statistics", "fractions", "construct",
                "typing", "re", "enum", "signal", "collections", "mmap", "resource", "math", "types",
                "hwperfd.perfex.costs", "hwperfd.perfex.stats")  # fmt: skip


def test_a_counted_run_through_the_launcher_loads_none_of_the_costly_modules(shared_tmp, manual_mount):
    path = shared_tmp / "perfex-launcher-modules"
    launcher.write(str(path), root=str(ROOT))
    probe = shared_tmp / "perfex-modules-probe"
    probe.write_text(path.read_text().replace(
        "sys.exit(main())",
        "code = main(['-e', '0', 'true'])\n"
        f"print('loaded:', *sorted(m for m in {NOT_AT_START!r} if m in sys.modules), file=sys.stderr)\n"
        "sys.exit(code)",
    ))  # fmt: skip
    probe.chmod(0o755)
    result = subprocess.run([str(probe)], env=manual_mount.env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("Summary for execution of true\n")  # perfex reports on stderr
    assert result.stderr.splitlines()[-1] == "loaded:"


@pytest.mark.parametrize(
    "command",
    [
        ["true"],
        ["./a.out", "-x", "--y=1,2", "a/b.c", "x@y%z+:"],
        ["echo", "two words"],
        ["echo", ""],
        ["echo", "it's"],
        ["echo", "$HOME", "*", "a;b", "tab\there"],
        ["echo", "caf\u00e9"],  # \w without re.ASCII would take it: shlex quotes it
    ],
)
def test_the_command_line_is_quoted_as_shlex_join_quotes_it(command):
    assert command_line(command) == shlex.join(command)
