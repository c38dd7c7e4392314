"""DataProcessing: InputFilter, JoinSource and OutputFilter, per record (COMPAT §7).

Facts from the SageMaker developer guide ("Associate Prediction Results with Input
Records") and the DataProcessing API reference, encoded here:
- only CSV, JSON and JSON Lines are supported; a CSV row is treated as a JSON array, so
  only index paths (``$[0]``, ``$[1:]``) apply to it;
- the join uses the *raw* input record, not the filtered one;
- CSV: the output row is appended to the end of the input row (``[1,2,3]`` + ``[1]`` ->
  ``1,2,3,1``);
- JSON / JSON Lines: an input object gets the output under ``SageMakerOutput`` (an input
  key of that name is overwritten); any other input becomes
  ``{"SageMakerInput": input, "SageMakerOutput": output}``;
- OutputFilter selects from the joined value (from the output alone without a join).

tfbatch additions: a record holding several CSV / JSON Lines rows (SplitType None) is
processed row by row, paired with the output's rows; and because the TFS container
answers JSON even for CSV requests, a CSV join unwraps ``{"predictions": [row]}`` and
appends the row's values as columns instead of splitting the JSON text on commas.
"""

from __future__ import annotations

import csv
import io
import json
import operator
from typing import Any

import orjson

from tfbatch.errors import ConfigError, InvalidInput, TfbatchError
from tfbatch.records.jsonpath import JsonPath, compile_path
from tfbatch.runtime import jsonenc

CSV, JSON, JSONL = "csv", "json", "jsonlines"
_KINDS = {
    "text/csv": CSV,
    "application/csv": CSV,
    "application/json": JSON,
    "application/jsonlines": JSONL,
    "application/x-jsonlines": JSONL,
    "application/jsonl": JSONL,
    "application/json-lines": JSONL,
}
_ROW_KEYS = ("predictions", "results", "outputs")
# Words in a model answer's JSON text that are not numbers or the brackets and commas between them.
_NOT_NUMBERS = (b'"', b"{", b"null", b"true", b"false", b"NaN", b"Infinity")


def content_kind(content_type: str | None) -> str | None:
    """csv, json, jsonlines, or None for anything DataProcessing cannot read."""
    if not content_type:
        return None
    return _KINDS.get(content_type.split(";", 1)[0].strip().lower())


def normalize_join_source(join_source: str | None) -> bool:
    if join_source is None or join_source == "None":
        return False
    if join_source.lower() == "input":
        return True
    raise ConfigError(f"JoinSource {join_source!r} is not supported: expected None or Input")


class DataProcessor:
    def __init__(
        self,
        input_filter: str | None,
        output_filter: str | None,
        join_source: str | None,
        content_type: str | None,
        accept: str | None,
    ):
        self.input_path: JsonPath = compile_path(input_filter)
        self.output_path: JsonPath = compile_path(output_filter)
        self.join = normalize_join_source(join_source)
        self.in_kind = content_kind(content_type)
        self.out_kind = content_kind(accept) if accept else self.in_kind
        identity = self.input_path.is_identity and self.output_path.is_identity
        self.active = self.join or not identity
        self._in_picks, self._out_picks = _CsvPicks(self.input_path), _CsvPicks(self.output_path)
        # A JSON Lines join whose InputFilter reads every row and whose OutputFilter picks top-level
        # keys: the filter keeps those keys of each row it read (``filter_keeping``), so the join
        # need not read the row again.
        self._kept_keys = (self.output_path.top_keys if self.join and self.in_kind == JSONL
                           and not self.input_path.is_identity else None)
        if not self.active:
            return
        if self.in_kind is None:
            raise ConfigError(
                "DataProcessing (InputFilter, OutputFilter, JoinSource) needs ContentType "
                f"text/csv, application/json or application/jsonlines; got {content_type!r}"
            )
        touches_output = self.join or not self.output_path.is_identity
        if touches_output and self.out_kind is None:
            raise ConfigError(
                "DataProcessing OutputFilter/JoinSource needs Accept text/csv, application/json "
                f"or application/jsonlines; got {accept!r}"
            )
        if self.in_kind == CSV and not self.input_path.index_only:
            raise self._csv_paths("InputFilter", self.input_path)
        csv_result = self.in_kind == CSV if self.join else self.out_kind == CSV
        if csv_result and not self.output_path.index_only:
            raise self._csv_paths("OutputFilter", self.output_path)

    @staticmethod
    def _csv_paths(name: str, path: JsonPath) -> ConfigError:
        return ConfigError(
            f"{name} {path.expr!r} names keys, but CSV rows are arrays: use index forms such as "
            "$[0], $[1:], $[0,-1]"
        )

    # ---- input side -------------------------------------------------------------

    def filter_input(self, record_data: bytes) -> bytes:
        """The part of the record the model sees."""
        if self.input_path.is_identity:
            return record_data
        if self.in_kind == CSV and _plain_csv_line(record_data):
            # Hot path for millions of simple rows: pick columns as bytes, no decoding.
            return self._pick_plain(record_data)
        units, trailing = _units(record_data, self.in_kind)
        if self.in_kind != CSV:
            return self._filter_json_rows(record_data, units, trailing)[0]
        # Rows of a record holding several (or of SingleRecord lines sent as one request):
        # a plain row is picked as bytes too, once it is known to be UTF-8, as parsing it
        # would have checked. A payload of ASCII without quotes or carriage returns is all
        # plain rows (the usual MultiRecord payload of numbers), checked once for all.
        if units[0] and record_data.isascii() and b'"' not in record_data and b"\r" not in record_data:
            pick = self._pick_plain
            out = [pick(u) for u in units]
        else:
            out = [self._pick_plain(u) if _plain_csv_line(u) and _utf8(u) is not None
                   else _dump_csv(self.input_path.apply(_load_csv(u))) for u in units]
        return _rejoin(out, trailing)

    def filter_keeping(self, record_data: bytes) -> tuple[bytes, list | None]:
        """``filter_input``, and, where the rows were read on the way and the join needs only
        some top-level keys of each (``_kept_keys``), what it needs of each row (``_kept``) for
        ``join_payload``: the row is read once."""
        if self._kept_keys is None:
            return self.filter_input(record_data), None
        units, trailing = _units(record_data, self.in_kind)
        return self._filter_json_rows(record_data, units, trailing, keep=True)

    def _filter_json_rows(self, record_data: bytes, units: list[bytes], trailing: bool, keep: bool = False
                          ) -> tuple[bytes, list | None]:
        """``_filter_json`` of each of a record's JSON Lines rows, judged once for all of them
        where that gives the same bytes: no row may hold a long integer (one scan of the record,
        not one a row), every row must parse and hold what the InputFilter names, and the
        filtered text must be ASCII (checked on the rejoined body). Anything else, and any row
        that fails, is judged row by row, which also words the error. With ``keep``, the rows'
        ``_kept_keys`` too, where they were all read here. A record of one row is that row
        filtered alone (nothing kept: its join is a row's own).
        """
        if len(units) > 1 and not jsonenc.has_long_digits(record_data):
            loads, dumps, apply = orjson.loads, orjson.dumps, self.input_path.apply
            try:
                values = [loads(u) for u in units]
                body = _rejoin([dumps(apply(v)) for v in values], trailing)
            except (orjson.JSONDecodeError, TypeError, InvalidInput):
                pass
            else:
                if body.isascii():
                    return body, [_kept(v, self._kept_keys) for v in values] if keep else None
        return _rejoin([self._filter_json(u) for u in units], trailing), None

    def _filter_json(self, unit: bytes) -> bytes:
        """A JSON record's part the InputFilter keeps. The model is sent the same values, not
        the standard library's spelling of them (which the output side's join keeps): what
        orjson read exactly (``fast_loads``) orjson writes again, 0.9 us for a row of 32 floats
        against 2.1 for ``compact_dumps``' checks and spelling; what only the standard library
        reads (NaN, an integer past 64 bits) is written the exact way, as before, and so is text
        that is not ASCII: orjson writes it raw, and a raw U+2028 or NEL inside a string is a line
        break to the JSON Lines reader, where the standard library's escape is not."""
        value = jsonenc.fast_loads(unit)
        if value is jsonenc.UNREAD:
            return self._dump(self.input_path.apply(self._load(unit)), self.in_kind)
        picked = self.input_path.apply(value)
        try:
            out = orjson.dumps(picked)
        except TypeError:  # nesting past orjson's depth for writing
            return _dump_json(picked)
        return out if out.isascii() else _dump_json(picked)

    def _pick_plain(self, row: bytes) -> bytes:
        """The InputFilter's cells of a CSV row without quotes or line breaks, as bytes."""
        return self._in_picks.pick_row(row)

    # ---- output side ------------------------------------------------------------

    def process_output(self, record_data: bytes, output: bytes) -> bytes:
        """Join the raw record with the model's output, then apply OutputFilter."""
        if not self.join:
            if self.output_path.is_identity:
                return output
            kind, value = self._load_output(output)
            return self._dump(self.output_path.apply(value), kind)
        if self.in_kind == CSV and self.out_kind == CSV:
            line = output[:-1] if output.endswith(b"\n") else output
            line = line[:-1] if line.endswith(b"\r") else line
            if _plain_csv_line(record_data) and _plain_csv_line(line) and line[:1] not in b"{[":
                picked = self.output_path.apply(record_data.split(b",") + line.split(b","))
                return b",".join(picked) if isinstance(picked, list) else picked
        units, trailing = _units(record_data, self.in_kind)
        if len(units) == 1:
            outputs = [output]
        else:
            outputs, _ = _units(output, JSONL)
            if len(outputs) != len(units):
                raise InvalidInput(
                    f"JoinSource=Input: the record holds {len(units)} rows but the output has "
                    f"{len(outputs)} lines; cannot pair them"
                )
        joined = [self._join_one(u, o) for u, o in zip(units, outputs)]
        return _rejoin(joined, trailing)

    def join_payload(self, rows: list[bytes], response: bytes, kept: list | None = None
                     ) -> list[bytes | TfbatchError] | None:
        """``process_output`` of each of a MultiRecord payload's ``rows`` with its row of the
        payload's JSON ``response``, for all of them at once; None where that does not apply (the
        caller then splits the response per record and joins row by row, which gives the same
        bytes). A row that cannot be joined gets its error in its place.

        It applies to a join whose answer is ``{"predictions": [...]}`` (or ``"results"``) with
        one row per record and no NaN or Infinity, and to rows that are one line each (CSV:
        plain). Row by row, that answer was read, written again per record, and each record's
        part read back (benchmarks/transform/profile/csv-join.md); here it is read once, and
        each row joined with ``{key: [its answer]}``, what its part read back gave. ``kept``: what
        ``filter_keeping`` kept of each row, where it read them (the rows are not read again).
        """
        n = len(rows)
        if not self.join or n < 2 or self.in_kind is None or response[:64].lstrip()[:1] != b"{":
            return None
        text = b"\n".join(rows)
        if self.in_kind == CSV:
            # Every row plain and UTF-8, judged on the rows joined once (benchmarks/transform/profile/single-groups.md).
            if not all(rows) or text.count(b"\n") != n - 1 or b'"' in text or b"\r" in text or not is_utf8(text):
                return None
        elif self.in_kind == JSONL:
            # Each record one line, as _units finds it (a carriage return at its end dropped).
            if b"\r" in text:
                rows = [row[:-1] if row.endswith(b"\r") else row for row in rows]
                text = b"\n".join(rows)
            if not all(rows) or text.count(b"\n") != n - 1:
                return None
        if b"NaN" in response or b"Infinity" in response:
            return None
        try:
            value = jsonenc.loads(response)
        except ValueError:
            return None
        if not isinstance(value, dict) or len(value) != 1:
            return None
        key, answers = next(iter(value.items()))
        if key not in ("predictions", "results") or not isinstance(answers, list) or len(answers) != n:
            return None
        if self.in_kind == CSV:
            cut = self._join_csv_numbers(rows, answers)
            if cut is not None:
                return cut
        elif kept is not None and len(kept) == n:
            cut = self._join_read(kept, key, answers)
            if cut is not None:
                return cut
        if self.in_kind != CSV and not jsonenc.has_long_digits(text):
            return self._join_json_rows(rows, key, answers)
        out: list[bytes | TfbatchError] = []
        for row, answer in zip(rows, answers):
            try:
                out.append(self._join_value(row, JSON, {key: [answer]}))
            except TfbatchError as exc:
                out.append(exc)
        return out

    def _join_csv_numbers(self, rows: list[bytes], answers: list) -> list[bytes | TfbatchError] | None:
        """The CSV join of plain rows whose answers are numbers: the answers written once
        (``compact_dumps``, the spelling the row-by-row join writes), and each row's text, cut
        from that, is its columns. None unless every answer is one finite number, or one flat
        list of them."""
        n = len(rows)
        text = jsonenc.compact_dumps(answers)
        if any(word in text for word in _NOT_NUMBERS):
            return None
        inner = text[1:-1]
        if b"[" not in inner:  # one number per row
            cells = inner.split(b",")
        elif inner.startswith(b"[") and inner.endswith(b"]"):
            cells = inner[1:-1].split(b"],[")  # a flat list of numbers per row: its columns
            rest = b"".join(cells)
            if b"[" in rest or b"]" in rest:  # some row held a nested list, or was no list
                return None
        else:
            return None
        if len(cells) != n:
            return None
        out: list[bytes | TfbatchError] = []
        for row, tail in zip(rows, cells):  # an empty tail: an empty list answered, no columns
            try:
                out.append(self._plain_joined(row, tail, bool(tail)))
            except TfbatchError as exc:
                out.append(exc)
        return out

    def _join_read(self, sources: list, key: str, answers: list) -> list[bytes] | None:
        """The join of rows already read, each whole or as the keys the OutputFilter may pick
        (``filter_keeping``); None where the OutputFilter fails on some row (the rows are then
        read again row by row, and that row's error names the keys the whole row has)."""
        apply = self.output_path.apply
        try:
            return jsonenc.compact_dumps_many(
                [apply({**source, "SageMakerOutput": {key: [answer]}} if isinstance(source, dict)
                       else {"SageMakerInput": source, "SageMakerOutput": {key: [answer]}})
                 for source, answer in zip(sources, answers)])  # _joined, inline
        except TfbatchError:
            return None

    def _join_json_rows(self, rows: list[bytes], key: str, answers: list) -> list[bytes | TfbatchError]:
        """``_join_value`` of JSON Lines rows none of which holds a long integer (so orjson reads
        each as the standard library would, or refuses it): each row read once by orjson, the
        joined values written by ``compact_dumps_many`` (the exact spelling, checked once for
        the payload). A row orjson refuses (NaN, or not JSON) goes the row-by-row way, which
        reads it or words its error, and so does a row the OutputFilter fails on."""
        loads, apply = orjson.loads, self.output_path.apply
        try:
            sources: list[Any] = [loads(row) for row in rows]
        except orjson.JSONDecodeError:
            sources = [_UNREAD_ROW] * len(rows)
        else:
            cut = self._join_read(sources, key, answers)  # the usual payload: every row read
            if cut is not None:
                return cut
        out: list[Any] = []
        values: list[Any] = []
        at: list[int] = []
        for row, source, answer in zip(rows, sources, answers):
            value = {key: [answer]}
            try:
                if source is _UNREAD_ROW:
                    try:
                        source = loads(row)
                    except orjson.JSONDecodeError:
                        out.append(self._join_value(row, JSON, value))
                        continue
                values.append(apply(_joined(source, value)))
            except TfbatchError as exc:
                out.append(exc)
                continue
            at.append(len(out))
            out.append(None)
        for i, text in zip(at, jsonenc.compact_dumps_many(values)):
            out[i] = text
        return out

    def _plain_joined(self, row: bytes, tail: bytes, columns: bool) -> bytes:
        """A plain CSV row with its answer's columns (``tail``, their CSV text, cells between
        commas), then the OutputFilter."""
        if self.output_path.is_identity:
            return row + b"," + tail if columns else row
        return self._out_picks.pick_joined(row, tail) if columns else self._out_picks.pick_row(row)

    def _join_one(self, unit: bytes, output: bytes) -> bytes:
        kind, value = self._load_output(output)
        return self._join_value(unit, kind, value)

    def _join_value(self, unit: bytes, kind: str, value: Any) -> bytes:
        """``unit`` (one row of the record) joined with its output, read as ``value`` of ``kind``."""
        if self.in_kind == CSV:
            if kind != CSV and _plain_csv_line(unit):
                # The common CSV join (a plain row, a JSON answer): the row's own bytes are what
                # splitting and re-joining it would write, and the answer's columns are written
                # once; where none needed quoting and none is an array or object (which an
                # OutputFilter that picks it alone reads as a row), each is one cell between commas.
                _utf8(unit)
                columns = _as_columns(value)
                tail = _dump_csv(columns) if columns else b""
                if self.output_path.is_identity or (b'"' not in tail and b"[" not in tail and b"{" not in tail):
                    return self._plain_joined(unit, tail, bool(columns))
            row = _load_csv(unit)
            if kind != CSV:
                row.extend(_as_columns(value))
            elif value and isinstance(value[0], list):  # several output rows for one record
                row.extend(cell for r in value for cell in r)
            else:
                row.extend(value)
            return _dump_csv(self.output_path.apply(row))
        return _dump_json(self.output_path.apply(_joined(self._load(unit), value)))

    def _load_output(self, output: bytes) -> tuple[str, Any]:
        kind = self.out_kind or JSON
        head = output[:32].lstrip()
        if kind == CSV and head[:1] in (b"{", b"["):
            # The TFS container answers JSON whatever Accept says.
            try:
                return JSON, jsonenc.loads(output)
            except ValueError:
                pass
        if kind == CSV:
            rows = [_load_csv(u) for u in _units(output, CSV)[0]]
            return CSV, rows[0] if len(rows) == 1 else rows
        if kind == JSONL:
            lines = _units(output, JSONL)[0]
            if len(lines) != 1:
                return JSON, [_load_json(ln, "output") for ln in lines]
        return JSON, _load_json(output, "output")

    # ---- codecs -----------------------------------------------------------------

    def _load(self, unit: bytes) -> Any:
        if self.in_kind == CSV:
            return _load_csv(unit)
        return _load_json(unit, "input record")

    @staticmethod
    def _dump(value: Any, kind: str | None) -> bytes:
        return _dump_csv(value) if kind == CSV else _dump_json(value)


class _CsvPicks:
    """A path's cells of a CSV row (a list of byte strings), joined by commas.

    A path that picks by position alone (``$[1:]``, ``$[0,-10:]``: ``JsonPath.positions``) has
    its positions worked out once per row width, then each row is one C call picking them;
    any other path, or a width it fails on, goes through ``JsonPath.apply``.
    """

    MAX_WIDTHS = 64  # row widths remembered; more (ragged rows) are worked out each time

    # A run of cells from the row's start, or through its end, is cut from the row's bytes at
    # its commas, not split apart and joined again, when it starts or ends this near the start.
    MAX_COMMAS_FOUND = 8

    def __init__(self, path: JsonPath):
        self.path = path
        self._by_width: dict[int, Any] = {}
        self._rows_by_width: dict[int, Any] = {}
        self._joined_by_widths: dict[tuple[int, int], Any] = {}

    def pick(self, cells: list[bytes]) -> bytes:
        getter = self._by_width.get(len(cells))
        if getter is None:
            getter = self._getter(len(cells))
        return getter(cells)

    def pick_row(self, row: bytes) -> bytes:
        """``pick`` of a plain row's cells, from the row's bytes."""
        width = row.count(b",") + 1
        cut = self._rows_by_width.get(width)
        if cut is None:
            cut = self._row_getter(width)
        return cut(row)

    def pick_joined(self, row: bytes, tail: bytes) -> bytes:
        """``pick`` of a plain row's cells followed by ``tail``'s (a joined answer's columns),
        from their bytes: a path that keeps a run of the row's first cells and a run of the
        answer's last (``$[0,-10:]``: the id and the prediction) cuts both at their commas."""
        widths = (row.count(b",") + 1, tail.count(b",") + 1)
        cut = self._joined_by_widths.get(widths)
        if cut is None:
            cut = self._joined_getter(*widths)
        return cut(row, tail)

    def _joined_getter(self, n_row: int, n_tail: int):
        where = self.path.positions(n_row + n_tail)
        cut = None
        if type(where) is list and where:
            head = 0
            while head < len(where) and where[head] == head:
                head += 1
            back = len(where) - head
            if head <= n_row and back <= n_tail and where[head:] == list(range(n_row + n_tail - back, n_row + n_tail)):
                front_of = self._front(head, n_row) if head else None
                back_of = self._back(back, n_tail) if back else None
                if not head and back_of:
                    cut = lambda row, tail: back_of(tail)  # noqa: E731
                elif not back and front_of:
                    cut = lambda row, tail: front_of(row)  # noqa: E731
                elif front_of and back_of:
                    cut = lambda row, tail: front_of(row) + b"," + back_of(tail)  # noqa: E731
        if cut is None:
            pick = self.pick
            cut = lambda row, tail: pick(row.split(b",") + tail.split(b","))  # noqa: E731
        if len(self._joined_by_widths) < self.MAX_WIDTHS:
            self._joined_by_widths[(n_row, n_tail)] = cut
        return cut

    def _front(self, k: int, n: int):
        """The first ``k`` (>= 1) of a row's ``n`` cells, cut from its bytes (None: not near enough)."""
        if k == n:
            return _same_row
        if k <= self.MAX_COMMAS_FOUND:
            return lambda row: row[:_nth_comma(row, k)]
        return None

    def _back(self, k: int, n: int):
        """The last ``k`` (>= 1) of a row's ``n`` cells, cut from its bytes (None: not near enough)."""
        if k == n:
            return _same_row
        if n - k <= self.MAX_COMMAS_FOUND:
            return lambda row: row[_nth_comma(row, n - k) + 1:]
        return None

    def _row_getter(self, n: int):
        where = self.path.positions(n)
        cut = None
        if type(where) is list and where and where == list(range(where[0], where[0] + len(where))):
            if where[-1] == n - 1:  # through the row's end: the cells after a comma
                cut = self._back(len(where), n)
            elif where[0] == 0:  # from the row's start: the cells before a comma
                cut = self._front(len(where), n)
        if cut is None:
            pick = self.pick
            cut = lambda row: pick(row.split(b","))  # noqa: E731
        if len(self._rows_by_width) < self.MAX_WIDTHS:
            self._rows_by_width[n] = cut
        return cut

    def _getter(self, n: int):
        where = self.path.positions(n)
        if where is None:
            getter = self._apply
        elif type(where) is int:
            getter = operator.itemgetter(where)
        elif len(where) > 1:
            many = operator.itemgetter(*where)
            getter = lambda cells: b",".join(many(cells))  # noqa: E731
        elif where:
            getter = operator.itemgetter(where[0])
        else:
            getter = lambda cells: b""  # noqa: E731
        if len(self._by_width) < self.MAX_WIDTHS:
            self._by_width[n] = getter
        return getter

    def _apply(self, cells: list[bytes]) -> bytes:
        picked = self.path.apply(cells)
        return b",".join(picked) if isinstance(picked, list) else picked


def _same_row(row: bytes) -> bytes:
    return row


def _nth_comma(row: bytes, k: int) -> int:
    """The index of the ``k``-th comma of ``row`` (k >= 1; the row has at least k)."""
    at = row.index(b",")
    for _ in range(k - 1):
        at = row.index(b",", at + 1)
    return at


def _units(data: bytes, kind: str | None) -> tuple[list[bytes], bool]:
    """Rows of a CSV / JSON Lines record (a whole object may hold many); JSON is one unit."""
    if kind == JSON:
        return [data], False
    trailing = data.endswith(b"\n")
    lines = data.split(b"\n")
    if b"\r" in data:
        lines = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
    rows = [ln for ln in lines if ln]
    return (rows or [b""]), trailing and len(rows) > 1


def _plain_csv_line(data: bytes) -> bool:
    """A non-empty single CSV row without quoting, where splitting on commas is exact."""
    return bool(data) and b'"' not in data and b"\n" not in data and b"\r" not in data


def _kept(source: Any, keys: tuple[str, ...]) -> Any:
    """What a JSON join whose OutputFilter picks only ``keys`` needs of the row read as
    ``source``: those of its keys it has (an object); anything else is joined as
    ``SageMakerInput``, so all of it where that key is picked, else nothing (None)."""
    if isinstance(source, dict):
        return {k: source[k] for k in keys if k in source}
    return source if "SageMakerInput" in keys else None


_UNREAD_ROW = object()  # a row of a payload some row of which orjson refused: read it alone


def _joined(source: Any, value: Any) -> Any:
    """JoinSource=Input of a JSON record read as ``source`` and its answer read as ``value``."""
    if isinstance(source, dict):
        return {**source, "SageMakerOutput": value}
    return {"SageMakerInput": source, "SageMakerOutput": value}


def _rejoin(units: list[bytes], trailing: bool) -> bytes:
    if len(units) == 1:
        return units[0]
    return b"\n".join(units) + (b"\n" if trailing else b"")


def _load_json(data: bytes, what: str) -> Any:
    try:
        return jsonenc.loads(data)
    except ValueError as exc:
        raise InvalidInput(f"DataProcessing: the {what} is not valid JSON ({exc})") from None


def _dump_json(value: Any) -> bytes:
    return jsonenc.compact_dumps(value)


def _utf8(line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"DataProcessing: CSV row is not UTF-8 ({exc})") from None


def is_utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _load_csv(line: bytes) -> list[Any]:
    text = _utf8(line)
    if not text:
        return []
    if '"' not in text:  # no quoting: str.split is exact and ~10x faster than csv
        return text.split(",")
    try:
        return next(csv.reader([text]))
    except csv.Error as exc:
        raise InvalidInput(f"DataProcessing: cannot parse CSV row ({exc})") from None


def _cell(value: Any) -> str:
    """A CSV cell: numbers keep their JSON spelling; true/false; nested values as JSON text."""
    if isinstance(value, str):
        return value
    kind = type(value)
    if kind is float and value - value == 0.0:  # finite: json.dumps writes float.__repr__
        return float.__repr__(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return ""
    return json.dumps(value)


def _dump_csv(value: Any) -> bytes:
    items = value if isinstance(value, list) else [value]
    if items and type(items[0]) in (float, int):
        # A row of numbers (a model's answer) in one call: JSON's list text is the cells joined
        # by commas, unless the row also holds a string, null or a nested value.
        text = jsonenc.compact_dumps(items)[1:-1]
        if b'"' not in text and b"[" not in text and b"{" not in text and b"null" not in text:
            return text
    cells = [_cell(c) for c in items]
    text = ",".join(cells)
    # No cell needs quoting when the text has no quote or line break and its only commas are
    # the separators.
    if '"' not in text and "\n" not in text and "\r" not in text and text.count(",") == max(len(cells) - 1, 0):
        return text.encode("utf-8")
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    return buf.getvalue()[:-1].encode("utf-8")


def _as_columns(value: Any) -> list[Any]:
    """Columns a JSON model output adds to a CSV row."""
    if isinstance(value, dict) and len(value) == 1:
        key = next(iter(value))
        if key in _ROW_KEYS:
            value = value[key]
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (list, dict)):
        value = value[0]
    if isinstance(value, list):
        return list(value)
    return [value]
