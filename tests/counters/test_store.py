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
from pathlib import Path

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
    data[found[1]] ^= 0x20  # the second entry's "Irix-process": its checksum fails
    journal.write_bytes(bytes(data[: found[3] + 5]))  # the last one cut short, as a kill mid-write leaves it
    store = SetupStore(str(path))
    assert _bodies(store) == {"2": {"n": 2}, "4": {"n": 4}}
    assert store.refused == 1
    assert "set-up journal entry" in caplog.text and "refused: checksum mismatch" in caplog.text
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
