"""The job's bookkeeping in its output location: what finished, what failed, the report.

Layout under ``<output>/_tfbatch/``::

    lock                              who is running a job on this output (see storage/lock.py)
    ledger/<fingerprint>/*.jsonl      journals of committed groups, compacted at the end of a job
    errors.jsonl                      every standing failure of the job, gathered at the end
    report.json                       the job report

Group commit: ``record()`` queues an object's entry; a group (``group_size`` entries, or
whatever is queued after ``interval_s``) is committed by first making every ``.out`` of the
group durable — one ``syncfs`` of the output filesystem, since the pipeline writes outputs
without their own fsyncs — and only then appending the group's journal record and
fsyncing it. So an entry found on resume always has its output; an output with no entry
(killed before its group committed) is simply redone to the same bytes.

The failure taxonomy lives here: an entry is *done* (output written, or the input is bad
and its failures recorded) or *retry* (the object could not be processed — storage or
transient errors — and a resumed job runs it again). Keys are stored inside the journal
records, never in file names, so no two keys can share a marker whatever characters or
length they have.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator

from tfbatch.settings import Environment
from tfbatch.storage import delete, is_local, join, normalize, write_text
from tfbatch.storage.io import sync_local
import tfbatch.transform.journal as journal
from tfbatch.transform.keyindex import KeyIndex, key_hash
from tfbatch.transform.report import ObjectResult
from tfbatch.transform.spec import TransformSpec

log = logging.getLogger(__name__)

FOLDER = "_tfbatch"
# A group is committed at this many objects or after this long, whichever comes first:
# bigger groups mean fewer syncs and journal records, at the price of more objects redone
# after a crash. Environment overrides exist for tuning and for crash tests.
GROUP_SIZE = 256
INTERVAL_S = 1.0
# On object stores each group is a PUT (and a GET and DELETE when compacted): fewer, fuller groups.
REMOTE_INTERVAL_S = 10.0
# On object stores compaction costs a GET and a DELETE per journal object, so a job folds
# its journals only once there are this many (a resume then reads at most this many small
# objects, all in one listing page). Local journals are one appended file per instance and
# run, and are always folded.
REMOTE_COMPACT_FILES = 64


class LedgerCommitError(RuntimeError):
    """A group's journal record could not be written: its objects stay not done."""


class Ledger:
    def __init__(self, output: str, fingerprint: str, *, instance: int = 0, run: str | None = None,
                 group_size: int | None = None, interval_s: float | None = None):
        self.output = normalize(output)
        self.root = join(self.output, FOLDER)
        self.fingerprint = fingerprint
        self.folder = join(self.root, f"ledger/{fingerprint}/")
        self.report_uri = join(self.root, "report.json")
        self.error_report_uri = join(self.root, "errors.jsonl")
        self.instance = instance
        self.run = run or journal.new_run_id()
        env = Environment.read()
        self.group_size = group_size or env.ledger_group or GROUP_SIZE
        default_interval = INTERVAL_S if is_local(self.output) else REMOTE_INTERVAL_S
        self.interval_s = interval_s or env.ledger_interval_s or default_interval
        self._pending: list[dict] = []
        self._lock = threading.Lock()  # guards _pending
        self._commit_lock = threading.Lock()  # one commit at a time, in order
        self._writer: journal.JournalWriter | None = None
        self._flusher: threading.Thread | None = None
        self._closed = threading.Event()
        self._full = threading.Event()  # a whole group is queued: commit it now
        self.commit_error: BaseException | None = None
        self.groups_committed = 0
        self._state: tuple[KeyIndex, set[str]] | None = None
        self._error_report_found: bool | None = None  # seen in the load's listing
        self._journals_after_compact: list | None = None

    @classmethod
    def for_spec(cls, spec: TransformSpec, **kwargs) -> "Ledger":
        return cls(spec.output, spec.fingerprint(), **kwargs)

    # ---- reading --------------------------------------------------------------------

    def load(self) -> tuple[KeyIndex, set[str]]:
        """(done, done with recorded bad-input failures), from one listing of the journals.

        Keys with failures are few (``--max-error-rate`` stops a job where they are not), so
        they stay plain strings; the done keys go into the compact index.
        """
        done = KeyIndex()
        erred: set[str] = set()
        pending: list[str] = []
        for raw in journal.iter_lines(self._scan()):
            keys = _plain_done_keys(raw)
            if keys is not None:
                pending.extend(keys)
                if erred:
                    erred.difference_update(keys)
            else:
                record = journal.parse_record(raw)
                if record is None:
                    continue  # cut off by a kill: its objects are redone
                for entry in record["entries"]:
                    key = entry.get("k") if isinstance(entry, dict) else None
                    if not isinstance(key, str) or entry.get("retry"):
                        continue  # failed to process: not done; an earlier success stays valid
                    pending.append(key)
                    if "e" in entry:
                        erred.add(key)
                    elif erred:
                        erred.discard(key)
            if len(pending) >= 65536:
                done.update(pending)
                pending = []
        done.update(pending)
        return done, erred

    def _scan(self) -> list:
        """The journals, from one listing of the job's bookkeeping folder, which also says
        whether an error report is there (so a clean job need not delete one blindly)."""
        from tfbatch.storage import ObjectRef, list_prefix

        base = f"ledger/{self.fingerprint}/"
        journals, found = [], False
        for ref in list_prefix(self.root.rstrip("/") + "/"):
            if ref.key == "errors.jsonl":
                found = True
            elif ref.key.startswith(base) and ref.key.endswith(".jsonl") and "/" not in ref.key[len(base):]:
                journals.append(ObjectRef(ref.uri, ref.key[len(base):], ref.size))
        self._error_report_found = found
        return sorted(journals, key=lambda r: r.key)

    def _loaded(self) -> tuple[KeyIndex, set[str]]:
        if self._state is None:
            self._state = self.load()
        return self._state

    def done_keys(self, *, retry_failed: bool = False) -> "KeyIndex | _Without":
        """Keys finished by earlier runs; with ``retry_failed``, less those with recorded failures."""
        done, erred = self._loaded()
        return _Without(done, erred) if retry_failed and len(erred) else done

    def keys_with_errors(self):
        return self._loaded()[1]

    def iter_error_lines(self) -> Iterator[bytes]:
        """Each key's standing failures (those of its latest entry), in commit order.

        Three streaming passes so memory follows the number of keys with failures, not
        the number of objects: which keys ever failed, where each one's latest entry is,
        then those entries.
        """
        files = self._journals_after_compact
        if files is None:
            files = journal.journal_files(self.folder)
        failed = {key_hash(e["k"]) for e in journal.iter_entries(files) if e.get("e")}
        if not failed:
            return
        latest: dict[tuple[int, int], int] = {}
        for position, entry in enumerate(journal.iter_entries(files)):
            h = key_hash(entry["k"])
            if h in failed:
                latest[h] = position if entry.get("e") else -1
        for position, entry in enumerate(journal.iter_entries(files)):
            if entry.get("e") and latest.get(key_hash(entry["k"])) == position:
                yield "".join(json.dumps(f, separators=(",", ":")) + "\n" for f in entry["e"]).encode()

    # ---- writing --------------------------------------------------------------------

    def record(self, result: ObjectResult, *, fail_object: bool = False) -> bool:
        """Queue an object's outcome for the next group commit; True if it counts as done.

        Done: no failure that a retry could cure, and (with fail-object) no failure at all.
        A retry entry is still journaled so the report can name it, but never counts as done.
        """
        done = not result.transient and (result.ok or not fail_object)
        if done or result.failures:
            entry: dict = {"k": result.key, "r": result.records, "f": result.failed_records,
                           "b": result.output_bytes, "w": result.written}
            if result.failures:
                entry["e"] = [json.loads(f.to_json()) for f in result.failures]
            if not done:
                entry["retry"] = True
            self._queue(entry)
        return done

    # Names the pipeline has always called; ``record`` is the one place that decides.
    def save_failures(self, result: ObjectResult, *, had_error_file: bool = False) -> None:
        return None

    def mark_done(self, result: ObjectResult) -> None:
        self.record(result)

    def _queue(self, entry: dict) -> None:
        if self.commit_error is not None:
            raise LedgerCommitError(f"the ledger could not be written: {self.commit_error}") from self.commit_error
        with self._lock:
            self._pending.append(entry)
            full = len(self._pending) >= self.group_size
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                                 name=f"ledger-commit-{self.instance}")
                self._flusher.start()
        if full:
            # Committed on the commit thread: the caller (the batch lane's one writer) goes on
            # writing outputs while the group's syncfs and journal fsync run.
            self._full.set()

    def _flush_loop(self) -> None:
        while not self._closed.is_set():
            full = self._full.wait(self.interval_s)
            self._full.clear()
            if self._closed.is_set():
                return  # close() commits the rest
            try:
                self.flush(whole_groups=full)
            except Exception:  # kept in commit_error; the next record() raises it
                log.exception("ledger group commit failed")

    def flush(self, *, whole_groups: bool = False) -> int:
        """Commit what is queued: outputs durable first, then one journal record. Returns its size.

        ``whole_groups``: only as many entries as make whole groups of ``group_size`` (the
        rest wait for the next group or the interval).
        """
        with self._commit_lock:
            with self._lock:
                if whole_groups:
                    cut = len(self._pending) // self.group_size * self.group_size
                    group, self._pending = self._pending[:cut], self._pending[cut:]
                else:
                    group, self._pending = self._pending, []
            if not group:
                return 0
            try:
                if is_local(self.output):
                    sync_local(self.output)
                if self._writer is None:
                    self._writer = journal.JournalWriter(self.folder, self.run, self.instance)
                line = json.dumps({"entries": group}, separators=(",", ":")) + "\n"
                self._writer.append(line.encode())
            except BaseException as exc:
                self.commit_error = exc
                raise
            self.groups_committed += 1
            return len(group)

    def close(self) -> None:
        self._closed.set()
        self._full.set()  # wake the commit thread so it exits
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._writer.close()

    def compact(self) -> str | None:
        """Fold the journals (see REMOTE_COMPACT_FILES); the error report reuses the listing."""
        min_files = 2 if is_local(self.output) else REMOTE_COMPACT_FILES
        files = journal.compact(self.folder, self.run, min_files=min_files)
        self._journals_after_compact = files
        return files[0].uri if len(files) == 1 else None

    def write_error_report(self, *, failures_possible: bool = True) -> str | None:
        """Gather every standing failure into ``errors.jsonl``; None when there are none.

        ``failures_possible=False`` is the caller's word that no loaded entry had failures
        and no object of this run reported any: then the journals are not read again, and
        an error report is deleted only if the load's listing saw one.
        """
        from tfbatch.storage import atomic_write

        if not failures_possible and self._error_report_found is not None:
            if self._error_report_found:
                delete(self.error_report_uri)
            return None
        lines = self.iter_error_lines()
        first = next(lines, None)
        if first is None:
            delete(self.error_report_uri)
            return None

        def chunks() -> Iterator[bytes]:
            yield first
            yield from lines

        atomic_write(self.error_report_uri, chunks())
        return self.error_report_uri

    def write_report(self, report: dict) -> str:
        write_text(self.report_uri, json.dumps(report, indent=2, sort_keys=True) + "\n")
        return self.report_uri


_PLAIN_KEY = re.compile(r'"k":"([^"]*)"')


def _plain_done_keys(raw: bytes) -> list[str] | None:
    """The keys of a record line in the common shape, without parsing it as JSON; else None.

    The common shape: a whole record as ``flush`` writes it (compact separators) whose
    entries are all done with no failures (neither ``"e":`` nor ``"retry":`` occurs) and
    with no backslash anywhere. With no escapes, every ``"`` in the line delimits a
    string, so the ``"k":"..."`` matches are exactly the entries' keys, in order; the match
    count is checked against the ``"k":`` field count. Resuming a 10M-object job parses
    most of its ledger this way, several times faster than ``json.loads``.
    """
    if (not raw.startswith(b'{"entries":[') or not raw.endswith(b"]}\n") or b"\\" in raw
            or b'"e":' in raw or b'"retry":' in raw):
        return None
    try:
        line = raw.decode("ascii")  # json.dumps escapes every non-ASCII character
    except UnicodeDecodeError:
        return None
    found = _PLAIN_KEY.findall(line)
    return found if len(found) == line.count('"k":') else None


class _Without:
    """``done`` less ``erred``: what --retry-failed treats as done."""

    def __init__(self, done: KeyIndex, erred: set[str]):
        self.done, self.erred = done, erred

    def __contains__(self, key: object) -> bool:
        return key in self.done and key not in self.erred

    def contains_many(self, keys: list[str]):
        found = self.done.contains_many(keys)
        for i, key in enumerate(keys):
            if found[i] and key in self.erred:
                found[i] = False
        return found

    def __len__(self) -> int:
        return len(self.done) - len(self.erred)
