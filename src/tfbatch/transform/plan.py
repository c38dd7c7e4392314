"""Planning: which objects a job reads, and which instance handles each.

An object goes to instance ``stable_hash(key) % instance_count`` (64-bit BLAKE2b, unchanged
so that partitions, and the batches formed within them, stay what they were). The hash depends on the
key alone (not on Python's per-process hash seed, listing order or sizes), so a resumed job
with the same count assigns objects the same way.

A job lists its input once: ``JobInputs`` is that single pass, done keys dropped and each
remaining object tagged with its instance; the engines stream it to their instances in
bounded chunks (``iter_chunks``) instead of letting every instance list the prefix again.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import NamedTuple

import numpy as np

from tfbatch.storage import ObjectRef, list_manifest, list_prefix, normalize
from tfbatch.storage.listing import DEFAULT_PAGE_SIZE
from tfbatch.transform.keyindex import KeyIndex, local_hashes, partition_hash, partition_hashes
from tfbatch.transform.spec import TransformSpec

def instance_of(key: str, instance_count: int) -> int:
    if instance_count <= 1:
        return 0
    return partition_hash(key) % instance_count


def iter_inputs(spec: TransformSpec, *, page_size: int | None = None) -> Iterator[ObjectRef]:
    """Every input object, streamed (prefix order, or manifest order).

    Objects under the output location are skipped, so an output folder nested inside the
    input prefix does not feed a re-run its own ``.out`` files and ledger. ``page_size``
    sets the prefix listing's page (the Ray driver starts work after the first page).
    """
    if spec.manifest:
        refs = list_manifest(spec.manifest)
    else:
        pages = {} if page_size is None else {"page_size": page_size}
        refs = list_prefix(spec.input, follow_symlinks=spec.follow_symlinks, **pages)
    out_prefix = normalize(spec.output).rstrip("/") + "/"
    for ref in refs:
        if ref.uri.startswith(out_prefix):
            continue
        yield ref


PAGE = 1024
# Above this many objects a partition, a short listing is still dealt by hash: the hash's
# shares are within a few per cent of each other there, and dealing costs Python per object.
DEAL_MAX_PER_PARTITION = 1000


def _pages(refs: Iterable[ObjectRef], size: int = PAGE) -> Iterator[list[ObjectRef]]:
    it = iter(refs)
    while page := list(islice(it, size)):
        yield page


def iter_assigned_pages(refs: Iterable[ObjectRef], instance_count: int, done=None, *, page_size: int = PAGE
                        ) -> Iterator[tuple[list[ObjectRef], np.ndarray, np.ndarray]]:
    """``(page, instance per ref, done per ref)``, a page of the listing at a time.

    The per-page arrays let callers count and filter without a Python step per key; the
    only per-key Python work left is one BLAKE2b call (partition and done index share it).
    """
    n = max(1, instance_count)
    index = isinstance(done, KeyIndex) and bool(done)
    for page in _pages(refs, page_size):
        keys = [ref.key for ref in page] if n > 1 or done else None
        hashed = partition_hashes(keys) if n > 1 or index else None
        instances = (hashed % np.uint64(n)).astype(np.int64) if n > 1 else np.zeros(len(page), dtype=np.int64)
        if not done:
            flags = np.zeros(len(page), dtype=bool)
        elif index:  # one vectorised lookup per page
            flags = done.contains_hashes(hashed, local_hashes(keys))
        elif hasattr(done, "contains_many"):
            flags = np.asarray(done.contains_many(keys), dtype=bool)
        else:
            flags = np.fromiter((key in done for key in keys), dtype=bool, count=len(keys))
        yield page, instances, flags


def iter_assigned(refs: Iterable[ObjectRef], instance_count: int, done=None) -> Iterator[tuple[int, ObjectRef, bool]]:
    """(instance, ref, already done) for every listed object, streamed page by page."""
    for page, instances, flags in iter_assigned_pages(refs, instance_count, done):
        yield from zip(instances.tolist(), page, flags.tolist())


class Partition:
    """One instance's objects still to run, streamed; ``skipped`` counts those already done."""

    def __init__(self, refs: Iterable[ObjectRef], instance: int, instance_count: int, done=None):
        self.refs, self.instance, self.instance_count, self.done = refs, instance, instance_count, done
        self.skipped = 0

    def __iter__(self) -> Iterator[ObjectRef]:
        for i, ref, is_done in iter_assigned(self.refs, self.instance_count, self.done):
            if i != self.instance:
                continue
            if is_done:
                self.skipped += 1
                continue
            yield ref


class Todo(NamedTuple):
    """What a job still has to run, as :meth:`JobInputs.peek` found it."""

    objects: int
    bytes: int


class JobInputs:
    """The job's one listing pass: ``(instance, ref)`` for every object still to run.

    Objects the ledger records as done are counted in ``skipped`` (per instance) and not
    yielded. ``on_total`` receives the number of objects to run once the listing is
    exhausted, so a progress bar gets its total without a second pass over the input.
    Iterate it once.
    """

    def __init__(self, refs: Iterable[ObjectRef], instance_count: int, done=None, on_total=None, *,
                 page_size: int = DEFAULT_PAGE_SIZE, assigned: dict[str, int] | None = None):
        self.refs, self.instance_count, self.done, self.on_total = refs, max(1, instance_count), done, on_total
        # Keys are assigned a listing page at a time, never more: work starts after the first page.
        self.page_size = page_size
        self.skipped = [0] * self.instance_count
        self.listed = 0
        self.exhausted = False
        # Where ``peek`` saw the whole listing: its objects still to run, in listing order.
        self.peeked: list[ObjectRef] | None = None
        # Objects placed by ``replanned`` (key -> partition); every other key by its hash.
        self.assigned = assigned

    @classmethod
    def for_spec(cls, spec: TransformSpec, done=None, *, page_size: int | None = None, on_total=None) -> "JobInputs":
        size = page_size or DEFAULT_PAGE_SIZE
        return cls(iter_inputs(spec, page_size=size), spec.instance_count, done, on_total, page_size=size)

    def replanned(self, instance_count: int) -> "JobInputs":
        """The same pass (not started yet) assigned to ``instance_count`` instances instead.

        Where ``peek`` saw the whole listing and each instance is split into processes
        (``instance_count`` a multiple of this pass's), the objects still to run are dealt out
        by size (``balanced``), not by hash: a hash partition of ten TFRecord shards over 4
        processes gave them 4, 4, 2 and 0 shards (16 cores, profile/sixteen-cores.md), and the
        job lasted as long as the 4. Each object stays with its instance's processes (its
        partition modulo the instance count is its hash's), so ``instance_of`` still names it.
        Many objects (a listing longer than the peek, or more than ``DEAL_MAX_PER_PARTITION``
        a partition) are dealt by hash as before, which is even enough at that count.
        """
        if self.listed or self.exhausted:
            raise ValueError("a listing pass already under way cannot be assigned again")
        assigned = None
        if (self.peeked is not None and instance_count > self.instance_count
                and instance_count % self.instance_count == 0
                and len(self.peeked) <= DEAL_MAX_PER_PARTITION * instance_count):
            assigned = balanced(self.peeked, self.instance_count, instance_count // self.instance_count)
        return JobInputs(self.refs, instance_count, self.done, self.on_total, page_size=self.page_size,
                         assigned=assigned)

    def peek(self, limit: int, seconds: float, clock=time.monotonic) -> "Todo | None":
        """How many objects the job still has to run, and their bytes (as listed; an object of
        unknown size counts 0), if the listing ends within its first ``limit`` objects and
        ``seconds`` (checked between listing pages); else None.

        The objects looked at are kept and handed out first when the pass runs, so the
        listing is still made once. Call it before the pass starts (and before ``replanned``).
        """
        if self.listed or self.exhausted:
            raise ValueError("a listing pass already under way cannot be peeked at")
        it = iter(self.refs)
        seen: list[ObjectRef] = []
        start = clock()
        ended = False
        try:
            while len(seen) <= limit:
                before = len(seen)
                seen.extend(islice(it, min(self.page_size, limit + 1 - before)))
                if len(seen) == before:
                    ended = True
                    break
                if clock() - start > seconds:
                    break
        except Exception as exc:  # noqa: BLE001 - the pass meets the listing's error where it happened
            it = _failing(exc)
        self.refs = chain(seen, it)
        if not ended:
            return None
        # Objects the ledger records as done do not count (a resumed job may have few left).
        objects = size = 0
        self.peeked = []
        for page, _i, flags in iter_assigned_pages(seen, 1, self.done):
            todo = [page[j] for j in np.flatnonzero(~flags).tolist()]
            self.peeked.extend(todo)
            objects += len(todo)
            size += sum(ref.size or 0 for ref in todo)
        return Todo(objects, size)

    def __iter__(self) -> Iterator[tuple[int, ObjectRef]]:
        for instances, page in self.pages():
            yield from zip(instances.tolist(), page)

    def pages(self) -> Iterator[tuple[np.ndarray, list[ObjectRef]]]:
        """The same pass a listing page at a time: ``(instance per ref, refs still to run)``."""
        todo = 0
        n = self.instance_count
        assigned = self.assigned
        for page, instances, flags in iter_assigned_pages(self.refs, n, self.done, page_size=self.page_size):
            self.listed += len(page)
            if assigned:
                instances = np.fromiter((assigned.get(ref.key, i) for ref, i in zip(page, instances.tolist())),
                                        dtype=np.int64, count=len(page))
            if flags.any():
                for i, count in enumerate(np.bincount(instances[flags], minlength=n).tolist()):
                    self.skipped[i] += count
                run = np.flatnonzero(~flags)
                page, instances = [page[j] for j in run.tolist()], instances[run]
            todo += len(page)
            yield instances, page
        self.exhausted = True
        if self.on_total is not None:
            self.on_total(todo)


def balanced(refs: list[ObjectRef], instance_count: int, per: int) -> dict[str, int]:
    """Each of ``refs`` (distinct keys) to one of ``instance_count * per`` partitions, the
    ``per`` of each instance evened out by listed bytes: largest first, each to the partition
    of its instance with the fewest bytes so far (then the fewest objects, then the lowest
    number). An object stays with its hash's instance (partition % instance_count). The same
    listing always gives the same assignment. Objects of unknown size count 0 bytes, so they
    even out by number."""
    total = instance_count * per
    hashes = partition_hashes([ref.key for ref in refs]).tolist() if refs else []
    order = sorted(range(len(refs)), key=lambda j: (-(refs[j].size or 0), hashes[j], refs[j].key))
    load = [(0, 0)] * total  # (bytes, objects) per partition
    assigned: dict[str, int] = {}
    for j in order:
        first = hashes[j] % instance_count
        part = min(range(first, total, instance_count), key=lambda p: (load[p], p))
        assigned[refs[j].key] = part
        load[part] = (load[part][0] + (refs[j].size or 0), load[part][1] + 1)
    return assigned


def _failing(exc: BaseException) -> Iterator[ObjectRef]:
    raise exc
    yield  # a generator: the error comes when the pass reaches it


def _pair_pages(pairs: Iterable[tuple[int, ObjectRef]], instance_count: int, page_size: int
                ) -> Iterator[tuple[np.ndarray, list[ObjectRef]]]:
    """A plain ``(instance, ref)`` stream in the page form of :meth:`JobInputs.pages`."""
    instances: list[int] = []
    refs: list[ObjectRef] = []
    for i, ref in pairs:
        if not 0 <= i < instance_count:
            raise ValueError(f"object {ref.key!r} is assigned to instance {i} of {instance_count}")
        instances.append(i)
        refs.append(ref)
        if len(refs) >= page_size:
            yield np.asarray(instances), refs
            instances, refs = [], []
    if refs:
        yield np.asarray(instances), refs


def iter_chunks(pairs: Iterable[tuple[int, ObjectRef]], instance_count: int, size: int = 256
                ) -> Iterator[tuple[int, list[ObjectRef]]]:
    """``(instance, chunk)`` from an assigned stream: each chunk holds up to ``size`` of that
    instance's objects in listing order; the last, partial chunks come once the stream ends."""
    buffers: list[list[ObjectRef]] = [[] for _ in range(max(1, instance_count))]
    if isinstance(pairs, JobInputs):
        if pairs.instance_count != len(buffers):
            raise ValueError(f"inputs planned for {pairs.instance_count} instances, chunked for {len(buffers)}")
        pages = pairs.pages()
    else:
        # Pages of one chunk's length: a single instance's chunks still leave as soon as they fill.
        pages = _pair_pages(pairs, len(buffers), size)
    # A page at a time: an instance's refs are picked out with one numpy mask, not a Python
    # step per key (at 10M keys that step was a tenth of the pass).
    for instances, page in pages:
        for i, buffer in enumerate(buffers):
            if len(buffers) == 1:
                buffer.extend(page)
            else:
                buffer.extend([page[j] for j in np.flatnonzero(instances == i).tolist()])
            while len(buffer) >= size:
                yield i, buffer[:size]
                del buffer[:size]
    for i, buffer in enumerate(buffers):
        if buffer:
            yield i, buffer


def refs_from_chunks(chunks: Iterable[list[ObjectRef]]) -> Iterator[ObjectRef]:
    for chunk in chunks:
        yield from chunk


def iter_partition(spec: TransformSpec, instance: int, instance_count: int, done=None) -> Partition:
    return Partition(iter_inputs(spec), instance, instance_count, done)


@dataclass
class Plan:
    """Counts per instance, for ``--dry-run`` and the progress bar's totals."""

    instance_count: int
    objects: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    examples: list[list[str]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.objects)

    @property
    def todo(self) -> int:
        return self.total - sum(self.done)

    def describe(self, spec: TransformSpec) -> str:
        source = f"manifest {spec.manifest}" if spec.manifest else f"input {spec.input}"
        lines = [
            f"plan: {self.total} objects from {source} -> {spec.output} "
            f"({sum(self.done)} already done, {self.todo} to run)",
            f"  split {spec.split_type}, {spec.batch_strategy}, MaxPayloadInMB {spec.max_payload_mb}, "
            f"{spec.concurrency} concurrent invocations per instance, model batches up to {spec.max_batch_size}",
        ]
        for i in range(self.instance_count):
            shown = ", ".join(self.examples[i])
            more = " ..." if self.objects[i] > len(self.examples[i]) else ""
            lines.append(
                f"  instance {i}: {self.objects[i]} objects, {self.bytes[i]} bytes, {self.done[i]} done"
                + (f" [{shown}{more}]" if shown else "")
            )
        return "\n".join(lines)


def make_plan(spec: TransformSpec, done=None, *, examples: int = 3,
              refs: Iterable[ObjectRef] | None = None) -> Plan:
    """Walk the listing once, keeping only counts (memory does not grow with the listing)."""
    n = spec.instance_count
    plan = Plan(n, [0] * n, [0] * n, [0] * n, [[] for _ in range(n)])
    for i, ref, is_done in iter_assigned(iter_inputs(spec) if refs is None else refs, n, done):
        plan.objects[i] += 1
        plan.bytes[i] += ref.size or 0
        if is_done:
            plan.done[i] += 1
        elif len(plan.examples[i]) < examples:
            plan.examples[i].append(ref.key)
    return plan
