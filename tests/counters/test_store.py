"""The set-up store (hwperfd/counters/store.py): an older store reads back,
records come back a few at a time by key, and a store someone else has open
is shared, not lost."""

from __future__ import annotations

import sqlite3
import zlib

from hwperfd.counters.store import SetupRecord, SetupStore

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
        assert reader.execute("SELECT count(*) FROM setup").fetchone() == (1,)
        store.close()
    finally:
        reader.close()
