"""The filesystem routes ioctls by what the personalities registered
(hwperfd/node.py) and applies what a call reports it changed: it names no
command and builds no personality's table, and an ioctl table reports what a
command may change when, and only when, the command answers."""

from __future__ import annotations

import ast
import errno
import re

import pytest

from hwperfd.node import CONTROLS, COUNTS, HOLDER, PAGE, PAGES, TEXTS, Call, Changed, Command, dispatch
from tests.conftest import ROOT

FS = ROOT / "hwperfd" / "procfs" / "fs.py"
# Every personality's command prefixes (IRIX's /proc and syssgi, perfctr, libcpc, pctr).
COMMAND = re.compile(r"\b(HWPERFD_)?(PIOC|HWIOC_|VPERFCTR_|PERFCTR_|CPCIO|HWPERFD_CPCIO|PCIOC)\w*")


def test_the_filesystem_names_no_command():
    tree = ast.parse(FS.read_text())
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not {name for name in names if COMMAND.fullmatch(name)}
    assert "structs" not in names  # no command number, no struct of any personality


def test_the_filesystem_builds_no_personality():
    imported = set()
    for node in ast.walk(ast.parse(FS.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
    personalities = ("hwperfd.irix", "hwperfd.pctr", "hwperfd.cpc", "hwperfd.perfctr")
    assert not {name for name in imported if name.startswith(personalities)}


def _call(cmd: int, target: int = 0) -> Call:
    return Call(3, cmd, 0, b"", 100, 0, 0, False, 0, target)


def test_a_table_reports_what_an_answered_command_may_change():
    table = {1: Command(lambda call: (7, b"out"), TEXTS | COUNTS | PAGE | CONTROLS), 2: Command(lambda call: (0, b""))}
    changed = Changed()
    assert dispatch(table, _call(1, target=42), changed) == (7, b"out")
    assert (changed.texts, changed.counts, changed.controls, changed.every_page) == (True, True, True, False)
    assert changed.pages == [(None, 42, False)]  # the target's pages, from every source
    untouched = Changed()
    dispatch(table, _call(2), untouched)
    assert (untouched.texts, untouched.counts, untouched.controls, untouched.pages) == (False, False, False, [])
    assert Changed().pages == []  # no call's pages leak into another's


def test_a_refused_command_reports_nothing_and_an_unknown_one_is_enotty():
    def refuse(call: Call):
        raise OSError(errno.EPERM, "no")

    table = {1: Command(refuse, TEXTS | PAGES | CONTROLS)}
    changed = Changed()
    with pytest.raises(OSError) as refused:
        dispatch(table, _call(1), changed)
    assert refused.value.errno == errno.EPERM
    assert (changed.texts, changed.every_page, changed.controls) == (False, False, False)
    with pytest.raises(OSError) as unknown:
        dispatch(table, _call(9), changed)
    assert unknown.value.errno == errno.ENOTTY  # never ENOSYS: FUSE would stop sending ioctls


def test_every_page_is_one_report():
    changed = Changed()
    changed.report(PAGES)
    assert changed.every_page and changed.pages == []


def test_a_node_names_its_pages_before_the_call_and_a_refusal_reports_what_it_may_have_changed():
    bound = {3: 77}  # the file's vperfctr, say: the call ends it

    def end(call: Call):
        del bound[call.fh]
        raise OSError(errno.ESRCH, "gone before it answered")

    table = {1: Command(end, PAGE | CONTROLS | TEXTS, refused=PAGE | CONTROLS)}
    changed = Changed()
    with pytest.raises(OSError):
        dispatch(table, _call(1), changed, pages=lambda call: [("src", bound[call.fh], True)])
    assert changed.pages == [("src", 77, True)] and changed.controls and not changed.texts


def test_the_hardware_changing_hands_is_every_page_and_only_then():
    holder = [None]

    def take(call: Call):
        holder[0] = "pctr"
        return 0, b""

    table = {1: Command(take, HOLDER), 2: Command(lambda call: (0, b""), HOLDER)}
    taken, kept = Changed(), Changed()
    dispatch(table, _call(1), taken, holder=lambda: holder[0])
    dispatch(table, _call(1), kept, holder=lambda: holder[0])  # held already: no change of hands
    assert taken.every_page and not kept.every_page
    with pytest.raises(OSError) as unknown:
        dispatch(table, _call(9), Changed(), unknown=errno.EINVAL)
    assert unknown.value.errno == errno.EINVAL  # a personality whose original said so
