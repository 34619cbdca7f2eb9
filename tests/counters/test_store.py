"""The set-up store (hwperfd/counters/store.py): an older store reads back,
records come back a few at a time by key, a store someone else has open
is shared, not lost, and what a killed daemon wrote after its last flush
comes back from the journal, exactly once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import zlib
from fractions import Fraction
from pathlib import Path

from hwperfd.counters import codec
from hwperfd.counters.block import ControlBlock
from hwperfd.counters.durable import PROCESS  # noqa: F401 - registers the counter layer's classes
from hwperfd.counters.request import CounterRequest
from hwperfd.counters.store import JOURNAL_FLUSH, SetupRecord, SetupStore

ROOT = Path(__file__).resolve().parents[2]

OLD_SCHEMA = """CREATE TABLE setup (kind TEXT NOT NULL, key TEXT NOT NULL, pid INTEGER NOT NULL,
start INTEGER NOT NULL, uid INTEGER NOT NULL, body TEXT NOT NULL, crc INTEGER NOT NULL,
PRIMARY KEY (kind, key)) WITHOUT ROWID"""


def test_a_store_written_before_records_named_their_parent_reads_back(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(OLD_SCHEMA)
        crc = zlib.crc32(b"irix-process\x0042\x0042\x007\x001000\x00{}")
        db.execute("INSERT INTO setup VALUES ('irix-process', '42', 42, 7, 1000, '{}', ?)", (crc,))
    db.close()
    store = SetupStore(str(path))
    assert store.index("irix-process") == [("42", 0)]
    assert store.read("irix-process", ["42"]) == [SetupRecord("irix-process", "42", 42, 7, 1000, {}, 0)]
    assert store.refused == 0


def test_records_are_read_by_key_with_their_parents_named_and_corrupt_ones_refused(tmp_path):
    store = SetupStore(str(tmp_path / "s.sqlite"))
    store.write([SetupRecord("irix-process", str(pid), pid, 1, 0, {"n": pid}, pid - 1) for pid in range(2, 7)])
    store.write([SetupRecord("system", "", 0, 0, 0, {"held": True})])
    assert sorted(store.index("irix-process")) == [(str(pid), pid - 1) for pid in range(2, 7)]
    assert [r.body for r in store.load(without="irix-process")] == [{"held": True}]
    store._db.execute("UPDATE setup SET body = '{\"n\":99}' WHERE key = '4'")
    assert sorted(r.pid for r in store.read("irix-process", ["3", "4", "9"])) == [3]
    assert store.refused == 1
    assert "4" not in {key for key, _ in store.index("irix-process")}  # refused and deleted


def test_a_store_another_connection_holds_open_is_shared_and_its_writes_land(tmp_path):
    path = tmp_path / "s.sqlite"
    first = SetupStore(str(path))
    assert first.exclusive
    first.close()
    reader = sqlite3.connect(path)
    try:
        assert reader.execute("SELECT count(*) FROM setup").fetchone() == (0,)
        store = SetupStore(str(path))
        assert not store.exclusive
        store.write([SetupRecord("irix-process", "5", 5, 1, 0, {})])
        store.flush()  # a write is in the journal until the flush, then in the database
        assert reader.execute("SELECT count(*) FROM setup").fetchone() == (1,)
        store.close()
    finally:
        reader.close()


def _killed(path, steps: str) -> None:
    """Run ``steps`` on a store at ``path`` in a process SIGKILLed right after
    (no flush, no close: what a killed daemon leaves)."""
    script = (
        "import os, signal, sys\n"
        "from hwperfd.counters.store import SetupRecord as R, SetupStore\n"
        f"store = SetupStore({str(path)!r})\n{textwrap.dedent(steps)}\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr


def _bodies(store: SetupStore) -> dict[str, object]:
    return {r.key: r.body for r in store.load()}


def test_what_a_killed_daemon_wrote_after_its_last_flush_comes_back_from_the_journal(tmp_path):
    path = tmp_path / "s.sqlite"
    _killed(path, """
        store.write([R("irix-process", "2", 2, 1, 0, {"n": 1}), R("irix-process", "3", 3, 1, 0, {"n": 1})])
        store.flush()
        store.write([R("irix-process", "2", 2, 1, 0, {"n": 2})], [("irix-process", "3")])
        store.write([R("irix-process", "4", 4, 1, 0, {"n": 1}, 2)])
    """)  # fmt: skip
    with sqlite3.connect(path) as db:  # the database alone has only the flushed records
        assert db.execute("SELECT key FROM setup ORDER BY key").fetchall() == [("2",), ("3",)]
    db.close()
    assert os.stat(f"{path}-pending").st_mode & 0o777 == 0o600
    store = SetupStore(str(path))
    assert _bodies(store) == {"2": {"n": 2}, "4": {"n": 1}}
    assert store.index("irix-process") == [("2", 0), ("4", 2)]
    assert store.refused == 0
    store.close()


def test_a_corrupt_journal_entry_is_refused_and_a_torn_last_one_ignored(tmp_path, caplog):
    path = tmp_path / "s.sqlite"
    _killed(path, """
        for n in (2, 3, 4, 5):
            store.write([R("irix-process", str(n), n, 1, 0, {"n": n})])
    """)  # fmt: skip
    journal = Path(f"{path}-pending")
    data = bytearray(journal.read_bytes())
    found = [i for i in range(len(data)) if data.startswith(b"irix-process", i)]
    data[found[1]] ^= 0x20  # the second entry's "Irix-process": its checksum fails, the third's does not
    journal.write_bytes(bytes(data[: found[3] + 5]))  # the last one cut short, as a kill mid-write leaves it
    store = SetupStore(str(path))
    assert _bodies(store) == {"2": {"n": 2}, "4": {"n": 4}}
    assert store.refused == 1
    assert "set-up journal" in caplog.text and "1 entries at" in caplog.text and "refused: damaged" in caplog.text
    store.close()


def test_a_journal_the_database_has_taken_in_is_not_taken_in_again(tmp_path):
    """A kill between a flush's commit and the journal's new start leaves the
    old entries: their epoch is the database's, so they are not laid over
    what was written since."""
    path = tmp_path / "s.sqlite"
    _killed(path, """
        store.write([R("irix-process", "2", 2, 1, 0, {"n": 1})])
        old = open(store.journal, "rb").read()
        store.flush()
        store.write([R("irix-process", "2", 2, 1, 0, {"n": 2})])
        store.flush()
        open(store.journal, "wb").write(old)
    """)  # fmt: skip
    store = SetupStore(str(path))
    assert _bodies(store) == {"2": {"n": 2}}
    store.close()


def test_a_record_written_many_times_is_one_row_and_the_journal_stays_bounded(tmp_path):
    store = SetupStore(str(tmp_path / "s.sqlite"))
    ends = []
    for n in range(3000):
        store.write([SetupRecord("irix-process", "2", 2, 1, 0, {"n": n, "pad": "x" * 1000})])
        ends.append(store._end)
    assert max(ends) <= JOURNAL_FLUSH + 2000
    assert min(ends[1000:]) < JOURNAL_FLUSH // 2  # flushed on the way, and begun again
    assert os.path.getsize(store.journal) < 2 * JOURNAL_FLUSH
    store.flush()
    assert store._db.execute("SELECT count(*), max(body) FROM setup").fetchone()[0] == 1
    assert _bodies(store)["2"]["n"] == 2999  # type: ignore[index]
    store.close(remove_if_empty=False)


def _killed_with_ends(path: Path, steps: str) -> tuple[list[int], bytes]:
    """``_killed``, with the journal's end after each ``mark()`` in ``steps``
    and the journal's bytes as they were before the last ``mark()``'s
    write (``before()`` takes them)."""
    ends, before = path.with_suffix(".ends"), path.with_suffix(".before")
    _killed(path, textwrap.dedent(f"""
        marks = []
        def mark():
            marks.append(store._end)
            open({str(ends)!r}, "w").write(repr(marks))
        def before():
            open({str(before)!r}, "wb").write(open(store.journal, "rb").read())
    """) + textwrap.dedent(steps))  # fmt: skip
    return eval(ends.read_text()), before.read_bytes()


def _opened_with_journal(src: Path, journal: bytes, into: Path) -> SetupStore:
    """A copy of the killed store at ``src`` (database and log as it left
    them) with ``journal`` for its journal, opened as the next start opens it."""
    into.mkdir()
    for suffix in ("", "-wal"):
        if os.path.exists(f"{src}{suffix}"):
            Path(f"{into / src.name}{suffix}").write_bytes(Path(f"{src}{suffix}").read_bytes())
    Path(f"{into / src.name}-pending").write_bytes(journal)
    return SetupStore(str(into / src.name))


_BEFORE_TORN = {"1": {"n": 1}, "2": {"n": 2}, "3": {"n": 1}, "4": {"n": 1}, "9": {"n": 9}}


def _torn_tail_journal(tmp_path: Path) -> tuple[Path, int, int, bytes, bytes]:
    """A killed daemon's store: a flushed journal of long entries, then a new
    journal written over its space whose last entry is to be torn.  Returns
    the store, the last entry's start and end, the journal as the kill left
    it and as it was before the last entry's write (the old journal's bytes
    past the new one's end: a stale tail)."""
    path = tmp_path / "s.sqlite"
    ends, before = _killed_with_ends(path, """
        store.write([R("irix-process", str(n), n, 1, 0, {"n": 1, "pad": "p" * 300}) for n in (1, 2, 3, 4)])
        for n in (1, 2, 3, 4):
            store.write([R("irix-process", str(n), n, 1, 0, {"n": 1})])
        store.flush()
        store.write([R("irix-process", "2", 2, 1, 0, {"n": 2})])
        store.write([R("irix-process", "9", 9, 1, 0, {"n": 9})])
        mark()
        before()
        store.write([R("irix-process", "2", 2, 1, 0, {"n": 3}), R("irix-process", "5", 5, 1, 0, {"n": 5})],
                    [("irix-process", "3")])
        mark()
    """)  # fmt: skip
    start, end = ends
    return path, start, end, Path(f"{path}-pending").read_bytes(), before


def test_a_journal_entry_a_kill_tore_is_its_end_at_every_byte_it_can_be_cut_at(tmp_path, caplog):
    """A kill mid-write leaves the last entry cut short (the file ends inside
    it) or part new over the old journal's bytes (the space is reused): the
    call it was for never answered, so the journal ends there, quietly; all
    before it comes back."""
    path, start, end, journal, stale = _torn_tail_journal(tmp_path)
    whole = _opened_with_journal(path, journal, tmp_path / "whole")
    assert _bodies(whole) == {"1": {"n": 1}, "2": {"n": 3}, "4": {"n": 1}, "5": {"n": 5}, "9": {"n": 9}}
    whole.close()
    assert len(stale) > end  # the old journal's entries lie past the new one's
    for cut in range(start, end):
        for how, torn in (("cut", journal[:cut]), ("over stale", journal[:cut] + stale[cut:])):
            caplog.clear()
            store = _opened_with_journal(path, torn, tmp_path / f"{how.replace(' ', '-')}-{cut}")
            assert (_bodies(store), store.refused) == (_BEFORE_TORN, 0), (how, cut - start)
            assert "refused" not in caplog.text, (how, cut - start)
            store.close()


def test_a_stale_journal_past_the_new_ones_end_is_not_taken_in(tmp_path, caplog):
    """The space past a new journal's last entry holds the old journal's
    entries, taken in at its flush: never again, and never refused."""
    path, start, _, _, stale = _torn_tail_journal(tmp_path)
    store = _opened_with_journal(path, stale, tmp_path / "stale")
    assert (_bodies(store), store.refused) == (_BEFORE_TORN, 0)
    assert "refused" not in caplog.text
    store.close()


def test_a_damaged_journal_entry_amid_good_ones_is_refused_logged_and_skipped_at_every_byte(tmp_path, caplog):
    path = tmp_path / "s.sqlite"
    (first, second, third, _), _ = _killed_with_ends(path, """
        for n in (2, 3, 4, 5):
            store.write([R("irix-process", str(n), n, 1, 0, {"n": n})])
            mark()
        before()
    """)  # fmt: skip
    journal = Path(f"{path}-pending").read_bytes()
    for at in range(first, second):  # every byte of the second entry, its framing included
        caplog.clear()
        damaged = bytearray(journal)
        damaged[at] ^= 0x41
        store = _opened_with_journal(path, bytes(damaged), tmp_path / f"d{at}")
        assert (_bodies(store), store.refused) == ({"2": {"n": 2}, "4": {"n": 4}, "5": {"n": 5}}, 1), at - first
        assert "set-up journal" in caplog.text and "refused" in caplog.text
        store.close()
    assert third > second


def test_a_live_record_a_killed_daemon_wrote_comes_back_in_its_stored_form(tmp_path):
    """A ``Live`` body (the counter layer's values, packed into the journal
    as the call answers) reads back as the JSON form of those values; a
    value not of its field's declared type is written too."""
    path = tmp_path / "s.sqlite"
    _killed(path, """
        from fractions import Fraction
        from hwperfd.counters.block import ControlBlock
        from hwperfd.counters.durable import PROCESS
        from hwperfd.counters.request import CounterRequest
        from hwperfd.counters.store import Live
        block = ControlBlock(CounterRequest.shared((8,) + (0,) * 31, (0,) * 32, 0))
        store.write([R("irix-process", "2", 2, 1, 0, Live(record=block, profile=None))])
        block.counts[1] = Fraction(1, 2)
        store.write([R("irix-process", "3", 3, 1, 0, Live(record=block, profile=None))])
        block.counts[1] = 7
    """)  # fmt: skip
    store = SetupStore(str(path))
    bodies = _bodies(store)
    block = ControlBlock(CounterRequest.shared((8,) + (0,) * 31, (0,) * 32, 0))
    assert bodies["2"] == {"record": codec.encode(block), "profile": None}
    assert codec.decode(bodies["3"]["record"]).counts[1] == Fraction(1, 2)
    assert store.refused == 0
    store.close()


def test_a_journal_of_the_previous_version_is_taken_in(tmp_path):
    """Version 3 journals (every body in its JSON form) read as before: an
    upgrade after a kill loses nothing the old daemon answered."""
    path = tmp_path / "s.sqlite"
    _killed(path, """
        import hwperfd.counters.store as s
        s._VERSION = 3
        store._begin(store._epoch)
        store.write([R("irix-process", "2", 2, 1, 0, {"n": 1})])
    """)  # fmt: skip
    store = SetupStore(str(path))
    assert _bodies(store) == {"2": {"n": 1}}
    store.close()
