"""The set-up store: what is counted, kept where the next daemon finds it.

Counts need no keeping: they come from each process's CPU time through the
model, so a restarted daemon recomputes them.  What must outlive the daemon
is the set-up behind them (who counts which events since which CPU time,
generations, thresholds, held hardware, saved exit values).  Every change to
it is written here before the call that made it answers; a daemon that
starts reloads it (docs/restart.md).

One SQLite database per mount in the state directory (root's, mode 0600), in
WAL mode, and before it a journal (``<database>-pending``).  A write is one
entry appended to the journal, one pwrite(2) of the record's form with its
CRC-32: in the kernel's page cache when the call answers, so a daemon killed
at any point loses nothing it answered.  Nothing is forced to the disk
(no fsync; ``synchronous=OFF``), which only a machine crash would need, and
that ends every counted process too.  The journal goes into SQLite
(``flush``) a moment later, when it grows past ``JOURNAL_FLUSH`` bytes,
before the store is read and when it closes: one transaction for all that
changed meanwhile, each record once however many calls changed it.  A store
opened at a start first takes in what a killed daemon's journal held past
its last flush.  Exclusive locking: the daemon holds the database from its
open to its exit (the kernel drops the lock of a killed one; ``_hold``).
Each record carries a CRC-32 of its body: a record that does not check out,
or does not parse, is refused, logged and skipped, and the daemon starts
without it.

The store holds only what the daemon holds in memory, record for record, so
the caps that bound that (per-user open files, contexts, pages) bound it.
"""

from __future__ import annotations

import json
import logging
import marshal
import os
import sqlite3
import struct
import zlib
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from hwperfd.counters import codec

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
_META = "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID"
_COLUMNS = "kind, key, pid, start, uid, body, crc, parent"
_PUT = f"INSERT OR REPLACE INTO setup ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_DROP = "DELETE FROM setup WHERE kind = ? AND key = ?"

# The journal: a header (magic, version, epoch, salt), then entries, each
# written with one pwrite(2): the salt, its sequence number (0, 1, ... in
# this journal), its payload's length, a CRC-32 of these and the payload,
# then the payload.  A new journal is written over the old one's space
# (allocated once: appending to a file emptied at each flush cost block
# allocations) with a new random salt, so the old entries past its end are
# not its own.  An entry that does not check out is either the end (a write
# a kill cut short, or the old journal's bytes past the last entry: the call
# it was for never answered) or damage in the middle; an entry of this
# journal further on, with a later number, tells which (``_entries``).  The
# payload is a marshalled tuple of (kind, key, pid, start, uid, parent, form)
# for each record written and (kind, key) for each deleted: one entry per
# ``write``, whole or not at all.  The database keeps the epoch its last
# flush took in: a journal of that epoch or an earlier one holds nothing
# newer than it.
_MAGIC = b"HWPJ"
_HEADER = struct.Struct("<4sIQ8s")
_FRAME = struct.Struct("<8sQI")  # salt, sequence number, length; then the CRC-32
_CRC = struct.Struct("<I")
_ENTRY = _FRAME.size + _CRC.size
_VERSION = 4
_READS = (3, 4)  # 3: bodies in their JSON forms only (no ``Live`` ones)
_JOURNAL_SPACE = (1 << 20) + (64 << 10)  # allocated at the start: JOURNAL_FLUSH and the entry past it
_MARSHAL = 4  # marshal's format: the journal is read back by the same daemon's successor
JOURNAL_FLUSH = 1 << 20  # bytes of journal past which a write flushes it at once
_ENTRY_MAX = 16 << 20  # no record comes near it: a length past it is damage
_LIVE = "live"  # a body packed from a ``Live`` one: (_LIVE, {name: packed form})


class Live(dict[str, Any]):
    """A record's body as named values of the counter layer, not yet in their
    stored forms: ``write`` packs them for the journal (``codec.pack``) and
    their JSON forms (``codec.encode``, what the database and ``load`` hold:
    ``{name: encode(value)}``) are made at the flush, off the call's path."""


class SetupRecord(NamedTuple):
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


def _row(kind: str, key: str, pid: int, start: int, uid: int, parent: int, form: Any) -> tuple[Any, ...]:
    """A record's row in the database: its form as JSON, and the checksum."""
    if not all(type(v) is int for v in (pid, start, uid, parent)):
        raise TypeError("bad column types")
    if type(form) is tuple:  # a Live body, packed (a JSON form has no tuples)
        if len(form) != 2 or form[0] != _LIVE or type(form[1]) is not dict:
            raise codec.CodecError("not a packed body")
        form = {name: codec.encode(codec.unpack(value)) for name, value in form[1].items()}
    body = _to_json(form)
    return (kind, key, pid, start, uid, body, _crc(kind, key, pid, start, uid, body), parent)


def _items(records: list[SetupRecord], drop: Iterable[tuple[str, str]], *, exact: bool) -> tuple[Any, ...]:
    """A journal entry's items: (kind, key, pid, start, uid, parent, body) of
    each record (a ``Live`` body packed), (kind, key) of each deleted."""
    items: list[tuple[Any, ...]] = []
    for r in records:
        body = r.body
        if type(body) is Live:
            try:
                body = (_LIVE, {name: value if value is None else codec.pack(value, exact=exact)
                                for name, value in body.items()})
            except (TypeError, AttributeError) as exc:  # a value not of its field's declared type
                if exact:
                    raise
                raise ValueError(exc) from exc
        items.append((r.kind, r.key, r.pid, r.start, r.uid, r.parent, body))
    items += [(kind, key) for kind, key in drop]
    return tuple(items)


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
        self._db.execute("PRAGMA cache_size=-512")
        self._db.execute(_SCHEMA)
        self._db.execute(_META)
        if "parent" not in {row[1] for row in self._db.execute("PRAGMA table_info(setup)")}:
            self._db.execute("ALTER TABLE setup ADD COLUMN parent INTEGER NOT NULL DEFAULT 0")  # an older store
        self.refused = 0  # records refused since the store was opened
        self.exclusive = self._hold()
        # Written to the journal and not to the database yet: (kind, key) ->
        # the last entry's payload and the record's place in it (None: deleted).
        self._unflushed: dict[tuple[str, str], tuple[bytes, int] | None] = {}
        self.on_journal: Callable[[], None] = lambda: None  # the journal's first entry since a flush
        self.journal = path + "-pending"
        self._journal = -1
        self._epoch, self._end = self._recover()

    # -- the journal ---------------------------------------------------------

    def _recover(self) -> tuple[int, int]:
        """Take into the database what the journal holds past the database's
        last flush (a killed daemon's last writes), then begin a new journal.
        Returns its epoch and end."""
        row = self._db.execute("SELECT value FROM meta WHERE name = 'epoch'").fetchone()
        flushed = row[0] if row is not None and isinstance(row[0], int) else 0
        fd = os.open(self.journal, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._journal = fd
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise OSError(f"{self.journal} is not the daemon's own")
        os.fchmod(fd, 0o600)
        data = os.pread(fd, st.st_size, 0) if st.st_size else b""
        epoch = flushed
        if len(data) >= _HEADER.size:
            magic, version, found, salt = _HEADER.unpack_from(data)
            if magic == _MAGIC and version in _READS and found > flushed:
                epoch = found
                self._take_in(data, found, salt)
            elif magic != _MAGIC or version not in _READS:
                log.warning("set-up journal %s refused: not a journal of this daemon's", self.journal)
        return self._begin(epoch + 1), _HEADER.size

    @staticmethod
    def _entry(data: bytes, at: int, salt: bytes) -> tuple[int, bytes, int] | None:
        """The entry of the journal of ``salt`` at ``at`` if one checks out
        there: its number, payload and end."""
        if at + _ENTRY > len(data):
            return None
        found, seq, length = _FRAME.unpack_from(data, at)
        end = at + _ENTRY + length
        if found != salt or end > len(data):
            return None
        payload = data[at + _ENTRY : end]
        (crc,) = _CRC.unpack_from(data, at + _FRAME.size)
        if zlib.crc32(payload, zlib.crc32(data[at : at + _FRAME.size])) != crc:
            return None
        return seq, payload, end

    def _entries(self, data: bytes, salt: bytes) -> Iterator[bytes]:
        """The payloads of the journal of ``salt`` in ``data``, in order.
        Where an entry does not check out, the next of this journal that does
        (the salt's next appearance with a later number) says it was damage:
        the entries between are refused and logged, and the reading goes on
        from there.  With none further on, it is the end: a write a kill cut
        short (the file ends in it, or the old journal's bytes follow its
        first part) or the old journal past this one's last entry; the call
        it was for never answered, and nothing is refused."""
        at, expected = _HEADER.size, 0
        while True:
            entry = self._entry(data, at, salt)
            if entry is None or entry[0] != expected:
                found = data.find(salt, at)
                while found >= 0:
                    entry = self._entry(data, found, salt)
                    if entry is not None and entry[0] > expected:
                        break
                    found = data.find(salt, found + 1)
                if found < 0 or entry is None:
                    return
                log.warning(
                    "set-up journal %s: %d entries at %d refused: damaged", self.journal, entry[0] - expected, at
                )
                self.refused += entry[0] - expected
            expected, payload, at = entry[0] + 1, entry[1], entry[2]
            yield payload

    def _take_in(self, data: bytes, epoch: int, salt: bytes) -> None:
        latest: dict[tuple[str, str], tuple[Any, ...] | None] = {}
        for payload in self._entries(data, salt):
            try:
                items = marshal.loads(payload)
                if type(items) is not tuple or not all(
                    type(item) is tuple and len(item) in (2, 7) and all(type(v) is str for v in item[:2])
                    for item in items
                ):
                    raise ValueError("not an entry")
            except (ValueError, EOFError, TypeError) as exc:
                log.warning("set-up journal %s: an entry refused: %s", self.journal, exc)
                self.refused += 1
                continue
            for item in items:
                latest[item[:2]] = item if len(item) == 7 else None
        rows, gone = [], []
        for (kind, key), item in latest.items():
            if item is None:
                gone.append((kind, key))
            else:
                try:
                    rows.append(_row(*item))
                except (ValueError, TypeError) as exc:
                    log.warning("set-up record %s/%s refused: %s", kind, key, exc)
                    self.refused += 1
        self._commit(rows, gone, epoch)
        if latest:
            log.info("set-up journal: %d records taken in", len(latest))

    def _begin(self, epoch: int) -> int:
        """An empty journal of ``epoch`` and a new salt: its header over the
        last one's (whose entries, of another salt, end it as found)."""
        if os.fstat(self._journal).st_size < _JOURNAL_SPACE:
            try:
                os.posix_fallocate(self._journal, 0, _JOURNAL_SPACE)
            except OSError:
                pass  # a file system without it: the space is taken as it is written
        self._salt = os.urandom(8)
        self._seq = 0
        os.pwrite(self._journal, _HEADER.pack(_MAGIC, _VERSION, epoch, self._salt), 0)
        return epoch

    @property
    def unflushed(self) -> bool:
        """The journal holds entries the database has not taken in yet."""
        return bool(self._unflushed)

    def flush(self) -> None:
        """Write what the journal holds into the database (one transaction,
        each record once) and begin a new journal."""
        if not self._unflushed:
            return
        gone = [kind_key for kind_key, where in self._unflushed.items() if where is None]
        self._commit(self._rows(), gone, self._epoch)
        self._unflushed.clear()
        self._epoch = self._begin(self._epoch + 1)
        self._end = _HEADER.size

    def _rows(self) -> Iterator[tuple[Any, ...]]:
        """The rows of what the journal holds, made one at a time as SQLite
        takes them: a flush of thousands of records (a batch of processes
        set up within the flush's delay) holds one record's forms at a time,
        not all of them, so its peak does not stay on as the daemon's RSS."""
        loaded: dict[int, Any] = {}  # entries of several records (a start's), read once
        last: tuple[bytes | None, Any] = (None, None)
        for (kind, key), where in self._unflushed.items():
            if where is None:
                continue
            payload, i = where
            if payload is last[0]:
                items = last[1]
            else:
                items = loaded.get(id(payload))
                if items is None:
                    items = marshal.loads(payload)
                    if len(items) > 1:
                        loaded[id(payload)] = items
                last = (payload, items)
            try:
                row = _row(*items[i])
            except (ValueError, TypeError) as exc:  # a value the codec could pack but not store
                log.warning("set-up record %s/%s refused: %s", kind, key, exc)
                self.refused += 1
                continue
            yield row

    def _commit(
        self, rows: Iterable[tuple[Any, ...]], gone: list[tuple[str, str]], epoch: int | None = None
    ) -> None:
        db = self._db
        db.execute("BEGIN")
        try:
            if gone:
                db.executemany(_DROP, gone)
            db.executemany(_PUT, rows)
            if epoch is not None:
                db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('epoch', ?)", (epoch,))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

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
            self.flush()
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
            self.flush()
            rows = self._db.execute("SELECT key, parent FROM setup WHERE kind = ?", (kind,)).fetchall()
        except sqlite3.DatabaseError as exc:
            log.warning("set-up store %s unreadable (%s): starting without it", self.path, exc)
            self._recreate()
            return []
        return [(key, parent if isinstance(parent, int) else 0) for key, parent in rows]

    def read(self, kind: str, keys: Iterable[str]) -> list[SetupRecord]:
        """The records of ``kind`` and ``keys`` that check out (refusing the others, as ``load``)."""
        keys = list(keys)
        self.flush()
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
        delete ``drop`` (kind, key) pairs: one entry appended to the journal,
        in the kernel's page cache on return (the database takes it at ``flush``)."""
        records, drop = list(records), list(drop)
        if not records and not drop:
            return
        try:
            items = _items(records, drop, exact=False)
            payload = marshal.dumps(items, _MARSHAL)  # a copy: packed forms share the values' lists
        except ValueError:  # a value not of its field's declared type: packed by its own
            items = _items(records, drop, exact=True)
            payload = marshal.dumps(items, _MARSHAL)
        frame = _FRAME.pack(self._salt, self._seq, len(payload))
        data = b"".join((frame, _CRC.pack(zlib.crc32(payload, zlib.crc32(frame))), payload))
        if os.pwrite(self._journal, data, self._end) != len(data):
            raise OSError(f"{self.journal}: short write")
        self._end += len(data)
        self._seq += 1
        if not self._unflushed:
            self.on_journal()
        unflushed = self._unflushed
        for i, item in enumerate(items):
            unflushed[item[:2]] = (payload, i) if len(item) == 7 else None
        if self._end > JOURNAL_FLUSH:
            self.flush()

    def count(self) -> int:
        self.flush()
        return int(self._db.execute("SELECT count(*) FROM setup").fetchone()[0])

    def close(self, *, remove_if_empty: bool = False) -> None:
        self.flush()
        empty = remove_if_empty and self.count() == 0
        self._db.close()
        os.close(self._journal)
        if empty:
            for suffix in ("", "-wal", "-shm", "-pending"):
                try:
                    os.unlink(self.path + suffix)
                except FileNotFoundError:
                    pass

    def _recreate(self) -> None:
        """A database SQLite cannot read at all is set aside, and a new one
        begun (with a new journal: the old one's entries were the old database's)."""
        self._db.close()
        os.close(self._journal)
        os.replace(self.path, self.path + ".corrupt")
        for suffix in ("-wal", "-shm", "-pending"):
            try:
                os.unlink(self.path + suffix)
            except FileNotFoundError:
                pass
        self.__init__(self.path)  # type: ignore[misc]
