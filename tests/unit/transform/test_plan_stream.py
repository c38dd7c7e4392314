"""The job's single listing pass: assignment, done filtering, chunking (no files, no processes)."""

from __future__ import annotations

import hashlib

from tfbatch.storage import ObjectRef
from tfbatch.transform.keyindex import KeyIndex
from tfbatch.transform.plan import JobInputs, instance_of, iter_assigned, iter_chunks, refs_from_chunks


def _refs(n: int) -> list[ObjectRef]:
    return [ObjectRef(f"s3://b/in/d{i % 7}/k{i}.jpg", f"d{i % 7}/k{i}.jpg", i) for i in range(n)]


def test_partitions_are_main_s_blake2b_of_the_key():
    # The same assignment as before this change: 64-bit BLAKE2b of the UTF-8 key, big-endian, mod n.
    refs = _refs(3000)
    want = [int.from_bytes(hashlib.blake2b(r.key.encode(), digest_size=8).digest(), "big") % 5 for r in refs]
    assert [instance_of(r.key, 5) for r in refs] == want
    assert [i for i, _ref, _done in iter_assigned(refs, 5)] == want


def test_one_pass_drops_done_keys_and_counts_them_per_instance():
    refs = _refs(5000)  # several pages
    done = KeyIndex(r.key for r in refs[::3])
    totals = []
    inputs = JobInputs(iter(refs), 3, done, on_total=totals.append)
    pairs = list(inputs)
    assert [ref for _i, ref in pairs] == [r for n, r in enumerate(refs) if n % 3]  # listing order kept
    assert all(i == instance_of(ref.key, 3) for i, ref in pairs)
    assert inputs.listed == 5000 and sum(inputs.skipped) == len(refs[::3])
    assert inputs.skipped == [sum(1 for r in refs[::3] if instance_of(r.key, 3) == i) for i in range(3)]
    assert totals == [len(pairs)] and inputs.exhausted


def test_done_as_a_plain_set_and_a_single_instance():
    refs = _refs(40)
    inputs = JobInputs(refs, 1, {refs[0].key, "not-listed"})
    assert [ref for _i, ref in inputs] == refs[1:] and inputs.skipped == [1]


def test_chunks_are_bounded_per_instance_and_lose_nothing():
    refs = _refs(2000)
    pairs = [(instance_of(r.key, 4), r) for r in refs]
    chunks = list(iter_chunks(pairs, 4, size=64))
    assert all(1 <= len(chunk) <= 64 for _i, chunk in chunks)
    for i in range(4):
        mine = [chunk for j, chunk in chunks if j == i]
        assert list(refs_from_chunks(mine)) == [r for j, r in pairs if j == i]


def test_chunks_of_a_job_s_pass_match_the_pair_stream():
    """``iter_chunks`` takes a ``JobInputs`` a page at a time; per instance it must give the
    same chunks, in the same order, as the (instance, ref) stream, done keys dropped."""
    refs = _refs(5000)
    done = KeyIndex(r.key for r in refs[::5])
    by_pages = list(iter_chunks(JobInputs(iter(refs), 3, done, page_size=700), 3, size=64))
    by_pairs = list(iter_chunks(list(JobInputs(iter(refs), 3, done, page_size=700)), 3, size=64))
    for i in range(3):
        assert [c for j, c in by_pages if j == i] == [c for j, c in by_pairs if j == i]
    assert sum(len(c) for _i, c in by_pages) == 4000 and all(1 <= len(c) <= 64 for _i, c in by_pages)
    one = list(iter_chunks(JobInputs(iter(refs), 1, done), 1, size=300))
    assert [r for _i, c in one for r in c] == [r for n, r in enumerate(refs) if n % 5]


def test_ledger_load_reads_plain_and_escaped_records_alike(tmp_path):
    """The unparsed fast path for common records must agree with JSON parsing on every key."""
    import json

    from tfbatch.transform.ledger import Ledger, _plain_done_keys
    from tfbatch.transform.report import ObjectResult, RecordFailure

    ledger = Ledger(str(tmp_path), "fp", interval_s=3600)
    keys = ["a", "b/c.jpg", "k", "x" * 300, "e", "f", 'q"uote', "back\\slash", "é", '"k":', "d"]
    for n, key in enumerate(keys):
        ledger.record(ObjectResult(key=key, ok=True, records=1, written=True))
        if n % 3 == 2:
            ledger.flush()  # records of three: some plain, some with escapes
    bad = RecordFailure.from_exception("bad", None, None, ValueError("not an image"))
    ledger.record(ObjectResult(key="bad", ok=False, failed_records=1, failures=[bad]))
    lost = RecordFailure.from_exception("lost", None, None, ConnectionResetError("reset"))
    ledger.record(ObjectResult(key="lost", ok=False, failed_records=1, failures=[lost]))
    ledger.record(ObjectResult(key="bad", ok=True, records=1, written=True))  # fixed on a later try
    ledger.close()
    (journal,) = (tmp_path / "_tfbatch/ledger/fp").iterdir()
    lines = journal.read_bytes().splitlines(keepends=True)
    plain = [line for line in lines if _plain_done_keys(line) is not None]
    assert plain and len(plain) < len(lines)  # both paths are exercised
    for line in plain:
        assert _plain_done_keys(line) == [e["k"] for e in json.loads(line)["entries"]]
    assert _plain_done_keys(b'{"entries":[{"k": "spaced"}]}\n') is None  # unknown shape: parsed
    done, erred = Ledger(str(tmp_path), "fp").load()
    assert [k in done for k in [*keys, "bad", "lost"]] == [True] * (len(keys) + 1) + [False]
    assert erred == set()
