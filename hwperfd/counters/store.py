"""The set-up store: what is counted, kept where the next daemon finds it.

Counts need no keeping: they come from each process's CPU time through the
model, so a restarted daemon recomputes them.  What must outlive the daemon
is the set-up behind them (who counts which events since which CPU time,
generations, thresholds, held hardware, saved exit values).  Every change to
it is written here before the call that made it answers; a daemon that
starts reloads it (docs/restart.md).

One SQLite database per mount in the state directory (root's, mode 0600), in
WAL mode: a write is one transaction appended to the log, and a daemon killed
at any point leaves either the old record or the new one.  ``synchronous=OFF``:
the log reaches the kernel's page cache on every commit (a killed daemon
loses nothing) but is not forced to the disk, which only a machine crash
would need, and that ends every counted process too.  Exclusive locking: the
daemon holds the database from its open to its exit (the kernel drops the
lock of a killed one), so a commit is the log's write(2) and no more
(``_hold``).  Each record carries a
CRC-32 of its body: a record that does not check out, or does not parse, is
refused, logged and skipped, and the daemon starts without it.

The store holds only what the daemon holds in memory, record for record, so
the caps that bound that (per-user open files, contexts, pages) bound it.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import zlib
from dataclasses import dataclass
from typing import Any, Iterable

log = logging.getLogger("hwperfd")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS setup (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    pid INTEGER NOT NULL,
    start INTEGER NOT NULL,
    uid INTEGER NOT NULL,
    body TEXT NOT NULL,
    crc INTEGER NOT NULL,
    parent INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID
"""
_COLUMNS = "kind, key, pid, start, uid, body, crc, parent"
_PUT = f"INSERT OR REPLACE INTO setup ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"


@dataclass(frozen=True)
class SetupRecord:
    """One piece of set-up: ``kind`` says whose (``irix-process``,
    ``irix-system``, ...) and ``key`` which; ``pid`` and ``start`` name the
    process it belongs to (0: none), which must still be the same process
    for the record to be restored; ``uid`` whose it is; ``body`` JSON data;
    ``parent`` the pid whose counts it folds into (0: none), so that the
    records of a family can be read together (``family``)."""

    kind: str
    key: str
    pid: int
    start: int
    uid: int
    body: Any
    parent: int = 0  # a process's parent, as the record says: records loaded together (not checked)


# One encoder for every write (json.dumps with options builds one a call); the
# codec's forms hold no cycles.
_to_json = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


def _crc(kind: str, key: str, pid: int, start: int, uid: int, body: str) -> int:
    return zlib.crc32(f"{kind}\0{key}\0{pid}\0{start}\0{uid}\0{body}".encode())


class SetupStore:
    """The records of one mount.  ``write`` is one transaction."""

    def __init__(self, path: str) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid():
                raise OSError(f"{path} is not the daemon's own")
            os.fchmod(fd, 0o600)  # SQLite gives its -wal and -shm files the database's mode
        finally:
            os.close(fd)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute(_SCHEMA)
        if "parent" not in {row[1] for row in self._db.execute("PRAGMA table_info(setup)")}:
            self._db.execute("ALTER TABLE setup ADD COLUMN parent INTEGER NOT NULL DEFAULT 0")  # an older store
        self.refused = 0  # records refused since the store was opened
        self.exclusive = self._hold()

    def _hold(self) -> bool:
        """Hold the database from now until the daemon exits (the kernel drops
        a killed one's lock): a commit is then the log's write(2), with no
        shared-memory index or lock calls.  If another connection has it open
        (root looking in with sqlite3), it is shared as ever: slower, the same."""
        try:
            self._db.execute("PRAGMA locking_mode=EXCLUSIVE")
            self._db.execute("BEGIN IMMEDIATE")  # takes the lock now
            self._db.execute("COMMIT")
            return True
        except sqlite3.OperationalError as exc:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            self._db.execute("PRAGMA locking_mode=NORMAL")
            log.info("set-up store %s shared (%s): each write takes its locks", self.path, exc)
            return False

    @classmethod
    def open(cls, directory: str, name: str) -> SetupStore | None:
        """The store ``name`` in ``directory`` (a root-only directory, made if
        missing); None, logged, if it cannot be had: the daemon then runs
        without durable set-up rather than not at all."""
        if not directory:
            return None
        try:
            os.makedirs(directory, 0o711, exist_ok=True)
            return cls(os.path.join(directory, name))
        except (OSError, sqlite3.Error) as exc:
            log.warning("set-up store off: %s: %s", directory, exc)
            return None

    def load(self, *, without: str = "") -> list[SetupRecord]:
        """Every record (but those of kind ``without``) that checks out; the
        others are refused, logged and deleted."""
        try:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM setup WHERE kind != ?", (without,)).fetchall()
        except sqlite3.DatabaseError as exc:
            log.warning("set-up store %s unreadable (%s): starting without it", self.path, exc)
            self._recreate()
            return []
        return self._checked(rows)

    def index(self, kind: str) -> list[tuple[str, int]]:
        """(key, parent) of each record of ``kind``, bodies unread: what a
        start needs to put records back later, a family at a time."""
        try:
            rows = self._db.execute("SELECT key, parent FROM setup WHERE kind = ?", (kind,)).fetchall()
        except sqlite3.DatabaseError as exc:
            log.warning("set-up store %s unreadable (%s): starting without it", self.path, exc)
            self._recreate()
            return []
        return [(key, parent if isinstance(parent, int) else 0) for key, parent in rows]

    def read(self, kind: str, keys: Iterable[str]) -> list[SetupRecord]:
        """The records of ``kind`` and ``keys`` that check out (refusing the others, as ``load``)."""
        keys = list(keys)
        rows = []
        for i in range(0, len(keys), 500):  # under SQLite's limit on a statement's parameters
            chunk = keys[i : i + 500]
            marks = ", ".join("?" * len(chunk))
            rows += self._db.execute(
                f"SELECT {_COLUMNS} FROM setup WHERE kind = ? AND key IN ({marks})", (kind, *chunk)
            ).fetchall()
        return self._checked(rows)

    def _checked(self, rows: list[tuple[Any, ...]]) -> list[SetupRecord]:
        good: list[SetupRecord] = []
        bad: list[tuple[str, str]] = []
        for kind, key, pid, start, uid, body, crc, parent in rows:
            try:
                if not all(isinstance(v, int) for v in (pid, start, uid, crc, parent)) or not isinstance(body, str):
                    raise ValueError("bad column types")
                if _crc(kind, key, pid, start, uid, body) != crc:
                    raise ValueError("checksum mismatch")
                good.append(SetupRecord(kind, key, pid, start, uid, json.loads(body), parent))
            except (ValueError, TypeError) as exc:
                log.warning("set-up record %s/%s refused: %s", kind, key, exc)
                bad.append((kind, key))
        self.refused += len(bad)
        if bad:
            self.write((), bad)
        return good

    def write(self, records: Iterable[SetupRecord], drop: Iterable[tuple[str, str]] = ()) -> None:
        """Put ``records`` (replacing those of the same kind and key) and
        delete ``drop`` (kind, key) pairs, in one transaction."""
        rows = []
        for r in records:
            body = _to_json(r.body)
            crc = _crc(r.kind, r.key, r.pid, r.start, r.uid, body)
            rows.append((r.kind, r.key, r.pid, r.start, r.uid, body, crc, r.parent))
        gone = list(drop)
        if not rows and not gone:
            return
        db = self._db
        if len(rows) == 1 and not gone:  # the common case: one statement is one transaction
            db.execute(_PUT, rows[0])
            return
        db.execute("BEGIN")
        try:
            if gone:
                db.executemany("DELETE FROM setup WHERE kind = ? AND key = ?", gone)
            if rows:
                db.executemany(_PUT, rows)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM setup").fetchone()[0])

    def close(self, *, remove_if_empty: bool = False) -> None:
        empty = remove_if_empty and self.count() == 0
        self._db.close()
        if empty:
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.unlink(self.path + suffix)
                except FileNotFoundError:
                    pass

    def _recreate(self) -> None:
        """A database SQLite cannot read at all is set aside, and a new one begun."""
        self._db.close()
        os.replace(self.path, self.path + ".corrupt")
        for suffix in ("-wal", "-shm"):
            try:
                os.unlink(self.path + suffix)
            except FileNotFoundError:
                pass
        self.__init__(self.path)  # type: ignore[misc]
