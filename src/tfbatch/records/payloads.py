"""BatchStrategy: group an object's records into request payloads, and split responses back.

SingleRecord sends each record's payload with its framing stripped; MultiRecord sends as
many whole consecutive records as fit under MaxPayloadInMB with their framing kept
(COMPAT §7). A record is never split and never shares a payload with a damaged record, so
one bad record costs exactly one error, not its neighbours' results.

:func:`join_single` sends a run of SingleRecord lines (CSV, JSON Lines, JSON arrays) as
one request when the default handling reads that request as exactly those records' rows:
each record then gets the row SingleRecord would have answered, or, if the joined request
fails or its answer cannot be cut per record, its own request after all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import orjson

from tfbatch.errors import ConfigError, PayloadTooLarge, TfbatchError
from tfbatch.records.framing import Record, where
from tfbatch.records.join import is_utf8
from tfbatch.runtime import jsonenc

BATCH_STRATEGIES = ("SingleRecord", "MultiRecord")
# Keys of TFS responses that hold one row per instance, in request order.
_ROW_KEYS = ("predictions", "results")


@dataclass(slots=True)
class Payload:
    records: list[Record]
    body: bytes
    error: TfbatchError | None = None
    # SingleRecord records sent as one request (join_single): answered per record, or each
    # again alone; ``content_type`` is the joined body's when it differs from the job's.
    joined: bool = False
    content_type: str | None = None
    # The body after DataProcessing's InputFilter, where join_single already made it (to
    # judge the record joinable): the request is not filtered a second time.
    sent: bytes | None = None
    # What the InputFilter kept of each row for the join, where it read them (filter_keeping).
    kept: list | None = None
    # Some lines of a failed MultiRecord payload, sent again (ObjectPipeline._cut): answered
    # per record, or where its answer cannot be cut per record, each line again alone.
    part: bool = False

    @property
    def first_index(self) -> int:
        return self.records[0].index


def normalize_strategy(strategy: str | None) -> str:
    key = (strategy or "MultiRecord").replace("_", "").lower()
    for known in BATCH_STRATEGIES:
        if key == known.lower():
            return known
    raise ConfigError(
        f"BatchStrategy {strategy!r} is not supported: expected SingleRecord or MultiRecord"
    )


def _too_large(record: Record, size: int, limit: int, source: str) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"{where(source, record.index, record.offset)}: {size} bytes exceeds MaxPayloadInMB "
        f"({limit} bytes); a record is never split, raise MaxPayloadInMB or set it to 0"
    )


def form_payloads(
    records: Iterable[Record],
    strategy: str | None,
    max_payload_bytes: int | None,
    *,
    source: str = "",
) -> Iterator[Payload]:
    """Payloads in record order. ``max_payload_bytes`` None or 0 means unlimited."""
    kind = normalize_strategy(strategy)
    limit = max_payload_bytes or 0
    if limit < 0:
        raise ConfigError(f"MaxPayloadInMB must be >= 0, got {max_payload_bytes} bytes")
    if kind == "SingleRecord":
        return _single(records, limit, source)
    return _multi(records, limit, source)


def _single(records: Iterable[Record], limit: int, source: str) -> Iterator[Payload]:
    for record in records:
        if record.error is not None:
            yield Payload([record], record.data, record.error)
        elif limit and len(record.data) > limit:
            error = _too_large(record, len(record.data), limit, source)
            yield Payload([record], record.data, error)
        else:
            yield Payload([record], record.data)


def _multi(records: Iterable[Record], limit: int, source: str) -> Iterator[Payload]:
    batch: list[Record] = []
    size = 0
    for record in records:
        n = record.raw_size
        if record.error is not None or (limit and n > limit):
            if batch:
                yield _join(batch)
                batch, size = [], 0
            error = record.error or _too_large(record, n, limit, source)
            yield Payload([record], record.raw, error)
            continue
        if limit and size + n > limit and batch:
            yield _join(batch)
            batch, size = [], 0
        batch.append(record)
        size += n
    if batch:
        yield _join(batch)


def _join(batch: list[Record]) -> Payload:
    body = batch[0].raw if len(batch) == 1 else b"".join(r.raw for r in batch)
    return Payload(batch, body)


JOIN_KINDS = ("csv", "jsonl", "json")
# Records per joined request: a failed one runs this many alone. 32 to 5,000 ran the same
# (100,000 CSV lines: 3.3-4.1 s a job), so the smaller end, which a bad record costs least.
JOIN_MAX_RECORDS = 64
JOIN_MAX_BYTES = 1024 * 1024
JSONLINES = "application/jsonlines"
# An integer of 16 or more digits (2**53 has 16) may change when a row of floats joins it in
# one array: such records are sent alone.
_LONG_INTEGER = re.compile(rb"(?<![0-9.])[0-9]{16,}(?![0-9.eE])")
# Looked for only where 16 digits stand in a row, found as 16 zeros once every digit is "0":
# ~1.5 us for a CSV line of 32 floats, where the expression alone took ~23 (it tries each byte).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_SIXTEEN_DIGITS = b"0" * 16
_REQUEST_KEYS = (b'"instances"', b'"inputs"', b'"examples"')
_BLANK = b" \t\x0b\x0c\x1c\x1d\x1e\x1f"  # what str.strip() removes in ASCII, but line breaks
# A line of blanks between two newlines: the expression tries only where a newline stands,
# ~0.13 us a CSV line of 32 floats where deleting the blanks and looking for "\n\n" took 0.5.
_BLANK_LINE = {also: re.compile(rb"\n[" + re.escape(_BLANK + also) + rb"]*\n") for also in (b"", b",")}
# Line breaks of str.splitlines() besides "\n" (the JSON Lines reader's), as ASCII and, only
# in text that is not ASCII, as UTF-8 (handlers/defaults.py reads JSON Lines by the same list).
ASCII_LINE_BREAKS = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e")
UTF8_LINE_BREAKS = ("\x85".encode(), "\u2028".encode(), "\u2029".encode())
_LINE_BREAKS = ASCII_LINE_BREAKS + UTF8_LINE_BREAKS


def joinable(data: bytes, kind: str) -> bool:
    """Whether ``data``, one SingleRecord line, reads as exactly one row (or none: a blank
    row shortens the joined answer, so the records run alone) in a request of many lines,
    and as the same values there as alone, for a signature whose inputs are all numbers.
    Lines seen to be blank are not joined, so that they do not cost their run a rerun.

    ``csv``: no quotes (a quote can run across lines) and no ``\r``; ``jsonl``: no line break
    the JSON Lines reader would split at; ``json``: that, and one instance to the default
    handling (:func:`_one_json_instance`). Neither may hold ``true``/``false`` (booleans become
    numbers beside numbers) or a 16-digit integer. A line holding a newline of its own is not.
    The same checks judge a group of lines at once (:func:`_all_joinable`).
    """
    return _all_joinable(data, 1, kind)


def _long_integer(data: bytes) -> bool:
    """Whether ``data`` holds an integer of 16 or more digits (not a float's digits)."""
    return _SIXTEEN_DIGITS in data.translate(_DIGITS_AS_ZERO) and _LONG_INTEGER.search(data) is not None


def _one_json_instance(data: bytes) -> bool:
    """An ``application/json`` line the default handling wraps as one instance: an array that
    does not open with two brackets (that is a list of instances), or an object with none of
    the keys that make it a request of its own (an escape could spell one)."""
    text = data.lstrip(b" \t")
    head = text[:1]
    if head == b"[":
        return text[1:].lstrip(b" \t")[:1] != b"["
    return head == b"{" and b"\\" not in data and not any(key in data for key in _REQUEST_KEYS)


def join_single(records: Iterable[Record], kind: str, *, limit: int = 0, source: str = "",
                max_records: int = JOIN_MAX_RECORDS, max_bytes: int = JOIN_MAX_BYTES,
                sent_as: Callable[[bytes], bytes] | None = None) -> Iterator[Payload]:
    """SingleRecord payloads of ``records`` (``form_payloads``'s, ``limit`` its MaxPayloadInMB)
    with runs of :func:`joinable` records joined into one request each (``joined``), in record
    order; any other payload (a bad record, one that is not joinable) as SingleRecord makes it,
    between the runs. ``kind`` is one of ``JOIN_KINDS``: a run of JSON arrays becomes a JSON
    Lines body. ``sent_as``: what a record's body becomes before it is sent (DataProcessing's
    InputFilter, applied to the joined body row by row), so that is what must be joinable; a
    record it refuses is sent alone, to fail there. For ``csv`` and ``jsonl``, ``sent_as`` of
    lines joined by newlines must be their own results joined so (``DataProcessor.filter_input``
    reads such a body row by row): a group whose lines all pass is filtered in one call.

    Up to ``max_records`` records (``max_bytes`` of lines) are judged as one group, on their
    joined bytes at once (:func:`_all_joinable`); only a group that fails that is judged line
    by line. Each line's own checks, and a payload made for each record before it was joined,
    had taken most of the dataflow thread's time on a million-row SingleRecord CSV job
    (benchmarks/transform/profile/single-groups.md).
    """
    if kind not in JOIN_KINDS:
        raise ValueError(f"unknown join kind {kind!r}")
    content_type = JSONLINES if kind == "json" else None
    group: list[Record] = []
    size = 0
    for record in records:
        data = record.data
        if record.error is None and not (limit and len(data) > limit):
            if group and (len(group) >= max_records or size + len(data) > max_bytes):
                yield from _join_group(group, kind, sent_as, content_type)
                group, size = [], 0
            group.append(record)
            size += len(data) + 1
            continue
        if group:
            yield from _join_group(group, kind, sent_as, content_type)
            group, size = [], 0
        yield from _single((record,), limit, source)
    if group:
        yield from _join_group(group, kind, sent_as, content_type)


def _join_group(group: list[Record], kind: str, sent_as: Callable[[bytes], bytes] | None,
                content_type: str | None) -> list[Payload]:
    """The group as one request where every line may join, else line by line: runs of the
    lines that may, each other line alone between them."""
    filtered = sent_as is not None
    if len(group) > 1:
        body = b"\n".join([r.data for r in group])
        sent = _group_sent(body, len(group), kind, sent_as)
        if sent is not None:
            return [Payload(group, body, joined=True, content_type=content_type, sent=sent if filtered else None)]
    out: list[Payload] = []
    run: list[Record] = []
    sents: list[bytes] = []
    for record in group:
        one = _group_sent(record.data, 1, kind, sent_as)
        if one is not None:
            run.append(record)
            sents.append(one)
            continue
        if run:
            out.append(_joined(run, sents, content_type, filtered))
            run, sents = [], []
        out.append(Payload([record], record.data))
    if run:
        out.append(_joined(run, sents, content_type, filtered))
    return out


def _group_sent(body: bytes, n: int, kind: str, sent_as: Callable[[bytes], bytes] | None) -> bytes | None:
    """What ``body``, ``n`` lines joined by newlines, is sent as when every line may join (and
    each, after ``sent_as``, still may), else None; a line alone is judged as ``n`` = 1. No check
    can match across the newline between two lines, so a group passes exactly when each of its
    lines passes alone."""
    if not _all_joinable(body, n, kind):
        return None
    if sent_as is None:
        return body
    if kind == "csv" and not is_utf8(body):
        return None  # the filter reads a joined request's rows as UTF-8 text: alone, as before
    try:
        if kind == "json":  # an application/json line is one document: filtered alone
            sent = b"\n".join([sent_as(line) for line in body.split(b"\n")])
        else:
            sent = sent_as(body)
    except TfbatchError:
        return None
    if kind == "csv":
        # The InputFilter keeps whole cells of joinable rows, each with its own bytes between
        # commas: no quote, carriage return or 16-digit integer can appear; a row may be blank.
        return sent if sent.count(b"\n") == n - 1 and not _blank_line(sent, b",") else None
    return sent if _all_joinable(sent, n, kind) else None


def _all_joinable(body: bytes, n: int, kind: str) -> bool:
    """Whether each of the ``n`` lines joined by newlines into ``body`` is :func:`joinable`,
    judged on ``body`` once: no check can match across the newline between two lines, and a
    line holding a newline of its own is not joinable."""
    if body.count(b"\n") != n - 1 or _blank_line(body, b"," if kind == "csv" else b"") or _long_integer(body):
        return False
    if kind == "csv":
        return b'"' not in body and b"\r" not in body
    if b"true" in body or b"false" in body or any(mark in body for mark in _LINE_BREAKS):
        return False
    return kind != "json" or all(_one_json_instance(line) for line in body.split(b"\n"))


def _blank_line(body: bytes, also: bytes) -> bool:
    """Whether some line of ``body`` holds only blanks (and bytes of ``also``, b"," or b"")."""
    return _BLANK_LINE[also].search(b"\n" + body + b"\n") is not None


def _joined(run: list[Record], sents: list[bytes], content_type: str | None, filtered: bool) -> Payload:
    """The run as one request; with an InputFilter, its rows as already filtered: what the
    filter makes of the joined body, row by row (``DataProcessor.filter_input``)."""
    if len(run) == 1:
        return Payload(run, run[0].data, sent=sents[0] if filtered else None)
    return Payload(run, b"\n".join([r.data for r in run]), joined=True, content_type=content_type,
                   sent=b"\n".join(sents) if filtered else None)


def split_multi_response(payload: Payload, response: bytes) -> list[bytes] | None:
    """One output per record of a MultiRecord payload, or None when that cannot be told.

    Understood shapes: a JSON object whose ``predictions`` (or ``results``) list has one row
    per record -> each part is the same object holding that one row (what SingleRecord would
    have returned); otherwise a response with exactly one line per record -> the lines, each
    keeping its newline so that concatenating the parts gives back the response.
    """
    n = len(payload.records)
    if n == 1:
        return [response]
    parts = _split_json_rows(response, n)
    if parts is not None:
        return parts
    return _split_lines(response, n)


def _split_json_rows(response: bytes, n: int) -> list[bytes] | None:
    head = response[:64].lstrip()
    if not head.startswith(b"{"):
        return None
    try:
        value = jsonenc.loads(response)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    non_finite = b"NaN" in response or b"Infinity" in response
    for key in _ROW_KEYS:
        rows = value.get(key)
        if isinstance(rows, list) and len(rows) == n:
            rest = {k: v for k, v in value.items() if k != key}
            if non_finite:
                # Encoding the parsed rows again would write NaN as null: the answer's own
                # text is cut instead, or the records are answered one by one.
                return _cut_text(response, key, n) if not rest else None
            if not rest:
                parts = _cut_rows(key, rows)
                if parts is not None:
                    return parts
            # Same encoder as the service, so a split row is byte-identical to a SingleRecord answer.
            return [jsonenc.dumps({**rest, key: [row]}) for row in rows]
    return None


def _cut_rows(key: str, rows: list) -> list[bytes] | None:
    """``jsonenc.dumps({key: [row]})`` for every row, from one encoding of all the rows.

    The encoder writes a list compactly as ``[`` + its items' texts joined by ``,`` + ``]``,
    each item written as it would be alone. When no item holds a string and every item is a
    number or a flat list of numbers, the items' texts are cut apart at ``],[`` (or ``,``)
    and each is wrapped as the one-row answer, byte for byte what encoding each row alone
    gives, with one encoder call instead of one per record. None: some other shape.
    """
    try:
        text = orjson.dumps(rows)  # what jsonenc.dumps writes of parsed JSON, unless it must fall back
    except TypeError:  # an integer past 64 bits: the standard library writes that row's answer
        return None
    if b'"' in text or b"{" in text:
        return None
    head = b'{"' + key.encode() + b'":['
    n = len(rows)
    depth = text.count(b"[")
    if depth == 1:  # numbers: "[1.5,2,...]"
        items = text[1:-1].split(b",")
        if len(items) == n:
            return [head + item + b"]}" for item in items]
        return None
    if depth == n + 1 and text.startswith(b"[[") and text.endswith(b"]]"):  # flat lists: "[[1,2],[3,4]]"
        items = text[2:-2].split(b"],[")
        if len(items) == n:
            return [head + b"[" + item + b"]]}" for item in items]
    return None


def _cut_text(response: bytes, key: str, n: int) -> list[bytes] | None:
    """``{"<key>":[row]}`` per row, cut from the answer's own compact text (as tfbatch's encoder
    writes it: rows of numbers, ``NaN`` and ``Infinity``, no strings or objects), or None."""
    head = b'{"' + key.encode() + b'":['
    if not (response.startswith(head) and response.endswith(b"]}")):
        return None
    body = response[len(head):-2]
    if b'"' in body or b"{" in body or b" " in body:
        return None
    depth = body.count(b"[")
    if depth == 0:  # numbers: "1.5,NaN,..."
        items = body.split(b",")
        return [head + item + b"]}" for item in items] if len(items) == n else None
    if depth == n and body.startswith(b"[") and body.endswith(b"]") and body.count(b"]") == n:  # flat rows
        items = body[1:-1].split(b"],[")
        if len(items) == n:
            return [head + b"[" + item + b"]]}" for item in items]
    return None


def joined_outputs(response: bytes, n: int, line: bool) -> bytes | None:
    """The outputs of the ``n`` records of a request the service answered itself (a joined
    SingleRecord request, or a MultiRecord payload with no script), as one bytes: each
    record's one-row answer, what ``split_multi_response`` gives it, each followed by a
    newline where ``line`` (AssembleWith=Line). Cut from the answer's text in a few C calls,
    not parsed, written again and cut per record; None where the text is not tfbatch's own
    compact ``{"predictions": [...]}`` (or ``"results"``) of one number or one flat list of
    numbers per record (the caller then splits it).

    The service's encoder writes each row as it writes it alone, so a record's part is the
    answer its row gets in a request of its own (property-tested), byte for byte."""
    for key in _ROW_KEYS:
        head = b'{"' + key.encode() + b'":['
        if response.startswith(head):
            break
    else:
        return None
    if not response.endswith(b"]}"):
        return None
    body = response[len(head):-2]
    if b'"' in body or b"{" in body or b" " in body or b"\n" in body:
        return None
    tail = b"]}\n" if line else b"]}"
    depth = body.count(b"[")
    if depth == 0:  # numbers: "1.5,NaN,..."
        if not body or body.count(b",") != n - 1:
            return None
        return head + body.replace(b",", tail + head) + tail
    if depth == n and body.startswith(b"[") and body.endswith(b"]") and body.count(b"]") == n \
            and body.count(b"],[") == n - 1:  # flat rows: "[1,2],[3,4]"
        return head + body.replace(b"],[", b"]" + tail + head + b"[") + tail
    return None


def _split_lines(response: bytes, n: int) -> list[bytes] | None:
    # Only \n separates records (bytes.splitlines would also break on \r, \v, \x1c...).
    pieces = response.split(b"\n")
    lines = [p + b"\n" for p in pieces[:-1]]
    if pieces[-1]:
        lines.append(pieces[-1])
    return lines if len(lines) == n else None
