"""Fast JSON for TF Serving responses.

Formatting millions of floats is what makes REST slow next to gRPC: ``json.dumps`` over
``tolist()`` spends seconds on a 10 MB tensor. orjson serialises numpy arrays natively and
writes float32 with its shortest round-trip decimal — the same digits TF Serving prints.
Response builders may therefore leave numeric outputs as numpy arrays (``native=True`` in
:mod:`tfbatch.tfs.codec`) and hand the structure to :func:`dumps`.
"""

from __future__ import annotations

import json
import struct
import threading
from typing import Any

import numpy as np
import orjson

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def _default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> bytes:
    """Compact JSON bytes; numpy arrays and scalars allowed anywhere in ``value``."""
    try:
        return orjson.dumps(value, default=_default, option=_OPTIONS)
    except TypeError:
        pass  # e.g. an integer beyond 64 bits: the standard library handles it
    return json.dumps(value, separators=(",", ":"), default=_default).encode()


_COMPACT = json.JSONEncoder(separators=(",", ":"))
# Types orjson writes that the standard library refuses or writes otherwise (datetimes,
# dataclasses, subclasses of str/int/dict/list) go to the standard library instead.
_PASS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


def compact_dumps(value: Any) -> bytes:
    """Exactly ``json.dumps(value, separators=(",", ":")).encode()`` for JSON's own values (what
    ``json.loads`` returns, in lists, tuples and dicts), ~10x sooner on numbers.

    orjson writes the same bytes except in these cases, which send ``value`` to the standard
    library: a non-ASCII character or DEL (written raw, where the standard library escapes
    them), NaN/Infinity (written ``null``), an integer outside 64 bits or a key that is not a
    string (orjson refuses them). A number below 1e-4 (``0.00001`` against ``1e-05``, ``1e-6``
    against ``1e-06``) is spelled again as the standard library spells it (``_respelled``). The
    test is on the bytes, so a string that only looks like one of these (holding ``null``,
    ``e-`` or ``0.0000``) in a short text takes the slower way too.
    """
    try:
        out = orjson.dumps(value, option=_PASS)
    except TypeError:  # orjson.JSONEncodeError included
        out = None
    text = _as_stdlib(out) if out is not None else None
    return text if text is not None else _COMPACT.encode(value).encode()


def _as_stdlib(out: bytes, parts: list[bytes] | None = None) -> bytes | None:
    """orjson's text ``out`` as the standard library writes it (``compact_dumps``): ``out`` itself,
    or with its numbers below 1e-4 spelled again, or None where the two differ otherwise.

    ``parts``: ``out.split(b'"')`` of a text holding no backslash (so every other part is
    outside a string), or None; its parts outside strings are spelled again in place. Every
    spelling the two write differently but a raw non-ASCII character or DEL is a token outside
    strings (``null`` for NaN, a negative exponent, a tiny number), so only the text outside
    strings is searched for those: a base64 image's 30 KB string had cost ~30 us of two-byte
    searches a ``json.dumps``, the orjson call itself ~1.
    """
    if not out.isascii() or b"\x7f" in out:
        return None
    if parts is None and len(out) > _SPLIT_AT and b"\\" not in out:
        parts = out.split(b'"')
    if parts is None:
        if b'"' in out:  # short, or with an escape: a look-alike in a string is not told apart
            return None if _holds_words(out) else out
        return _respelled(out)
    # The parts outside strings searched together first (as one text): most texts hold none of
    # the words, and a row of many keys is many parts.
    if not _holds_words(b'"'.join(parts[::2])):
        return out
    changed = False
    for n in range(0, len(parts), 2):
        part = _respelled(parts[n])
        if part is None:
            return None
        if part is not parts[n]:
            parts[n], changed = part, True
    return b'"'.join(parts) if changed else out


# Texts longer than this are searched outside their strings only (``_as_stdlib``).
_SPLIT_AT = 512
# Bytes of text per number spelled again, at least: with more such numbers (the probabilities
# of a thousand classes, most below 1e-4) the standard library writes the whole text sooner.
_RESPELL_BYTES = 128
# ... in a text that holds more than this many of them.
_RESPELL_ANY = 4
_NUMBER_BYTES = frozenset(b"0123456789.eE+-")


def _holds_words(text: bytes) -> bool:
    """Whether ``text`` holds ``null``, ``e-`` or ``0.0000``, where orjson's spelling may differ.
    One-byte searches first (memchr, ~0.05 ns a byte): a text of numbers holds no "l" and, if
    no negative number, no "-"; the longer searches take ~0.6 ns a byte."""
    return ((b"l" in text and b"null" in text) or (b"-" in text and b"e-" in text)
            or b"0.0000" in text)


def _respelled(tokens: bytes) -> bytes | None:
    """``tokens`` (orjson's text outside strings) with each number that orjson spells unlike the
    standard library spelled as ``repr(float)`` does, which is what ``json.dumps`` writes for
    the same double (orjson's digits read back to it): the numbers below 1e-4, found by
    ``0.0000`` and ``e-``. ``tokens`` itself where there is none; None for ``null`` (NaN or an
    infinity) or for more such numbers than one per ``_RESPELL_BYTES`` (past ``_RESPELL_ANY``)."""
    if b"l" in tokens and b"null" in tokens:
        return None
    hits = []
    for needle in (b"0.0000", b"e-") if b"-" in tokens else (b"0.0000",):
        at = tokens.find(needle)
        while at != -1:
            hits.append(at)
            if len(hits) > _RESPELL_ANY and len(hits) * _RESPELL_BYTES > len(tokens):
                return None
            at = tokens.find(needle, at + len(needle))
    if not hits:
        return tokens
    pieces, done, end = [], 0, len(tokens)
    for at in sorted(hits):
        if at < done:  # in a number spelled again already
            continue
        first = last = at
        while first > done and tokens[first - 1] in _NUMBER_BYTES:
            first -= 1
        while last < end and tokens[last] in _NUMBER_BYTES:
            last += 1
        try:
            number = float(tokens[first:last])
        except ValueError:  # not a number after all: the standard library's way
            return None
        pieces += (tokens[done:first], repr(number).encode("ascii"))
        done = last
    pieces.append(tokens[done:])
    return b"".join(pieces)


def compact_dumps_many(values: list) -> list[bytes]:
    """``[compact_dumps(v) for v in values]``, with orjson's text checked once for all of them
    (on the texts joined by newlines, which none of the checked words holds): ~1 us a value
    less on the rows of a JSON Lines join."""
    dumps = orjson.dumps
    try:
        outs = [dumps(v, option=_PASS) for v in values]
    except TypeError:
        return [compact_dumps(v) for v in values]
    joined = b"\n".join(outs)
    if _as_stdlib(joined) is joined:
        return outs
    texts = [_as_stdlib(out) for out in outs]
    return [_COMPACT.encode(v).encode() if text is None else text for text, v in zip(texts, values)]


def _with_non_finite_tokens(arr: np.ndarray, finite: np.ndarray) -> bytes:
    """``arr`` as orjson writes it (each finite value in the same digits as in an array without
    NaN, so a row reads the same whatever rows share its batch), with TF Serving's ``NaN`` /
    ``Infinity`` / ``-Infinity`` where orjson writes ``null``: a float array's text holds no
    other ``null``, and both walk the values in C order."""
    pieces = orjson.dumps(np.ascontiguousarray(arr), option=_OPTIONS).split(b"null")
    odd = arr[~finite]
    tokens = [b"NaN" if np.isnan(v) else b"Infinity" if v > 0 else b"-Infinity" for v in odd.tolist()]
    if len(pieces) != len(tokens) + 1:  # not orjson's layout after all: the standard library's text
        return json.dumps(arr.astype(np.float64).tolist(), separators=(",", ":")).encode()
    return pieces[0] + b"".join(token + piece for token, piece in zip(tokens, pieces[1:]))


def native_array(arr: np.ndarray) -> Any:
    """``arr`` in a form :func:`dumps` writes natively, or None when it must go through ``tolist``.

    Arrays holding non-finite floats become a pre-encoded fragment: orjson would write
    ``null`` where TF Serving writes ``NaN``/``Infinity``.
    """
    if arr.ndim == 0:
        return None
    kind = arr.dtype.kind
    if kind == "f":
        if arr.dtype == np.float16:
            arr = arr.astype(np.float32)
        elif arr.dtype not in (np.float32, np.float64):
            return None
        finite = np.isfinite(arr)
        if not finite.all():
            return orjson.Fragment(_with_non_finite_tokens(arr, finite))
    elif kind not in "biu":
        return None
    return np.ascontiguousarray(arr)


# orjson reads an integer outside [-2**63, 2**64) as a float, the standard library as an int:
# a body holding 19 digits in a row (every such integer has at least 19) is left to the latter.
# Found as 19 zeros in a row once every digit is written as "0".
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19
UNREAD = object()


def has_long_digits(data: bytes | str) -> bool:
    """True when ``data`` holds 19 or more digits in a row (an integer orjson may read as a float).

    ~1 ns a byte (a regular expression took ~10 on a body of floats, most of whose bytes are digits).
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    return _LONG_DIGITS in data.translate(_DIGITS_AS_ZERO)


def fast_loads(data: bytes | str) -> Any:
    """``data`` parsed by orjson when that gives exactly what ``json.loads`` gives, else :data:`UNREAD`.

    For what it accepts orjson builds the same values as the standard library (RFC 8259,
    shortest round-trip floats, the last of duplicate keys); the standard library alone reads
    ``NaN``/``Infinity``, integers outside 64 bits and lone surrogates, and words the errors
    users see, so every other body is left to it (the caller's general path). Orjson reads a
    long integer as a float, so the text is scanned for one (``has_long_digits``) only where
    the value it read may hold a float, or the body is small enough that the scan is cheaper
    than looking.
    """
    small = len(data) < _SCAN_FIRST_BELOW
    if small and has_long_digits(data):
        return UNREAD
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return UNREAD
    # A long integer is misread only as a float: a value with no float in it (a base64 image's
    # request, records of text) was read exactly, and the text need not be scanned.
    if not small and _may_hold_floats(value, len(data)) and has_long_digits(data):
        return UNREAD
    return value


# Below this many bytes the scan (a few us) is cheaper than a call that might spare it.
_SCAN_FIRST_BELOW = 4096


# The text scan costs ~1 ns a byte, the walk ~100 ns a value (~40 a string): ``_may_hold_floats``
# looks at no more values other than strings than one per 512 bytes of the body, and no more
# values in all than one per 128, so that where it gives up (a body of numbers, or of many short
# strings) it has cost a small part of the scan it could not save.
_BYTES_PER_NON_STRING = 512
_BYTES_PER_VALUE = 128


def _may_hold_floats(value: Any, size: int) -> bool:
    """False when ``value`` (orjson's result from ``size`` bytes) surely holds no float; True
    when it holds one, or more values than the budgets above let it look through.

    On the seeds' scripted image job the text scan took 40 us of a 30 KB base64 body, four
    times orjson's parse; looking through the values of that body takes ~1 us."""
    if type(value) is float:
        return True
    if type(value) is not dict and type(value) is not list:
        return False
    numbers, values = size // _BYTES_PER_NON_STRING, size // _BYTES_PER_VALUE
    todo = [value]
    while todo:
        node = todo.pop()
        items = node.values() if type(node) is dict else node
        values -= len(items)
        if values < 0:
            return True
        for item in items:
            kind = type(item)
            if kind is str:
                continue
            numbers -= 1
            if numbers < 0 or kind is float:
                return True
            if kind is dict or kind is list:
                todo.append(item)
    return False


def loads(data: bytes | str) -> Any:
    """Parse JSON; orjson first (several times faster on big base64 bodies), then the standard
    library, which also accepts the ``NaN``/``Infinity`` tokens TF Serving clients may send
    and produces the error messages users see."""
    value = fast_loads(data)
    if value is not UNREAD:
        return value
    try:
        return json.loads(data)
    except RecursionError:  # nesting orjson refused too: report it as bad JSON, never a crash
        text = data if isinstance(data, str) else data.decode("utf-8", "replace")
        raise json.JSONDecodeError("arrays/objects nested too deeply", text, 0) from None


# ``json.dumps``'s keyword arguments at their defaults: a call that passes only these (and
# ``separators``, below) gets the standard library's text from orjson.
_DUMPS_DEFAULTS = {"skipkeys": False, "ensure_ascii": True, "check_circular": True, "allow_nan": True,
                   "cls": None, "indent": None, "default": None, "sort_keys": False}


def _separators(kwargs: dict) -> str | None:
    """The layout a ``json.dumps(value, **kwargs)`` call asks for -- "spaced" (the default, ``", "``
    and ``": "``) or "compact" (``separators=(",", ":")``) -- or None for any other call."""
    layout = "spaced"
    for name, value in kwargs.items():
        if name == "separators":
            if value is None:
                continue
            if type(value) not in (tuple, list) or len(value) != 2:
                return None
            pair = tuple(value)
            if pair == (",", ":"):
                layout = "compact"
            elif pair != (", ", ": "):
                return None
        elif name not in _DUMPS_DEFAULTS or value is not _DUMPS_DEFAULTS[name]:
            return None
    return layout


def dumps_like_stdlib(obj: Any, **kwargs: Any) -> str:
    """``json.dumps(obj, **kwargs)``: the same text (or the same exception), written by orjson
    where it writes the standard library's text: ~5-10x sooner on numbers, the bulk of what
    an ``inference.py`` sends to TF Serving (``json.dumps({"instances": pixels.tolist()})``:
    ~6 ms of a 64x64x3 image's floats against ~0.5).

    orjson is asked only for the default layout or ``separators=(",", ":")`` with every other
    argument at its default; its text is kept only where ``compact_dumps`` keeps it (no NaN,
    non-ASCII character, negative exponent or tiny number; the standard library's types alone:
    subclasses, datetimes and dataclasses go to the standard library, as do integers beyond
    64 bits and keys that are not strings). For the default layout, spaces go after each comma
    and colon outside strings, found by splitting at quotes, so a text holding a backslash
    (an escape) is left to the standard library too. One difference remains: an ``enum.Enum``
    member that is not also an int or str, and a ``uuid.UUID``, are refused by the standard
    library (TypeError) and written by orjson (the member's value; the UUID's text).
    """
    layout = _separators(kwargs) if kwargs else "spaced"
    if layout is not None:
        try:
            out = orjson.dumps(obj, option=_PASS)
        except TypeError:  # orjson.JSONEncodeError included: a value the standard library may write
            out = None
        if out is not None and len(out) > NOTE_AT and type(obj) is dict and len(obj) <= 2:
            text = _request_dumps(obj, out, layout)
            if text is not None:
                return text
        # Split at quotes once, for the check and the spaces, where no backslash (an escape)
        # makes a quote part of a string.
        parts = out.split(b'"') if out is not None and (layout != "compact" or len(out) > _SPLIT_AT) \
            and b"\\" not in out else None
        text = _as_stdlib(out, parts) if out is not None else None
        if text is not None:
            if layout == "compact":
                return text.decode("ascii")
            if parts is not None:  # spelled again in place where _as_stdlib changed them
                parts[::2] = [part.replace(b",", b", ").replace(b":", b": ") for part in parts[::2]]
                return b'"'.join(parts).decode("ascii")
    return json.dumps(obj, **kwargs)


# What the last ``dumps_like_stdlib`` of each thread wrote, when it was a TF Serving request of
# numbers alone: (the text returned, "instances" or "inputs", the numbers as an array). The
# text is held, so the identity test in ``written_numbers`` cannot match another string.
_written = threading.local()
# Nesting deeper than this is not noted (``tfs.codec`` reads no deeper either).
MAX_NUMBER_DEPTH = 32
# A request's text this long or shorter is not noted: reading it back (one CSV line's instance,
# ``tfs.codec``'s small body) costs less than the note's NumPy calls.
NOTE_AT = 4096


def _request_dumps(obj: dict, out: bytes, layout: str) -> str | None:
    """``dumps_like_stdlib`` of ``{"instances"|"inputs": nested lists of numbers}`` (what a script's
    ``input_handler`` sends to TF Serving), or of that with a ``"signature_name"`` before it,
    from orjson's text ``out``, longer than ``NOTE_AT``, with its numbers (and the signature it
    names) noted for the reader of the same text on this thread (``written_numbers``), which
    then need not parse them back; None for anything else (the general way writes it, unnoted).

    The text is the general way's: orjson's, spaced as the standard library spaces it. Checked
    on the numbers rather than on the text (three scans of ~0.5 ns a byte on a 64 x 64 x 3
    image's 240 KB): a text of numbers alone holds no string, so nothing non-ASCII, no
    backslash, no ``null`` (NaN and infinities hold an ``l``); orjson and the standard library
    spell every other number alike but those below 1e-4 (``0.00001``/``1e-05``, ``1e-6``/
    ``1e-06``), which are spelled again (``_respelled``) where the array holds any. A signature
    name is kept only where both spell it alike: printable ASCII with no quote or backslash."""
    signature = None
    if len(obj) == 2:
        (first, signature), (key, value) = obj.items()
        if first != "signature_name" or type(signature) is not str or not _plain_name(signature):
            return None
        # orjson's compact text is '{"signature_name":"<name>","<key>":<value>}'.
        head = '"signature_name":"' + signature + '",'
    else:
        ((key, value),) = obj.items()
        head = ""  # orjson's compact text is '{"<key>":<value>}'
    if key not in ("instances", "inputs") or type(value) not in (list, tuple):
        return None
    # The value's text starts after the key.
    start = len(head) + len(key) + 4
    # Numbers alone: no string, object or literal (true, false, null) in the value's text.
    for byte in (b'"', b"{", b"t", b"l"):
        if out.find(byte, start) != -1:
            return None
    whole = out.find(b".", start) == -1 and out.find(b"e", start) == -1 and out.find(b"E", start) == -1
    array = numbers_array(value, np.int64 if whole else np.float64)
    if array is None:
        return None
    if not whole:
        magnitude = np.abs(array)
        if ((magnitude < 1e-4) & (magnitude > 0)).any():
            numbers = _respelled(out[start:-1])
            if numbers is None:
                return None
            out = out[:start] + numbers + b"}"
    # orjson's compact text is the standard library's compact text. The spaced one is the
    # standard library's head and then orjson's text after the head, commas spaced: one
    # replace, one join and one decode of the ~290 KB (a 64 x 64 x 3 image's floats).
    if layout == "compact":
        text = out.decode("ascii")
    else:
        spaced = out.replace(b",", b", ")
        # Where the value starts in ``spaced``: after orjson's head, its commas spaced likewise.
        at = len(out[:start].replace(b",", b", "))
        lead = "{" + ("" if signature is None else '"signature_name": "' + signature + '", ') + '"' + key + '": '
        text = b"".join((lead.encode("ascii"), memoryview(spaced)[at:])).decode("ascii")
    _written.last = (text, key, array, signature)
    return text


def _plain_name(name: str) -> bool:
    """Whether orjson and the standard library write ``name`` alike, and unescaped."""
    return name.isascii() and name.isprintable() and '"' not in name and "\\" not in name


def written_numbers(text: Any) -> tuple[str, np.ndarray, str | None] | None:
    """``(key, array, signature name or None)`` when ``text`` is the string this thread's last
    ``dumps_like_stdlib`` returned for a request of numbers alone (``_request_dumps``), or that
    string's bytes (a script's ``json.dumps(...).encode()``), else None. Taken once: the note
    is dropped.

    The array is what reading the text back gives: its shape the lists' (rectangular), int64
    when every number is whole, else float64, each number as the text's digits read it (orjson
    writes each float's shortest round-trip digits, so its double; an int as a double is the
    one correctly rounded conversion either way). It is made when the text is written, so a
    list changed after ``json.dumps`` returned cannot change it. The noted text is ASCII, so
    bytes equal to its encoding are that text (compared in full: ~20 us for a 64 x 64 x 3
    image's 240 KB, against ~1 ms to read its numbers back)."""
    last = getattr(_written, "last", None)
    if last is None:
        return None
    noted = last[0]
    if noted is not text and (type(text) is not bytes or len(text) != len(noted) or text != noted.encode("ascii")):
        return None
    _written.last = None
    return last[1], last[2], last[3]


def numbers_array(value: list | tuple, dtype: type) -> np.ndarray | None:
    """Nested lists (or tuples) of numbers as an array of ``dtype`` (``np.int64`` or
    ``np.float64``), or None unless they are rectangular, non-empty, at most
    ``MAX_NUMBER_DEPTH`` deep, and every number fits ``dtype``.

    The caller knows every leaf is an int or a float (not a bool: JSON text with no literal).
    Each level is checked and flattened in one pass (``list.extend`` a row: a copy of its
    pointers), and the leaves are packed into the array by ``struct`` (``d``: each number's
    double, correctly rounded from an int as NumPy rounds it; ``q``: an int within 64 bits),
    ~3x sooner than ``np.array`` of the flat list, which first looks for a dtype."""
    code = _PACK_CODES[np.dtype(dtype)]
    shape: list[int] = []
    rows: Any = [value]  # the lists of one level, each of shape[-1] items once checked
    while True:
        n = len(rows[0])
        if n == 0 or len(shape) == MAX_NUMBER_DEPTH:
            return None
        shape.append(n)
        leaves = type(rows[0][0]) not in (list, tuple)
        flat: list = []
        extend = flat.extend
        try:
            for row in rows:
                if len(row) != n:
                    return None
                extend(row)
        except TypeError:  # a number beside lists at one level
            return None
        if leaves:
            break
        rows = flat
    array = np.empty(len(flat), dtype)
    try:
        # In slices past _PACK_SLICE numbers, so that the call's argument tuple stays small.
        for start in range(0, len(flat), _PACK_SLICE):
            part = flat[start:start + _PACK_SLICE] if len(flat) > _PACK_SLICE else flat
            struct.pack_into(f"{len(part)}{code}", array, start * array.itemsize, *part)
    except (struct.error, OverflowError):  # a list below a number; an int past int64
        return None
    return array.reshape(shape)


# Numbers packed per ``struct`` call (a 512 KB argument tuple at most; a MultiRecord payload's
# million numbers take 16 calls).
_PACK_SLICE = 1 << 16


# ``struct``'s native codes for the dtypes ``numbers_array`` makes.
_PACK_CODES = {np.dtype(np.int64): "q", np.dtype(np.float64): "d"}


def loads_like_stdlib(s: Any, **kwargs: Any) -> Any:
    """``json.loads(s, **kwargs)``: the same value (or the same exception), read by orjson where
    it reads the same (``fast_loads``) -- a str, bytes or bytearray and no keyword argument."""
    if not kwargs and type(s) in (str, bytes, bytearray):
        value = fast_loads(s)
        if value is not UNREAD:
            return value
    return json.loads(s, **kwargs)
