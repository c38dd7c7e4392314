"""An answered payload's outputs reach storage as a few writes, byte for byte, and a large part
is not copied into a bigger one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tfbatch.transform import pipeline
from tfbatch.transform.pipeline import _coalesce

CAP = 32


def _writes(parts: list[bytes]) -> list[bytes]:
    original, pipeline.COALESCE_BYTES = pipeline.COALESCE_BYTES, CAP
    try:
        return list(_coalesce(parts))
    finally:
        pipeline.COALESCE_BYTES = original


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=30))
def test_coalesced_writes_hold_the_parts_in_order_and_are_few(sizes):
    parts = [bytes([65 + i % 26]) * n for i, n in enumerate(sizes)]
    writes = _writes(parts)
    assert b"".join(writes) == b"".join(parts)
    large = [p for p in parts if len(p) >= CAP]
    if len(parts) > 1:
        # each large part is a write of its own, the very object it was
        assert [w for w in writes if any(w is p for p in large)] == large
    # a write short of the cap ends its run of small parts: a large part or the end follows
    for i, w in enumerate(writes[:-1]):
        if len(w) < CAP:
            assert any(writes[i + 1] is p for p in large)


def test_a_large_part_goes_out_alone_and_uncopied():
    big = b"x" * pipeline.COALESCE_BYTES
    writes = list(_coalesce([b"row1\n", big, b"\n", b"row3\n"]))
    assert writes[0] == b"row1\n"
    assert writes[1] is big
    assert writes[2] == b"\nrow3\n"
    assert list(_coalesce([big]))[0] is big
