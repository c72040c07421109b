"""check_json_size: the size check of a document decoded from JSON, without encoding it when a
cheaper measure proves it within the limit; the same outcome and error as check_size."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import to_json
from user_memory.domain.memory.document import (
    DocumentTooLarge,
    check_json_size,
    check_size,
    document_size,
    validate_document,
)

# The values json.loads gives: dicts with string keys, lists, strings, ints of any size, floats of
# every width (the exponent forms, subnormals, the largest), booleans, None; text with escapes,
# non-ASCII, astral characters.
_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(0, 2**64 - 1).map(lambda bits: struct.unpack("<d", struct.pack("<Q", bits))[0]),
    st.sampled_from([1e16, 1e-5, 1e-7, 5e-324, -2.2250738585072014e-308, 1.2345678901234568e17, 0.0, -0.0]),
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    _FLOATS,
    st.text(alphabet=st.characters(exclude_categories=("Cs",))),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=8), inner, max_size=6)),
    max_leaves=40,
)
_DOCUMENTS = st.dictionaries(st.text(max_size=8), _VALUES, max_size=6)


def _outcome(check, document, limit):
    try:
        check(document, limit)
    except DocumentTooLarge as err:
        return ("too large", err.size, err.limit)
    return "within"


@settings(max_examples=400)
@given(_DOCUMENTS)
def test_the_compact_json_is_at_most_eight_times_pydantic_cores(document):
    # The bound the fast path rests on, for every JSON-decoded document.
    assert document_size(document) <= 8 * len(to_json(document))


@settings(max_examples=400)
@given(_DOCUMENTS, st.integers(min_value=0, max_value=4096))
def test_the_outcome_and_the_error_are_check_sizes(document, slack):
    # Given limits around the document's exact size and around eight times pydantic-core's
    exact = document_size(document)
    bound = 8 * len(to_json(document))
    for limit in {max(exact - 1, 0), exact, exact + slack, max(bound - 1, 0), bound, bound + slack}:
        # Then check_json_size says what check_size says, with the same size and limit
        assert _outcome(check_json_size, document, limit) == _outcome(check_size, document, limit)


_WIDE = [1e-7, 1e16, 5e-324, -2.2250738585072014e-308, float("nan"), float("-inf"), 10**30, '\x00\x1f"\\é\U0001f600']


@pytest.mark.parametrize("value", _WIDE)
def test_values_whose_json_differs_in_width_are_measured_exactly(value):
    # A document just over the limit in Python's encoding is refused with Python's size, however
    # pydantic-core writes its numbers.
    document = {"values": [value] * 50}
    exact = len(json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode())
    with pytest.raises(DocumentTooLarge) as info:
        check_json_size(document, exact - 1)
    assert (info.value.size, info.value.limit) == (exact, exact - 1)
    check_json_size(document, exact)


def test_text_pydantic_core_does_not_write_is_measured_by_check_size():
    # A lone surrogate (no UTF-8 form): the same error check_size raises.
    with pytest.raises(UnicodeEncodeError):
        check_size({"summary": "\ud800"}, 10**6)
    with pytest.raises(UnicodeEncodeError):
        check_json_size({"summary": "\ud800"}, 10**6)


def test_validate_document_with_json_values_refuses_the_same_documents():
    document = {"summary": "x" * 1000}
    size = document_size({**document})
    for json_values in (False, True):
        with pytest.raises(DocumentTooLarge, match=f"document is {size:,} bytes"):
            validate_document(document, max_bytes=size - 1, json_values=json_values)
        assert validate_document(document, max_bytes=size, json_values=json_values)["summary"] == "x" * 1000
