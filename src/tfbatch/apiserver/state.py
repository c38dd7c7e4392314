"""The server's state in one SQLite file under ``--state-dir``: resources, tags, log events,
job progress. Every write is a committed transaction, so a ``kill -9`` loses nothing that was
answered: on restart the models, jobs and endpoints are as the last answer left them.

Resources (models, transform jobs, endpoint configs, endpoints, ...) share one table keyed
by kind and lowercased name (SageMaker names are unique regardless of case), each row a
JSON document holding the Describe answer's fields. Timestamps are epoch seconds.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS resources (
    kind TEXT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL, arn TEXT NOT NULL,
    created REAL NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (kind, key));
CREATE INDEX IF NOT EXISTS resources_created ON resources (kind, created);
CREATE TABLE IF NOT EXISTS tags (
    arn TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (arn, key));
CREATE TABLE IF NOT EXISTS log_streams (
    grp TEXT NOT NULL, stream TEXT NOT NULL, created INTEGER NOT NULL,
    first_ts INTEGER, last_ts INTEGER, last_ingest INTEGER, PRIMARY KEY (grp, stream));
CREATE TABLE IF NOT EXISTS log_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, grp TEXT NOT NULL, stream TEXT NOT NULL,
    ts INTEGER NOT NULL, ingest INTEGER NOT NULL, message TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS log_events_stream ON log_events (grp, stream, id);
CREATE TABLE IF NOT EXISTS progress (job TEXT PRIMARY KEY, doc TEXT NOT NULL);
"""


class State:
    """Thread-safe access to the state database (one connection, one lock: writes are small)."""

    def __init__(self, state_dir: str | Path):
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "state.sqlite3"
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: a committed answer survives the machine losing power too, not only the process.
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _run(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, args)

    def transaction(self):
        """``with state.transaction():`` groups writes; the lock is held for its duration."""
        return _Transaction(self)

    # ---- resources -----------------------------------------------------------------

    def insert(self, kind: str, name: str, arn: str, doc: dict[str, Any], created: float | None = None) -> bool:
        """Add a resource; False when one of that kind and name exists (ResourceInUse)."""
        created = time.time() if created is None else created
        try:
            self._run("INSERT INTO resources VALUES (?, ?, ?, ?, ?, ?)",
                      (kind, name.lower(), name, arn, created, json.dumps(doc)))
        except sqlite3.IntegrityError:
            return False
        return True

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        row = self._run("SELECT doc FROM resources WHERE kind = ? AND key = ?", (kind, name.lower())).fetchone()
        return json.loads(row[0]) if row else None

    def update(self, kind: str, name: str, **fields: Any) -> dict[str, Any] | None:
        """Lay ``fields`` over the stored document (a None value removes the key); the new doc."""
        with self._lock:
            doc = self.get(kind, name)
            if doc is None:
                return None
            for key, value in fields.items():
                if value is None:
                    doc.pop(key, None)
                else:
                    doc[key] = value
            self._run("UPDATE resources SET doc = ? WHERE kind = ? AND key = ?", (json.dumps(doc), kind, name.lower()))
            return doc

    def delete(self, kind: str, name: str) -> bool:
        cur = self._run("DELETE FROM resources WHERE kind = ? AND key = ?", (kind, name.lower()))
        return cur.rowcount > 0

    def list(self, kind: str) -> list[dict[str, Any]]:
        """Every resource of ``kind``, oldest first."""
        rows = self._run("SELECT doc FROM resources WHERE kind = ? ORDER BY created, key", (kind,)).fetchall()
        return [json.loads(r[0]) for r in rows]

    def kind_of_arn(self, arn: str) -> tuple[str, str] | None:
        row = self._run("SELECT kind, name FROM resources WHERE arn = ?", (arn,)).fetchone()
        return (row[0], row[1]) if row else None

    # ---- tags ----------------------------------------------------------------------

    def set_tags(self, arn: str, tags: dict[str, str]) -> None:
        with self.transaction():
            for key, value in tags.items():
                self._run("INSERT OR REPLACE INTO tags VALUES (?, ?, ?)", (arn, key, value))

    def tags(self, arn: str) -> dict[str, str]:
        return dict(self._run("SELECT key, value FROM tags WHERE arn = ? ORDER BY key", (arn,)).fetchall())

    def delete_tags(self, arn: str, keys: list[str] | None = None) -> None:
        if keys is None:
            self._run("DELETE FROM tags WHERE arn = ?", (arn,))
            return
        with self.transaction():
            for key in keys:
                self._run("DELETE FROM tags WHERE arn = ? AND key = ?", (arn, key))

    # ---- logs ----------------------------------------------------------------------

    def put_log_events(self, group: str, stream: str, events: list[tuple[int, str]]) -> None:
        """Append ``(timestamp ms, message)`` events to a stream, creating it on first use."""
        if not events:
            return
        now = int(time.time() * 1000)
        with self.transaction():
            self._run("INSERT OR IGNORE INTO log_streams VALUES (?, ?, ?, NULL, NULL, NULL)", (group, stream, now))
            self._db.executemany("INSERT INTO log_events (grp, stream, ts, ingest, message) VALUES (?, ?, ?, ?, ?)",
                                 [(group, stream, ts, now, msg) for ts, msg in events])
            self._run("UPDATE log_streams SET first_ts = COALESCE(first_ts, ?), last_ts = ?, last_ingest = ? "
                      "WHERE grp = ? AND stream = ?", (events[0][0], events[-1][0], now, group, stream))

    def log_streams(self, group: str, prefix: str = "") -> list[dict[str, Any]]:
        rows = self._run("SELECT stream, created, first_ts, last_ts, last_ingest FROM log_streams "
                         "WHERE grp = ? AND substr(stream, 1, ?) = ? ORDER BY stream",
                         (group, len(prefix), prefix)).fetchall()
        return [dict(zip(("stream", "created", "first_ts", "last_ts", "last_ingest"), r)) for r in rows]

    def log_groups(self) -> list[str]:
        return [r[0] for r in self._run("SELECT DISTINCT grp FROM log_streams ORDER BY grp").fetchall()]

    def log_events(self, group: str, streams: list[str] | None, after_id: int = 0, before_id: int | None = None,
                   start_ms: int | None = None, end_ms: int | None = None, limit: int = 10000,
                   descending: bool = False) -> list[tuple[int, str, int, int, str]]:
        """``(id, stream, ts, ingest, message)`` rows in id order (the order they were written)."""
        sql = "SELECT id, stream, ts, ingest, message FROM log_events WHERE grp = ? AND id > ?"
        args: list[Any] = [group, after_id]
        if before_id is not None:
            sql += " AND id < ?"
            args.append(before_id)
        if streams is not None:
            sql += f" AND stream IN ({','.join('?' * len(streams))})"
            args.extend(streams)
        if start_ms is not None:
            sql += " AND ts >= ?"
            args.append(start_ms)
        if end_ms is not None:
            sql += " AND ts <= ?"
            args.append(end_ms)
        sql += f" ORDER BY id {'DESC' if descending else 'ASC'} LIMIT ?"
        args.append(limit)
        return [tuple(r) for r in self._run(sql, tuple(args)).fetchall()]

    # ---- job progress --------------------------------------------------------------

    def put_progress(self, job: str, doc: dict[str, Any]) -> None:
        self._run("INSERT OR REPLACE INTO progress VALUES (?, ?)", (job, json.dumps(doc)))

    def progress(self, job: str) -> dict[str, Any] | None:
        row = self._run("SELECT doc FROM progress WHERE job = ?", (job,)).fetchone()
        return json.loads(row[0]) if row else None

    def iter_kinds(self) -> Iterator[str]:
        yield from (r[0] for r in self._run("SELECT DISTINCT kind FROM resources").fetchall())


class _Transaction:
    def __init__(self, state: State):
        self.state = state

    def __enter__(self) -> State:
        self.state._lock.acquire()
        self.depth = self.state._db.in_transaction
        if not self.depth:
            self.state._db.execute("BEGIN IMMEDIATE")
        return self.state

    def __exit__(self, exc_type, *_exc) -> None:
        try:
            if not self.depth:
                self.state._db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self.state._lock.release()
