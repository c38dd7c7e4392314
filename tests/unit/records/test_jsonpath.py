"""Every JSONPath form SageMaker documents, on JSON values and on CSV rows."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfbatch.errors import InvalidInput, ConfigError
from tfbatch.records import compile_path

ROW = ["id7", "1", "2", "3", "4", "5"]
DOC = {"id": 7, "features": [0.1, 0.2, 0.3], "meta": {"a": 1, "b": {"c": 2}}, "SageMakerOutput": [9]}


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("$", ROW),
        ("", ROW),
        ("$[0]", "id7"),
        ("$[-1]", "5"),
        ("$[1,3]", ["1", "3"]),
        ("$[0,-1]", ["id7", "5"]),
        ("$[1:]", ["1", "2", "3", "4", "5"]),
        # the developer guide: "$[1:4] specifies the second through fifth columns"
        ("$[1:4]", ["1", "2", "3", "4"]),
        # "[:5] ... from the first column (index 0) through the sixth column"
        ("$[:5]", ROW),
        ("$[:3]", ["id7", "1", "2", "3"]),
        ("$[2:5]", ["2", "3", "4", "5"]),
        ("$[0,5:]", ["id7", "5"]),
        ("$[-2:]", ["4", "5"]),
        ("$[4:99]", ["4", "5"]),
        ("$[9:]", []),
        ("$[*]", ROW),
        ("$.*", ROW),
        ("$[ 1 , 2 ]", ["1", "2"]),
    ],
)
def test_paths_on_csv_rows(expr, expected):
    assert compile_path(expr).apply(list(ROW)) == expected


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("$", DOC),
        ("$.id", 7),
        ("$.features", [0.1, 0.2, 0.3]),
        ("$.meta.b.c", 2),
        ("$.meta.*", [1, {"c": 2}]),
        ("$.*", [7, [0.1, 0.2, 0.3], {"a": 1, "b": {"c": 2}}, [9]]),
        ("$['id','SageMakerOutput']", {"id": 7, "SageMakerOutput": [9]}),
        ('$["id"]', 7),
        ("$['meta']['b']", {"c": 2}),
        ("$.meta.['a','b']", {"a": 1, "b": {"c": 2}}),
        ("$.features[-1]", 0.3),
        ("$.features[0:1]", [0.1, 0.2]),
        ("$.features[1,2]", [0.2, 0.3]),
        ("$['id','missing']", {"id": 7}),
        ("$.*.c", []),  # after a wildcard, absent keys are skipped
        ("$.meta.*.c", [2]),
    ],
)
def test_paths_on_json(expr, expected):
    assert compile_path(expr).apply(DOC) == expected


def test_definite_and_index_only_flags():
    assert compile_path("$.a.b").definite and not compile_path("$.a.*").definite
    assert compile_path("$[1:]").index_only and not compile_path("$.a").index_only
    assert compile_path("$").is_identity and compile_path(None).is_identity


@pytest.mark.parametrize(
    "expr, reason",
    [
        ("a.b", "must start with '\\$'"),
        ("$..a", "recursive descent"),
        ("$[1:5:2]", "slice steps"),
        ("$[?(@.a > 1)]", "expected an index"),
        ("$['a',1]", "cannot be mixed"),
        ("$['a'", "expected '\\]'"),
        ("$['a]", "unterminated"),
        ("$.", "expected a name"),
        ("$x", "unexpected 'x'"),
    ],
)
def test_invalid_syntax_names_expression_and_forms(expr, reason):
    with pytest.raises(ConfigError, match=reason) as info:
        compile_path(expr)
    assert repr(expr) in str(info.value)
    assert "supported forms: $, $.a" in str(info.value)


@pytest.mark.parametrize(
    "expr, value, message",
    [
        ("$.nope", DOC, "expected key 'nope', found an object with keys"),
        ("$.id", ROW, "expected key 'id', found an array"),
        ("$['id','SageMakerOutput']", ROW, "expected keys \\['id', 'SageMakerOutput'\\]"),
        ("$[10]", ROW, "expected index 10, found an array of 6 elements"),
        ("$[1,10]", ROW, "index 10 is outside an array of 6 elements"),
        ("$[0]", DOC, "expected index 0, found an object"),
        ("$.id.x", DOC, "found a int value"),
        ("$[1:]", "text", "expected an array"),
    ],
)
def test_values_lacking_what_the_path_names(expr, value, message):
    with pytest.raises(InvalidInput, match=message):
        compile_path(expr).apply(value)


@settings(max_examples=100, deadline=None)
@given(
    row=st.lists(st.integers(), min_size=1, max_size=12),
    a=st.one_of(st.none(), st.integers(-15, 15)),
    b=st.one_of(st.none(), st.integers(-15, 15)),
)
def test_slices_are_python_slices_with_inclusive_end(row, a, b):
    expr = f"$[{'' if a is None else a}:{'' if b is None else b}]"
    if b is None:
        expected = row[a:]
    elif b == -1:
        expected = row[a:]
    else:
        expected = row[a : b + 1]
    assert compile_path(expr).apply(row) == expected
