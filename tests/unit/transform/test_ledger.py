"""The ledger's pure logic: key index, journals (torn appends, compaction), key encoding, the lock."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfbatch.storage import atomic_write
from tfbatch.storage.io import is_temp_name, temp_name
from tfbatch.storage.lock import OutputLock, OutputLocked
from tfbatch.transform.keyindex import KeyIndex
from tfbatch.transform.ledger import Ledger
from tfbatch.transform.report import ObjectResult, RecordFailure

keys = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=300)


@settings(max_examples=50, deadline=None)
@given(st.sets(keys, max_size=60), st.lists(keys, max_size=30))
def test_key_index_is_exact_set_membership(members, probes):
    index = KeyIndex(members)
    assert len(index) == len(members)
    queries = list(members) + probes
    assert list(index.contains_many(queries)) == [q in members for q in queries]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), max_size=200),
       st.lists(st.tuples(st.integers(0, 45), st.integers(0, 4)), max_size=60),
       st.integers(0, 58))
def test_key_index_lookups_agree_with_a_set_on_shared_high_halves(pairs, probes, spread):
    """Crowded buckets, shared high halves and keys added twice: the bucket directory and the
    runs sorted by the low half must still give exact membership (real keys almost never do this)."""
    import numpy as np

    scale = np.uint64(1) << np.uint64(spread)  # from all in one bucket to spread over the top bits
    his = lambda xs: np.array([h for h, _ in xs], dtype=np.uint64) * scale  # noqa: E731
    los = lambda xs: np.array([lo for _, lo in xs], dtype=np.uint64)  # noqa: E731
    index = KeyIndex.from_hashes(his(pairs), los(pairs))
    assert len(index) == len(set(pairs))
    queries = pairs + probes
    assert list(index.contains_hashes(his(queries), los(queries))) == [q in set(pairs) for q in queries]


def test_keys_that_differ_only_in_shape_never_collide(tmp_path):
    ledger = Ledger(str(tmp_path), "fp", group_size=2)
    tricky = ["a", "a/b", ".", "a/", "./a", "a.out", "x" * 1000, "é/ü", "a\nb"]
    for key in tricky[:-3]:
        ledger.record(ObjectResult(key=key, ok=True, written=True))
    ledger.close()
    done = Ledger(str(tmp_path), "fp").done_keys()
    assert [k in done for k in tricky] == [True] * 6 + [False] * 3


def test_temp_names_are_short_and_distinct_for_long_names(tmp_path):
    long_name = "k" * 250  # the target itself fits NAME_MAX; "." + name + ".tmp-..." would not
    names = {temp_name(long_name) for _ in range(50)}
    assert len(names) == 50 and all(len(n) < 40 and is_temp_name(n) for n in names)
    deep = tmp_path.joinpath(*(["d" * 200] * 4))
    atomic_write(str(deep / long_name), b"x")
    assert (deep / long_name).read_bytes() == b"x"
    assert [p.name for p in deep.iterdir()] == [long_name]


def _result(key: str, *, failures: list[RecordFailure] | None = None, ok: bool = True) -> ObjectResult:
    return ObjectResult(key=key, ok=ok, records=1, written=ok, failures=failures or [],
                        failed_records=len(failures or []))


def test_taxonomy_storage_errors_are_never_done_bad_input_is(tmp_path):
    ledger = Ledger(str(tmp_path), "fp")
    storage = RecordFailure.from_exception("s", None, None, ConnectionResetError("reset by peer"))
    denied = RecordFailure.from_exception("p", None, None, PermissionError("denied"))
    from tfbatch.errors import InvalidInput

    bad = RecordFailure.from_exception("b", 0, 0, InvalidInput("not an image"))
    assert storage.transient and denied.transient and not bad.transient
    assert ledger.record(_result("s", failures=[storage], ok=False)) is False
    assert ledger.record(_result("p", failures=[denied], ok=False)) is False
    assert ledger.record(_result("b", failures=[bad], ok=False)) is True
    assert ledger.record(_result("good")) is True
    ledger.close()
    again = Ledger(str(tmp_path), "fp")
    done = again.done_keys()
    assert ("s" in done, "p" in done, "b" in done, "good" in done) == (False, False, True, True)
    retrying = again.done_keys(retry_failed=True)
    assert "b" not in retrying and "good" in retrying
    lines = b"".join(again.iter_error_lines()).decode().splitlines()
    assert len(lines) == 3 and sum('"retry":true' in line for line in lines) == 2


def test_torn_final_append_is_ignored_and_compaction_keeps_everything(tmp_path):
    first = Ledger(str(tmp_path), "fp", instance=0, group_size=1)
    for key in ("a", "b"):
        first.record(_result(key))
    first.close()
    second = Ledger(str(tmp_path), "fp", instance=1, group_size=1)
    second.record(_result("c"))
    second.close()
    (journal,) = [p for p in (tmp_path / "_tfbatch/ledger/fp").iterdir() if p.name.endswith("-j00001.jsonl")]
    with open(journal, "ab") as f:
        f.write(b'{"entries":[{"k":"torn"')  # killed mid-append
    assert {k: k in Ledger(str(tmp_path), "fp").done_keys() for k in "abc"} == dict.fromkeys("abc", True)
    assert "torn" not in Ledger(str(tmp_path), "fp").done_keys()
    Ledger(str(tmp_path), "fp").compact()
    files = os.listdir(tmp_path / "_tfbatch/ledger/fp")
    assert len(files) == 1 and files[0].endswith("-z.jsonl")
    done = Ledger(str(tmp_path), "fp").done_keys()
    assert all(k in done for k in "abc") and "torn" not in done


def test_a_later_clean_run_clears_a_recorded_failure(tmp_path):
    from tfbatch.errors import InvalidInput

    bad = RecordFailure.from_exception("x", 0, 0, InvalidInput("bad"))
    one = Ledger(str(tmp_path), "fp")
    one.record(_result("x", failures=[bad], ok=False))
    one.close()
    assert "x" in Ledger(str(tmp_path), "fp").keys_with_errors()
    two = Ledger(str(tmp_path), "fp")
    two.record(_result("x"))
    two.close()
    assert "x" not in Ledger(str(tmp_path), "fp").keys_with_errors()
    assert list(Ledger(str(tmp_path), "fp").iter_error_lines()) == []


def test_second_job_on_an_output_is_refused_naming_prefix_and_holder(tmp_path):
    with OutputLock(str(tmp_path)):
        with pytest.raises(OutputLocked) as info:
            OutputLock(str(tmp_path)).acquire()
        message = str(info.value)
        assert str(tmp_path) in message and f"pid {os.getpid()}" in message and "--wait-lock" in message
    with OutputLock(str(tmp_path)):  # released: free again
        pass


def test_wait_lock_waits_until_the_holder_releases(tmp_path):
    holder = OutputLock(str(tmp_path)).acquire()
    waits = []

    def sleep(seconds):  # a fake clock: the holder lets go after the second wait
        waits.append(seconds)
        if len(waits) == 2:
            holder.release()

    with OutputLock(str(tmp_path), wait=True, sleep=sleep):
        assert len(waits) == 2


def test_file_uri_output_keeps_the_ledger_beside_the_outputs(tmp_path, monkeypatch):
    """A ``file://`` output prefix puts ``_tfbatch/`` in that folder, not under ``./file:`` in the cwd."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    ledger = Ledger(f"file://{out}", "fp")
    assert ledger.root.startswith(str(out) + "/")
    assert ledger.report_uri == f"{out}/_tfbatch/report.json"
    assert not (tmp_path / "file:").exists()
