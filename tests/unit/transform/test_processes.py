"""How many worker processes the local engine gives each instance, and the cores each gets
(pure functions and a fake cgroup folder: no processes, no TensorFlow)."""

from __future__ import annotations

import argparse
import functools

import pytest

from tfbatch.engines.local import (CORES_PER_PROCESS, MAX_AUTO_PROCESSES, MIN_BYTES_PER_PROCESS,
                                  MIN_LINE_BYTES_PER_HANDLER_PROCESS, MIN_OBJECTS_PER_PROCESS,
                                  processes_per_instance)
from tfbatch.runtime.placement import usable_cores
from tfbatch.storage import ObjectRef
from tfbatch.transform.instance import InstanceRunner
from tfbatch.transform.cli import add_transform_arguments, spec_from_args
from tfbatch.transform.plan import JobInputs, instance_of
from tfbatch.transform.spec import TransformSpec


def parse(*argv: str) -> TransformSpec:
    p = argparse.ArgumentParser()
    add_transform_arguments(p)
    return spec_from_args(p.parse_args(["--model", "m", "--input", "s3://b/in/", "--output", "s3://b/out/", *argv]))


def _spec(**fields) -> TransformSpec:
    return TransformSpec.build(model="m", input="s3://b/in/", output="s3://b/out/", **fields)


def test_one_process_per_four_cores_without_a_gpu():
    spec = _spec()
    assert CORES_PER_PROCESS == 4
    # The development VM (2 cores) and small machines keep today's one process.
    assert [processes_per_instance(spec, cores, [[]]) for cores in (1, 2, 4, 7)] == [1, 1, 1, 1]
    assert [processes_per_instance(spec, cores, [[]]) for cores in (8, 16, 31)] == [2, 4, 7]
    # Each process holds its own TensorFlow and model: capped.
    assert processes_per_instance(spec, 256, [[]]) == MAX_AUTO_PROCESSES


def test_instances_on_one_machine_split_its_cores_first():
    spec = _spec(instance_count=2)
    assert processes_per_instance(spec, 16, [[], []]) == 2
    assert processes_per_instance(spec, 8, [[], []]) == 1
    assert processes_per_instance(_spec(instance_count=8), 16, [[]] * 8) == 1


def test_a_single_handler_gets_a_process_per_two_cores_and_two_from_two_cores():
    # Its Python, the in-process model calls included, all runs on its process's GIL
    # (2 processes on the 2-core VM ran 20,000 JPEGs in 20 % less time than 1).
    assert [processes_per_instance(_spec(), cores, [[]], single_handler=True) for cores in (1, 2, 3, 4, 6, 64)] == [
        1, 2, 2, 2, 3, MAX_AUTO_PROCESSES]
    assert processes_per_instance(_spec(), 8, [["0"]], single_handler=True) == 1


def test_each_extra_process_needs_its_share_of_objects():
    # Its start-up (TensorFlow's import, the model load) costs ~4 s of CPU on the 2-core VM:
    # a 200-JPEG handler job ran 1-1.5 s slower with 2 processes, 5,000 as fast, 10,000 faster.
    assert MIN_OBJECTS_PER_PROCESS == 4000
    rule = functools.partial(processes_per_instance, _spec(), 2, [[]], single_handler=True)
    assert [rule(objects=n) for n in (0, 200, 7999, 8000, 10**6)] == [1, 1, 1, 2, 2]
    assert rule(objects=None) == 2  # not known: the listing was too long or too slow to wait for
    wide = functools.partial(processes_per_instance, _spec(), 64, [[]])
    assert [wide(objects=n) for n in (3999, 12000, 10**7)] == [1, 3, MAX_AUTO_PROCESSES]
    # The flag is the user's choice whatever the job's size.
    assert processes_per_instance(_spec(processes=4), 2, [[]], objects=10) == 4


def test_a_few_large_objects_count_by_their_bytes():
    # Ten 120 MB TFRecord shards on 16 cores: 4 processes, as 50,000 JPEGs would get.
    mb = 1024 * 1024
    assert MIN_BYTES_PER_PROCESS == 64 * mb
    sixteen = functools.partial(processes_per_instance, _spec(), 16, [[]])
    assert sixteen(objects=10, size=10 * 120 * mb) == 4
    assert sixteen(objects=10, size=10 * 12 * mb) == 1  # 120 MB in all: one process's worth
    assert sixteen(objects=3, size=3 * 500 * mb) == 3  # no process without an object
    assert sixteen(objects=1, size=4000 * mb) == 1
    assert sixteen(objects=8000, size=0) == 2  # sizes unknown: the count decides, as before
    # Below 8 cores the rule by cores gives one whatever the bytes.
    assert processes_per_instance(_spec(), 4, [[]], objects=10, size=10**12) == 1


def test_a_single_handler_on_lines_counts_fewer_bytes_a_process():
    # Each line a record (SingleRecord: a handler call each): 25 MB of CSV lines ran 29 % sooner
    # on 2 processes than on 1 on the 2-core VM, 4.6 MB as fast; MultiRecord, 25 MB 13 % sooner,
    # 12.5 MB slower. Other splits (records that are images) and pairs keep the image rule.
    mb = 1024 * 1024
    assert MIN_LINE_BYTES_PER_HANDLER_PROCESS == {"SingleRecord": 4 * mb, "MultiRecord": 10 * mb}
    lines = functools.partial(processes_per_instance, _spec(split_type="Line"), 2, [[]], single_handler=True)
    assert [lines(objects=20, size=n * mb) for n in (4, 8, 25)] == [1, 2, 2]
    assert lines(objects=20, size=8 * mb - 1) == 1
    multi = functools.partial(processes_per_instance, _spec(split_type="Line", batch_strategy="MultiRecord"), 2, [[]],
                              single_handler=True)
    assert [multi(objects=20, size=n * mb) for n in (12.5, 20, 25)] == [1, 2, 2]
    assert lines(objects=1, size=100 * mb) == 1  # no process without an object
    for spec, handler in ((_spec(split_type="Line"), False), (_spec(split_type="TFRecord"), True), (_spec(), True)):
        assert processes_per_instance(spec, 2, [[]], single_handler=handler, objects=20, size=25 * mb) == 1


def test_a_peek_sums_the_bytes_still_to_run():
    refs = [ObjectRef(f"/in/k{i}", f"k{i}", 1000 * i) for i in range(5)] + [ObjectRef("/in/z", "z", None)]
    todo = JobInputs(iter(refs), 1, {"k4"}).peek(100, 10.0)
    assert todo == (5, 1000 + 2000 + 3000) and (todo.objects, todo.bytes) == (5, 6000)


@pytest.mark.parametrize("script, expected", [
    ("def handler(data, context):\n    return data.read(), 'x'\n", True),
    ("async def handler(data, context):\n    pass\n", True),
    ("def input_handler(d, c):\n    pass\ndef output_handler(r, c):\n    pass\n", False),
    ("class K:\n    def handler(self):\n        pass\n", False),  # not top-level
    ("def handler(:\n", False),  # does not parse: the instance will say why
    (None, False),
])
def test_a_single_handler_is_read_from_the_script_without_running_it(tmp_path, script, expected):
    from types import SimpleNamespace

    from tfbatch.engines.local import single_handler

    path = None
    if script is not None:
        path = tmp_path / "inference.py"
        path.write_text("raise SystemExit('never run')\n" + script)
    assert single_handler(SimpleNamespace(inference_script=path)) is expected


def test_a_gpu_keeps_one_process_and_the_flag_wins():
    assert processes_per_instance(_spec(), 64, [["0"]]) == 1
    assert processes_per_instance(_spec(processes=3), 2, [[]]) == 3
    assert processes_per_instance(_spec(processes=1), 64, [[]]) == 1
    assert processes_per_instance(_spec(processes=2), 64, [["0"]]) == 2


def _installed_tensorflow(monkeypatch, root, cuda: bool) -> None:
    """A TensorFlow package tree first on sys.path, holding only the generated build_info.py
    that says which build it is (its __init__ raises: nothing may import it)."""
    platform = root / "tensorflow" / "python" / "platform"
    platform.mkdir(parents=True)
    (root / "tensorflow" / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (platform / "build_info.py").write_text(
        f"build_info = collections.OrderedDict([('is_cuda_build', {cuda}), ('is_rocm_build', False)])\n")
    monkeypatch.syspath_prepend(str(root))


@pytest.mark.parametrize("cuda", [False, True])
def test_a_gpu_host_with_tensorflows_cpu_wheel_is_planned_as_a_cpu_host(tmp_path, monkeypatch, cuda):
    """A GPU host whose TensorFlow is the CPU wheel hands no GPU to its instances, so the
    processes rule goes by the cores: the sixteen-core lease (an H200 host, ``tensorflow-cpu``)
    ran every job as one process because ``/dev/nvidia0`` counted as a GPU given. A CUDA
    build there keeps one process per GPU."""
    from tfbatch.engines.local import gpu_plan

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a GPU visible to the checks on any machine
    _installed_tensorflow(monkeypatch, tmp_path, cuda)
    if cuda:
        assert gpu_plan(_spec()) == [["0"]]
        assert processes_per_instance(_spec(), 16, gpu_plan(_spec())) == 1
    else:
        assert gpu_plan(_spec(instance_count=2)) == [[], []]
        assert processes_per_instance(_spec(), 16, gpu_plan(_spec())) == 4
    assert gpu_plan(_spec(gpus_per_instance=0)) == [[]]  # none asked for: none handed out


def test_the_flag_is_a_parallelism_knob():
    spec = parse("--processes", "4")
    assert spec.processes == 4 and parse().processes is None
    assert spec.fingerprint() == parse().fingerprint()  # a resumed job may change it and keep its ledger
    with pytest.raises(Exception, match="processes"):
        parse("--processes", "0")


def test_usable_cores_follows_a_cgroup_quota(tmp_path, monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: set(range(16)))
    assert usable_cores(str(tmp_path)) == 16  # no cpu.max: the affinity
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cores(str(tmp_path)) == 16
    (tmp_path / "cpu.max").write_text("250000 100000\n")  # docker --cpus 2.5
    assert usable_cores(str(tmp_path)) == 2
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert usable_cores(str(tmp_path)) == 1
    (tmp_path / "cpu.max").write_text("6400000 100000\n")  # a quota above the affinity
    assert usable_cores(str(tmp_path)) == 16
    (tmp_path / "cpu.max").write_text("garbage")
    assert usable_cores(str(tmp_path)) == 16


def test_each_process_of_an_instance_gets_its_share_of_the_cores(monkeypatch):
    monkeypatch.setattr("tfbatch.runtime.placement.usable_cores", lambda *a: 16)
    spec = _spec(instance_count=4)
    runners = [InstanceRunner(spec, i) for i in range(4)]
    assert [r.cores() for r in runners] == [4, 4, 4, 4]
    assert [r.handler_workers() for r in runners] == [4, 4, 4, 4]
    assert InstanceRunner(_spec(), 0).cores() == 16
    assert InstanceRunner(_spec(instance_count=32), 0).cores() == 1  # never none


def test_a_planned_pass_can_be_assigned_to_more_processes_before_it_starts():
    refs = [ObjectRef(f"/in/k{i}", f"k{i}", 1) for i in range(600)]
    totals = []
    inputs = JobInputs(iter(refs), 1, {"k0"}, on_total=totals.append, page_size=100)
    four = inputs.replanned(4)
    pairs = list(four)
    assert [r for _i, r in pairs] == refs[1:] and all(i == instance_of(r.key, 4) for i, r in pairs)
    assert sum(four.skipped) == 1 and len(four.skipped) == 4 and totals == [599]
    started = JobInputs(iter(refs), 1, page_size=100)
    next(iter(started))
    with pytest.raises(ValueError, match="already under way"):
        started.replanned(2)


def _listing(refs, pages_seen):
    """``refs`` as a listing that records how many pages were asked of it."""
    for n, ref in enumerate(refs):
        if n % 100 == 0:
            pages_seen.append(n // 100)
        yield ref


def test_a_peek_counts_a_short_listing_and_hands_every_object_out_once():
    refs = [ObjectRef(f"/in/k{i}", f"k{i}", 1) for i in range(250)]
    totals = []
    inputs = JobInputs(iter(refs), 1, {"k0", "k7"}, on_total=totals.append, page_size=100)
    assert inputs.peek(1000, 10.0) == (248, 248)  # done objects do not count (nor their bytes)
    two = inputs.replanned(2)  # still not under way: the looked-at objects wait to be handed out
    pairs = list(two)
    assert sorted(r.key for _i, r in pairs) == sorted(r.key for r in refs[1:7] + refs[8:])
    # The whole listing was seen: the two processes get the same count (equal sizes), not a
    # hash's share; the done ones are still counted where their hash puts them.
    assert [sum(1 for i, _r in pairs if i == p) for p in (0, 1)] == [124, 124]
    assert totals == [248]
    assert two.skipped == [sum(1 for k in ("k0", "k7") if instance_of(k, 2) == p) for p in (0, 1)]


def test_a_peek_stops_at_its_limit_without_reading_the_rest():
    refs = [ObjectRef(f"/in/k{i}", f"k{i}", 1) for i in range(10_000)]
    pages: list[int] = []
    inputs = JobInputs(_listing(refs, pages), 1, page_size=100)
    assert inputs.peek(300, 10.0) is None  # longer than 300: not counted
    assert pages == [0, 1, 2, 3]  # 301 objects read, not the listing
    assert [r for _i, r in inputs] == refs


def test_a_listing_that_fails_while_peeked_at_fails_the_pass_at_the_same_place():
    refs = [ObjectRef(f"/in/k{i}", f"k{i}", 1) for i in range(150)]

    def listing():
        yield from refs
        raise PermissionError("AccessDenied listing s3://b/in/")

    def run(inputs):
        got = []
        with pytest.raises(PermissionError, match="AccessDenied"):
            for _i, ref in inputs:
                got.append(ref)
        return got

    peeked = JobInputs(listing(), 1, page_size=100)
    assert peeked.peek(1000, 10.0) is None  # not known: the engine's rule by cores stands
    assert run(peeked) == run(JobInputs(listing(), 1, page_size=100)) == refs[:100]  # the pages before it


def test_a_slow_listing_is_taken_as_a_long_one():
    refs = [ObjectRef(f"/in/k{i}", f"k{i}", 1) for i in range(1000)]
    now = [0.0]

    def clock():  # each page takes a second
        now[0] += 1.0
        return now[0]

    inputs = JobInputs(iter(refs), 1, page_size=100)
    assert inputs.peek(5000, 2.5, clock=clock) is None
    assert [r for _i, r in inputs] == refs
    started = JobInputs(iter(refs), 1, page_size=100)
    next(iter(started))
    with pytest.raises(ValueError, match="already under way"):
        started.peek(10, 1.0)


def test_a_workers_results_leave_in_order_in_lists_and_failures_at_once():
    from tfbatch.engines.local import _ResultBatches
    from tfbatch.transform.report import ObjectResult, RecordFailure

    class Batches(_ResultBatches):
        FLUSH_S = 3600.0  # no timed flush in this test: only the count, a failure and close
        FLUSH_AT = 3

    sent: list[list[str]] = []
    results = Batches(lambda batch: sent.append([r.key for r in batch]))
    for key in "abcd":
        results(ObjectResult(key, ok=True, records=1))
    assert sent == [["a", "b", "c"]]
    results(ObjectResult("bad", ok=False, failures=[RecordFailure("bad", None, None, "not an image")]))
    assert sent == [["a", "b", "c"], ["d", "bad"]]  # the guard sees a failure without waiting
    results(ObjectResult("e", ok=True))
    results.close()
    assert sent == [["a", "b", "c"], ["d", "bad"], ["e"]] and not results.thread.is_alive()
    results.close()  # nothing left: nothing sent
    assert len(sent) == 3


def test_the_summary_says_how_many_processes_ran_the_instances():
    from tfbatch.transform.report import JobReport

    assert "worker processes" not in JobReport(objects=1, succeeded=1).summary()
    line = JobReport(objects=1, succeeded=1, instances=1, processes=4).summary().splitlines()[0]
    assert line.endswith("; 4 worker processes for 1 instance(s)")


def test_the_engine_plans_processes_from_the_listed_bytes():
    """``processes_for_job`` as both engines call it: the peek at the listing sums the sizes,
    so ten 120 MB shards on 16 cores get 4 processes and ten 1 MB files one, and every object
    is still handed out once, to the partition of the planned count."""
    from tfbatch.engines.local import processes_for_job

    mb = 1024 * 1024

    def plan(size: int) -> tuple[int, list]:
        refs = [ObjectRef(f"/in/part-{k:05d}", f"part-{k:05d}", size) for k in range(10)]
        listed = JobInputs(iter(refs), 1)
        per, inputs = processes_for_job(_spec(), 16, [[]], None, lambda: listed)
        return per, sorted(r.key for _i, r in inputs.replanned(per))

    big, small = plan(120 * mb), plan(1 * mb)
    assert big[0] == 4 and small[0] == 1
    assert big[1] == small[1] == [f"part-{k:05d}" for k in range(10)]


def test_tensorflows_op_pool_is_the_share_of_the_cores_over_the_hops_side_by_side(monkeypatch):
    # At least MIN_LANE_THREADS hops run at once: the cores are filled by hops, one thread an op.
    from tfbatch.transform.instance import MIN_LANE_THREADS

    assert MIN_LANE_THREADS == 3
    for cores, threads in ((1, 1), (2, 1), (4, 1), (5, 1), (8, 2), (16, 5)):
        monkeypatch.setattr("tfbatch.runtime.placement.usable_cores", lambda *a, n=cores: n)
        assert InstanceRunner(_spec(), 0).intra_op_threads() == threads, cores
    monkeypatch.setattr("tfbatch.runtime.placement.usable_cores", lambda *a: 16)
    # Four instances (or processes) on the machine: each divides its own share.
    assert InstanceRunner(_spec(instance_count=4), 0).intra_op_threads() == 1
    # Fewer hops side by side: each op gets more of the share.
    assert InstanceRunner(_spec(lane_workers=1), 0).intra_op_threads() == 16
    assert InstanceRunner(_spec(max_concurrent_transforms=2), 0).intra_op_threads() == 8
    assert InstanceRunner(_spec(max_concurrent_transforms=2, lane_workers=1), 0).intra_op_threads() == 16


def _shards(sizes: list[int]) -> list[ObjectRef]:
    return [ObjectRef(f"/in/part-{k:05d}.tfrecord", f"part-{k:05d}.tfrecord", size) for k, size in enumerate(sizes)]


def _dealt(refs: list[ObjectRef], instances: int, processes: int, done=None) -> list[tuple[int, ObjectRef]]:
    inputs = JobInputs(iter(refs), instances, done)
    assert inputs.peek(10_000, 10.0) is not None
    return list(inputs.replanned(instances * processes))


def test_a_short_listing_is_dealt_to_the_processes_by_size():
    # Ten equal TFRecord shards on 4 processes: by hash they got 4, 4, 2 and 0 (the sixth
    # 16-core lease), so the job lasted 4 shards and a process idled; dealt by size, 3, 3, 2, 2.
    mb = 1024 * 1024
    shards = _shards([120 * mb] * 10)
    assert sorted(sum(1 for r in shards if instance_of(r.key, 4) == p) for p in range(4)) == [0, 2, 4, 4]
    pairs = _dealt(shards, 1, 4)
    assert [r.key for _i, r in pairs] == [r.key for r in shards]  # each once, in listing order
    assert sorted(sum(1 for i, _r in pairs if i == p) for p in range(4)) == [2, 2, 3, 3]
    # Uneven sizes: largest first, each to the process with the fewest bytes so far.
    sizes = [500, 40, 300, 300, 60, 10, 200, 100, 90, 80, 70, 5]
    pairs = _dealt(_shards(sizes), 1, 3)
    load = [sum(r.size for i, r in pairs if i == p) for p in range(3)]
    # By hand: 500 | 300 200 | 300 100 90; then 80, 70, 60, 40, 10, 5 each to the lightest.
    assert sum(load) == sum(sizes) and sorted(load) == [575, 580, 600], load
    # The same listing, the same deal (a resumed job plans as the first run did).
    assert _dealt(_shards(sizes), 1, 3) == pairs


def test_the_deal_keeps_each_object_with_its_instance():
    # Two instances of 2 processes each: an object's partition modulo the instance count is
    # still its hash's, so instance_of (progress, the console) names the instance that ran it.
    refs = _shards([1000 - 7 * k for k in range(40)])
    pairs = _dealt(refs, 2, 2)
    assert all(i % 2 == instance_of(r.key, 2) for i, r in pairs)
    for instance in (0, 1):
        mine = [r for r in refs if instance_of(r.key, 2) == instance]
        counts = sorted(sum(1 for i, _r in pairs if i == p) for p in (instance, instance + 2))
        assert sum(counts) == len(mine) and counts[1] - counts[0] <= 1


def test_objects_already_done_are_not_dealt_and_long_listings_keep_the_hash():
    refs = _shards([100] * 12)
    done = {r.key for r in refs[:5]}
    inputs = JobInputs(iter(refs), 1, done)
    assert inputs.peek(100, 10.0) == (7, 700)
    four = inputs.replanned(4)
    assert set(four.assigned) == {r.key for r in refs[5:]}
    pairs = list(four)
    assert sorted(sum(1 for i, _r in pairs if i == p) for p in range(4)) == [1, 2, 2, 2]
    assert sum(four.skipped) == 5
    # Many objects a partition: the hash's shares are even enough, no deal.
    from tfbatch.transform.plan import DEAL_MAX_PER_PARTITION

    plenty = [ObjectRef(f"/in/k{i}", f"k{i}", 1) for i in range(2 * DEAL_MAX_PER_PARTITION + 1)]
    inputs = JobInputs(iter(plenty), 1)
    assert inputs.peek(10_000, 10.0) is not None and inputs.replanned(2).assigned is None
    # A listing longer than the peek: no deal, every object by its hash, as before.
    many = [ObjectRef(f"/in/k{i}", f"k{i}", 1) for i in range(500)]
    inputs = JobInputs(iter(many), 1, page_size=100)
    assert inputs.peek(300, 10.0) is None
    four = inputs.replanned(4)
    assert four.assigned is None and all(i == instance_of(r.key, 4) for i, r in four)


def test_the_flag_also_looks_at_the_listing_so_its_processes_get_a_deal():
    from tfbatch.engines.local import processes_for_job

    mb = 1024 * 1024
    refs = _shards([120 * mb] * 10)
    listed = JobInputs(iter(refs), 1)
    per, inputs = processes_for_job(_spec(processes=4), 2, [[]], None, lambda: listed)
    assert per == 4 and inputs is listed and inputs.peeked is not None
    pairs = list(inputs.replanned(4))
    assert sorted(sum(1 for i, _r in pairs if i == p) for p in range(4)) == [2, 2, 3, 3]
