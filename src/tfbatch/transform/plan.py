"""Planning: which objects a job reads, and which instance handles each.

An object goes to instance ``stable_hash(key) % instance_count``. The hash depends on the
key alone (not on Python's per-process hash seed, listing order or sizes), so every
instance can list the input itself and keep only its share — no coordinator ships object
lists around, and a resumed job with the same count assigns objects the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from tfbatch.storage import ObjectRef, list_manifest, list_prefix, normalize
from tfbatch.transform.spec import TransformSpec

def instance_of(key: str, instance_count: int) -> int:
    if instance_count <= 1:
        return 0
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % instance_count


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


def iter_partition(spec: TransformSpec, instance: int, instance_count: int) -> Iterator[ObjectRef]:
    for ref in iter_inputs(spec):
        if instance_of(ref.key, instance_count) == instance:
            yield ref


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


def make_plan(spec: TransformSpec, done: set[str] | None = None, *, examples: int = 3) -> Plan:
    """Walk the listing once, keeping only counts (memory does not grow with the listing)."""
    n = spec.instance_count
    plan = Plan(n, [0] * n, [0] * n, [0] * n, [[] for _ in range(n)])
    done = done or set()
    for ref in iter_inputs(spec):
        i = instance_of(ref.key, n)
        plan.objects[i] += 1
        plan.bytes[i] += ref.size or 0
        if ref.key in done:
            plan.done[i] += 1
        elif len(plan.examples[i]) < examples:
            plan.examples[i].append(ref.key)
    return plan
