"""One input object's last stages: its answers -> error lines, retries -> assemble -> write -> record.

The dataflow (``transform/dataflow.py``) reads, splits and invokes every object; it hands
this pipeline each object's answers, in record order, through one of two doors:
``complete(ref, answered)`` for an object it held whole, ``stream(ref, answers)`` for one
it streamed (larger than it holds, or unreadable), whose answers arrive as the dataflow
reads further. Either way the output streams into an atomic write, so memory does not grow
with the object's size and a reader never sees a partial ``.out``.

A failure is confined to the records it concerns. A failed answer gets the Invoker's
retries (transient statuses) and isolation (run again unbatched, where the model call may
have held other requests' rows); a MultiRecord payload that still fails goes again in parts
or record by record (``_cut``), so that only the bad record is reported; with
AssembleWith=Line the bad record's line holds an error object so line N still answers
record N.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from tfbatch.errors import InvalidInput, TfbatchError
from tfbatch.records import (
    JOIN_MAX_BYTES,
    Assembler,
    DataProcessor,
    Payload,
    Record,
    error_line,
    form_payloads,
    iter_records,
    join_single,
    joined_outputs,
    open_input,
    split_multi_response,
)
from tfbatch.handlers.service import InvocationResponse
from tfbatch.storage import ObjectRef, atomic_write, delete, join, open_read
from tfbatch.transform.invoke import Invoker, _Call
from tfbatch.transform.ledger import Ledger
from tfbatch.transform.report import ObjectResult, RecordFailure
from tfbatch.transform.spec import TransformSpec

# A failed payload of this many records or fewer runs again one record per request; a failed
# payload of more lines, in parts of at most PART_MAX lines (ObjectPipeline._cut).
ONE_BY_ONE_MAX = 8
PART_MAX = 16
# An object's failed payloads go again together up to this many records (_expanded).
AGAIN_MAX_RECORDS = 4096


def _part(records: list[Record], payload: Payload) -> Payload:
    """``records``, some of ``payload``'s in order, as a payload of their own, formed as it was."""
    if payload.joined:
        return Payload(records, b"\n".join([r.data for r in records]), joined=True, content_type=payload.content_type)
    return Payload(records, b"".join([r.raw for r in records]), part=True)


def _batches(items: list[int], size: Callable[[int], int], limit: int) -> Iterator[list[int]]:
    """``items`` in order, in runs whose sizes add up to ``limit`` at most (an item larger than
    that alone)."""
    batch: list[int] = []
    total = 0
    for item in items:
        if batch and total + size(item) > limit:
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += size(item)
    if batch:
        yield batch


def _again_needed(entry: "_Entry") -> bool:
    """Whether an answered entry is a payload of several records that failed."""
    payload, call, _ = entry
    return len(payload.records) > 1 and (call is None or not call.response.ok)  # type: ignore[union-attr]


class _Final:
    """An answer that needs no retry or isolation (2xx), in place of an Invoker call."""

    __slots__ = ("response",)

    def __init__(self, response: InvocationResponse):
        self.response = response


# A payload, its invocation (None: it never reached the model) and the error that kept it from it.
_Entry = tuple[Payload, "_Call | _Final | None", TfbatchError | None]

# A payload, its first answer (None: it never reached the model) and the error that kept it from it.
Answer = tuple[Payload, InvocationResponse | None, TfbatchError | None]

MAX_FAILURES_KEPT = 1000  # per object; the rest are counted, so a file of bad lines cannot fill memory


def output_uri(spec: TransformSpec, key: str) -> str:
    return join(spec.output, key + ".out")


class _AbortObject(Exception):
    """Raised inside the output stream to make the atomic write leave nothing behind."""


@dataclass
class _State:
    key: str
    records: int = 0
    failed: int = 0
    outputs: int = 0
    failures: list[RecordFailure] = field(default_factory=list)
    dropped: int = 0


class _Chunks:
    """An Assembler sink the output generator drains after every record."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(data)
        return len(data)

    def drain(self) -> list[bytes]:
        parts, self.parts = self.parts, []
        return parts


class ObjectPipeline:
    def __init__(self, spec: TransformSpec, invoker: Invoker, ledger: Ledger):
        self.spec = spec
        self.invoker = invoker  # retries and isolation of failed answers, record-by-record reruns
        self.ledger = ledger
        self.processor = DataProcessor(
            spec.input_filter, spec.output_filter, spec.join_source, spec.content_type, spec.accept
        )
        self.fail_object = spec.on_error == "fail-object"
        # Set by the instance (InstanceRunner.open) when the job's SingleRecord lines may be
        # sent many to a request (records/payloads.py join_single): "csv", "jsonl" or "json".
        self.join_kind: str | None = None
        # Set by the instance where no script sees a request: every answer is the service's own
        # text, which ``joined_outputs`` may cut per record without parsing it.
        self.own_answers = False

    def payloads(self, records: Iterable[Record], key: str) -> Iterator[Payload]:
        """The object's request payloads, as BatchStrategy forms them (and join_single joins them)."""
        if self.join_kind is None:
            return form_payloads(records, self.spec.batch_strategy, self.spec.max_payload_bytes, source=key)
        limit = self.spec.max_payload_bytes or 0  # a joined request stays within MaxPayloadInMB too
        return join_single(records, self.join_kind, limit=limit, source=key,
                           max_bytes=min(limit, JOIN_MAX_BYTES) if limit else JOIN_MAX_BYTES,
                           sent_as=self.processor.filter_input if self.processor.active else None)

    def object_payloads(self, raw, key: str) -> Iterator[Payload]:
        """The payloads of the object ``raw`` reads (a binary stream): decompressed, split into
        records (an empty object with SplitType None is one bad record), formed into payloads."""
        stream = open_input(raw, self.spec.compression, source=key)
        records = iter_records(stream, self.spec.split_type, source=key, limit=self.spec.record_limit)
        if self.spec.split_type == "None":
            records = _not_empty(records, key)
        return self.payloads(records, key)

    # ---- one object -------------------------------------------------------------------

    def complete(self, ref: ObjectRef, answered: list[Answer], *, had_error_file: bool = False) -> ObjectResult:
        """An object whose payloads the dataflow already formed and invoked (or failed to form).

        Each answer goes through the same retries, isolation, per-record reruns, error lines
        and assembly, so only what failed runs again.
        """
        return self._run(ref, had_error_file, contextlib.nullcontext,
                         lambda _: self._expanded(self._settled(list(self._entries(answered)))))

    def stream(self, ref: ObjectRef, answers: Callable[..., Iterable[Answer]], *,
               had_error_file: bool = False) -> ObjectResult:
        """An object the dataflow streams: ``answers(raw)`` reads it from ``raw`` (opened here)
        and yields its answers in record order as they come; the output is written as they do,
        in bounded memory whatever the object's size. An object that cannot be opened, or
        whose stream breaks, is one failure for it (and no output)."""
        return self._run(ref, had_error_file, lambda: open_read(ref.uri, size=ref.size),
                         lambda raw: self._entries(answers(raw)))

    def _entries(self, answered: Iterable[Answer]) -> Iterator[_Entry]:
        for payload, response, error in answered:
            if response is None:
                yield payload, None, error
            elif response.ok or payload.joined:
                # A 2xx answer is final: the Invoker's retries and isolation would return it
                # as it is, so it skips the Invoker's call and Future. A joined payload that
                # failed is not retried as a whole: each record runs alone (_finish).
                yield payload, _Final(response), None
            else:
                # Retried or isolated with the body the model was sent: after the InputFilter.
                yield payload, self.invoker.answered(response, self.request_body(payload)), None

    def _settled(self, entries: list[_Entry]) -> list[_Entry]:
        """``entries`` with each call replaced by its final answer, the retries and isolated
        reruns of all of them sent together (``Invoker.results``), not one after another."""
        waiting = [n for n, entry in enumerate(entries) if type(entry[1]) is _Call]
        if not waiting:
            return entries
        finals = self.invoker.results([entries[n][1] for n in waiting])  # type: ignore[misc]
        for n, response in zip(waiting, finals):
            entries[n] = (entries[n][0], _Final(response), None)
        return entries

    def _run(self, ref: ObjectRef, had_error_file: bool, opener, entries) -> ObjectResult:
        started = time.monotonic()
        state = _State(ref.key)
        target = output_uri(self.spec, ref.key)
        sink = _Chunks()
        assembler = Assembler(self.spec.assemble_with, sink)
        written = False
        try:
            with opener() as raw:
                # Not fsynced here: the ledger's group commit makes a group's outputs durable at
                # once, before recording them as done.
                atomic_write(target, _gather_small(self._stream(entries(raw), state, assembler, sink)),
                             durable=False)
                written = True
        except _AbortObject:
            pass
        except Exception as exc:  # the object could not be read or written: one failure for it
            self._fail(state, None, None, exc)
        if not written and self.fail_object:
            delete(target)  # SageMaker's behaviour: a failed object has no output at all
        result = ObjectResult(
            key=ref.key,
            ok=state.failed == 0 and (written or not state.failures),
            records=state.records,
            failed_records=state.failed,
            output_bytes=assembler.bytes_written if written else 0,
            written=written,
            seconds=time.monotonic() - started,
            failures=state.failures,
            failures_dropped=state.dropped,
        )
        self._record(result, had_error_file)
        return result

    def _record(self, result: ObjectResult, had_error_file: bool) -> None:
        self.ledger.record(result, fail_object=self.fail_object)

    # ---- the ordered output stream ----------------------------------------------------

    def _stream(self, entries: Iterable[_Entry], state: _State, assembler: Assembler, sink: _Chunks) -> Iterator[bytes]:
        # Each entry is answered already (a failed one is retried or isolated in _finish). Its
        # outputs are held until COALESCE_BYTES of them are, then go out as a few writes: a
        # SingleRecord job's entries of a few rows each had made a write per entry, each a
        # system call that gave up the GIL and waited to take it back (profile/csv-join.md).
        pending: list[bytes] = []
        size = 0
        for entry in entries:
            state.records += len(entry[0].records)
            self._finish(*entry, state, assembler)
            parts = sink.drain()
            pending += parts
            size += sum(map(len, parts))
            if size >= COALESCE_BYTES:
                yield from _coalesce(pending)
                pending, size = [], 0
        if state.failed and assembler.outputs == 0:
            raise _AbortObject()  # every record failed: no output object, as in SageMaker
        if pending:
            yield from _coalesce(pending)

    def _start_many(self, payloads: list[Payload]) -> list[_Entry]:
        """The payloads' calls, submitted now (records run alone after their payload failed),
        many to a hop of the service (``Invoker.submit_many``): a payload of 3,000 CSV lines with
        one bad line had made 3,000 round trips to the handler workers, one a line, and a file
        with a bad line in every payload ran 20x slower than a clean one."""
        entries: list = [None] * len(payloads)
        bodies: list[tuple[int, bytes, str | None]] = []
        for n, payload in enumerate(payloads):
            if payload.error is not None:
                entries[n] = (payload, None, payload.error)
                continue
            try:
                bodies.append((n, self.request_body(payload), payload.content_type))
            except TfbatchError as exc:
                entries[n] = (payload, None, exc)
        calls = self.invoker.submit_many([(body, content_type) for _, body, content_type in bodies])
        for (n, _, _), call in zip(bodies, calls):
            entries[n] = (payloads[n], call, None)
        return entries

    def _finish(self, payload: Payload, call: _Call | _Final | None, error: TfbatchError | None, state: _State,
                assembler: Assembler) -> None:
        records = payload.records
        if call is None:
            if len(records) > 1:
                return self._again(payload, state, assembler)
            for record in records:
                self._fail_record(state, assembler, record, error)
            return
        if type(call) is _Final:
            response = call.response
        else:
            response = self.invoker.result(call)
        if not response.ok:
            if len(records) > 1:
                return self._again(payload, state, assembler)
            self._fail_record(state, assembler, records[0], _response_error(response))
            return
        if self.processor.active:
            # The whole payload joined in one pass, where its answer allows (join.py).
            rows_out = self.processor.join_payload([r.data for r in records], response.body, payload.kept)
            if rows_out is not None:
                for record, output in zip(records, rows_out):
                    if type(output) is bytes:
                        assembler.add(output)
                    else:
                        self._fail_record(state, assembler, record, output)
                return
        elif len(records) > 1 and self.own_answers:
            # No script: the answer is the service's own text (a joined request's too, as only
            # a job with no script joins), cut for all records at once.
            block = joined_outputs(response.body, len(records), assembler.assemble_with == "Line")
            if block is not None:
                assembler.add_many(block, len(records))
                return
        outputs = split_multi_response(payload, response.body)
        if outputs is None and (payload.joined or payload.part):
            # Answered per record, as each record alone would be: one by one.
            return self._again(payload, state, assembler, in_parts=False)
        if outputs is None:
            # The response cannot be cut per record: it answers the payload as a whole.
            try:
                body = self._process_output(payload.body, response.body)
            except TfbatchError as exc:
                for record in records:
                    self._fail_record(state, assembler, record, exc)
                return
            assembler.add(body)
            return
        for record, output in zip(records, outputs):
            try:
                assembler.add(self._process_output(record.data, output))
            except TfbatchError as exc:
                self._fail_record(state, assembler, record, exc)

    def _expanded(self, entries: list[_Entry]) -> Iterator[_Entry]:
        """``entries`` (answered) with each failed payload of several records replaced by its
        records' entries (``_resolved``): an object's failed payloads go again together, up to
        AGAIN_MAX_RECORDS records at a time, each batch's entries yielded before the next is
        sent, so that what goes again stays in memory about one failed 1 MB payload's at once
        (held all at once, every line of a 60 MB all-bad object: peak RSS 1.27 GB, against
        0.77 GB one payload at a time)."""
        at = 0
        for batch in _batches([n for n, entry in enumerate(entries) if _again_needed(entry)],
                              lambda n: len(entries[n][0].records), AGAIN_MAX_RECORDS):
            for n, group in zip(batch, self._resolved([entries[n][0] for n in batch], cut=True)):
                yield from entries[at:n]
                yield from group
                at = n + 1
        yield from entries[at:]

    def _again(self, payload: Payload, state: _State, assembler: Assembler, *, in_parts: bool = True) -> None:
        """A failed payload's records again, so that one bad record costs one (``_cut``)."""
        for entry in self._resolved([payload], cut=in_parts)[0]:
            self._finish(*entry, state, assembler)

    def _cut(self, payload: Payload, in_parts: bool) -> list[Payload]:
        """A failed payload's records as the payloads to send again.

        Lines (SplitType Line, or SingleRecord lines joined) go in parts of about sqrt(n) of
        them, at most ``PART_MAX``, where the payload holds more than ``ONE_BY_ONE_MAX``
        (and ``in_parts``); a part that fails is cut in turn. A line is cheap to read again
        and a request is not (a handler call, a parse, or the script's HTTP call): with a bad
        line every 100, a 3,000-line CSV payload goes again as 188 parts of 16, the ~28 that
        fail as parts of 4, and the ~30 of those that fail line by line, ~430 requests in all,
        not 3,000: the CSV jobs ran 1.6-2.7x faster (benchmarks/transform/profile/bad-records.md).
        Framed records (RecordIO, TFRecord: images, whose model rows cost more than a request)
        and the rest go one per record: in parts they ran 1.1-1.5x slower. The cut depends on
        the payload alone, so a rerun of the job answers each record the same way. A joined
        payload's records go as SingleRecord sends them."""
        records = payload.records
        lines = payload.joined or self.spec.split_type == "Line"
        if in_parts and lines and len(records) > ONE_BY_ONE_MAX and payload.sent is None \
                and all(r.error is None for r in records):
            size = min(math.isqrt(len(records) - 1) + 1, PART_MAX)
            return [_part(records[at:at + size], payload) for at in range(0, len(records), size)]
        return [Payload([r], r.data if payload.joined else r.raw, r.error) for r in records]

    def _resolved(self, failed: list[Payload], *, cut: bool) -> list[list[_Entry]]:
        """The entries of each failed payload's records, in record order: the payloads ``_cut``
        sends again (in parts where ``cut``), each part that fails cut in turn. Each level's
        requests go together, many to a hop of the service; where most of a level's parts fail,
        their records go one by one (every record bad: one request in 16 more than one by one
        at once)."""
        cuts = [self._cut(payload, cut) for payload in failed]
        level = self._settled(self._start_many([part for parts in cuts for part in parts]))
        again = [n for n, entry in enumerate(level) if _again_needed(entry)]
        below = dict(zip(again, self._resolved([level[n][0] for n in again], cut=2 * len(again) <= len(level))
                         if again else []))
        out, at = [], 0
        for parts in cuts:
            out.append([entry for n in range(at, at + len(parts)) for entry in below.get(n, [level[n]])])
            at += len(parts)
        return out

    def request_body(self, payload: Payload) -> bytes:
        """What the model is sent for ``payload``: its body after the InputFilter."""
        if payload.sent is not None:
            return payload.sent  # filtered already, row by row, when its rows were joined
        if not self.processor.active:
            return payload.body
        body, payload.kept = self.processor.filter_keeping(payload.body)
        return body

    def _process_output(self, record_data: bytes, output: bytes) -> bytes:
        if not self.processor.active:
            return output
        return self.processor.process_output(record_data, output)

    # ---- failures ---------------------------------------------------------------------

    def _fail_record(self, state: _State, assembler: Assembler, record: Record, error: BaseException) -> None:
        self._fail(state, record.index, record.offset, error)
        if self.fail_object:
            raise _AbortObject()
        if assembler.assemble_with == "Line":
            assembler.add(error_line(record, error))

    @staticmethod
    def _fail(state: _State, index: int | None, offset: int | None, error: BaseException) -> None:
        state.failed += 1
        if len(state.failures) < MAX_FAILURES_KEPT:
            state.failures.append(RecordFailure.from_exception(state.key, index, offset, error))
        else:
            state.dropped += 1


SMALL_OUTPUT_BYTES = 1024 * 1024  # an output up to this size is gathered, then written in one call
COALESCE_BYTES = 4 * 1024 * 1024  # outputs are held, and joined, into writes of about this size


def _coalesce(parts: list[bytes]) -> Iterator[bytes]:
    """Outputs (thousands of rows, each with its newline) as a few writes of up to
    ``COALESCE_BYTES``, not one per part: on a million-row CSV join the parts' writes took a
    quarter of the writer thread (benchmarks/transform/profile/csv-join.md). A part of
    ``COALESCE_BYTES`` or more goes out alone, uncopied."""
    if len(parts) == 1:
        yield parts[0]
        return
    group: list[bytes] = []
    size = 0
    for part in parts:
        if len(part) >= COALESCE_BYTES:
            if group:
                yield b"".join(group)
                group, size = [], 0
            yield part
            continue
        group.append(part)
        size += len(part)
        if size >= COALESCE_BYTES:
            yield b"".join(group)
            group, size = [], 0
    if group:
        yield b"".join(group)


def _gather_small(stream: Iterator[bytes]) -> list[bytes] | Iterator[bytes]:
    """The whole output as a list when it is small (most objects: one image, one line), else a
    stream that starts with what was gathered.

    A list takes storage's raw-descriptor write (no buffered file object, its fstat and flushes
    per object); a large output still streams, so memory stays bounded by this cap. A failure
    while gathering (every record failed, ``_AbortObject``) raises before any file exists.
    """
    parts: list[bytes] = []
    size = 0
    for part in stream:
        parts.append(part)
        size += len(part)
        if size > SMALL_OUTPUT_BYTES:
            return itertools.chain(parts, stream)
    return parts


def _not_empty(records: Iterable[Record], key: str) -> Iterator[Record]:
    """With split type None the object is the request body, and an empty body is bad input.

    (With a split type an empty object is zero records and gives an empty output.)
    """
    empty = True
    for record in records:
        empty = False
        yield record
    if empty:
        error = InvalidInput(f"{key}: empty object (0 bytes): nothing to send to the model")
        yield Record(0, 0, b"", b"", error)


def _response_error(response) -> TfbatchError:
    """The error a failed invocation carries (the service answers ``{"error": ...}``)."""
    import json

    message = response.body.decode("utf-8", errors="replace")
    try:
        value = json.loads(message)
        if isinstance(value, dict) and isinstance(value.get("error"), str):
            message = value["error"]
    except ValueError:
        pass
    err = TfbatchError(message)
    err.status = response.status  # instance attribute: keeps the HTTP status for the report
    return err
