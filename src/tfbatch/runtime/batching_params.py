"""TF Serving's ``--batching_parameters_file``: a text-format ``BatchingParameters`` proto.

The proto lives in TF Serving's ``session_bundle_config.proto``, which the
``tensorflow-serving-api`` wheel does not ship, so the subset of the text format that such a
file uses is parsed here, strictly: an unknown field, a repeated scalar field, a bad value
or stray text is an error naming the file and the line, never a silently ignored knob.

    max_batch_size { value: 32 }
    batch_timeout_micros { value: 5000 }
    num_batch_threads { value: 4 }
    max_enqueued_batches { value: 100 }
    allowed_batch_sizes: 8
    allowed_batch_sizes: 32
    pad_variable_length_inputs: false

The result is a dict of :class:`RuntimeSettings` fields; how it combines with the
``SAGEMAKER_TFS_*`` variables is decided by ``RuntimeSettings.from_env``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tfbatch.errors import ConfigError

# Wrapped (google.protobuf.*Value) fields -> the RuntimeSettings field they set.
_WRAPPED_INTS = {
    "max_batch_size": "max_batch_size",
    "batch_timeout_micros": "batch_timeout_micros",
    "num_batch_threads": "num_batch_threads",
    "max_enqueued_batches": "max_enqueued_batches",
}
# Fields of BatchingParameters that TF Serving has and tfbatch cannot honour: refused by name
# so that a file written for TF Serving does not silently run differently.
_UNSUPPORTED = {
    "thread_pool_name": "tfbatch has one batcher per (model, version, signature), no shared named pools",
    "max_execution_batch_size": "large-batch splitting is always on in tfbatch; set max_batch_size instead",
    "enable_large_batch_splitting": "large-batch splitting is always on in tfbatch",
    "batch_padding_policy": "only padding with the first row (TF Serving's default) is implemented",
}

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<comment>\#[^\n]*)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<number>-?\d+)
      | (?P<string>"[^"\n]*")
      | (?P<punct>[{}:])
      | (?P<bad>\S+)
    )""",
    re.VERBOSE,
)


def _tokens(text: str, source: str) -> list[tuple[str, str, int]]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:  # only trailing whitespace left
            break
        pos = m.end()
        kind = m.lastgroup
        line = text.count("\n", 0, m.start(kind)) + 1
        if kind == "comment":
            continue
        if kind == "bad":
            raise ConfigError(f"{source}:{line}: unexpected text {m.group(kind)!r}")
        out.append((kind, m.group(kind), line))
    return out


class _Reader:
    def __init__(self, tokens: list[tuple[str, str, int]], source: str):
        self.tokens = tokens
        self.source = source
        self.i = 0

    def error(self, message: str) -> ConfigError:
        line = self.tokens[min(self.i, len(self.tokens) - 1)][2] if self.tokens else 1
        return ConfigError(f"{self.source}:{line}: {message}")

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, kind: str, value: str | None = None, what: str = "") -> str:
        tok = self.peek()
        if tok is None or tok[0] != kind or (value is not None and tok[1] != value):
            got = "end of file" if tok is None else repr(tok[1])
            raise self.error(f"expected {what or value or kind}, got {got}")
        self.i += 1
        return tok[1]

    def integer(self, field: str) -> int:
        value = int(self.take("number", what=f"an integer for {field}"))
        if value < 0:
            raise self.error(f"{field} must be >= 0, got {value}")
        return value

    def boolean(self, field: str) -> bool:
        word = self.take("name", what=f"true or false for {field}")
        if word not in ("true", "false"):
            raise self.error(f"{field} must be true or false, got {word!r}")
        return word == "true"


def parse_batching_parameters(text: str, source: str = "<batching parameters>") -> dict[str, Any]:
    """The RuntimeSettings fields a BatchingParameters text proto sets (plus ``enable_batching``)."""
    r = _Reader(_tokens(text, source), source)
    values: dict[str, Any] = {}
    seen: set[str] = set()
    allowed: list[int] = []
    while r.peek() is not None:
        field = r.take("name", what="a field name")
        if field in _UNSUPPORTED:
            raise r.error(f"{field} is not supported: {_UNSUPPORTED[field]}")
        if field != "allowed_batch_sizes":
            if field in seen:
                raise r.error(f"{field} is given twice")
            seen.add(field)
        if field in _WRAPPED_INTS:
            # TF Serving's text format accepts an optional ':' before a message value.
            if r.peek() is not None and r.peek()[1] == ":":
                r.take("punct", ":")
            r.take("punct", "{", what=f"'{{' after {field} (it is written '{field} {{ value: N }}')")
            r.take("name", "value", what=f"'value' inside {field}")
            r.take("punct", ":")
            values[_WRAPPED_INTS[field]] = r.integer(field)
            r.take("punct", "}")
        elif field == "allowed_batch_sizes":
            r.take("punct", ":", what=f"':' after {field}")
            allowed.append(r.integer(field))
        elif field == "pad_variable_length_inputs":
            r.take("punct", ":", what=f"':' after {field}")
            if r.boolean(field):
                raise r.error(
                    "pad_variable_length_inputs: true is not supported: tfbatch batches together only "
                    "requests whose inputs have the same non-batch shape"
                )
        else:
            known = sorted([*_WRAPPED_INTS, "allowed_batch_sizes", "pad_variable_length_inputs", *_UNSUPPORTED])
            raise r.error(f"unknown field {field!r} in BatchingParameters; known fields: {', '.join(known)}")
    if allowed:
        values["allowed_batch_sizes"] = tuple(allowed)
    values["enable_batching"] = True
    return values


def read_batching_parameters(path: str | Path) -> dict[str, Any]:
    """:func:`parse_batching_parameters` of a file; a missing or unreadable file is a ConfigError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read batching parameters file {str(path)!r}: {exc}") from None
    return parse_batching_parameters(text, str(path))
