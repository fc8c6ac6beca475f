"""Code normalisation: codes are accepted as people type them, and junk is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phenoforge.engine.codes import code_key, codes_in_text, dotted


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("E11.22", "E1122"),
        ("E1122", "E1122"),
        ("e11.22", "E1122"),
        (" E11.22 ", "E1122"),
        ("\tE11.22\n", "E1122"),
        ("E 11.22", "E1122"),
        ("s72.001a", "S72001A"),
        ("E11", "E11"),
        ("A00-A09", "A00-A09"),
        ("19", "19"),
    ],
)
def test_code_key_normalises_typed_codes(raw: str, expected: str) -> None:
    assert code_key(raw) == expected


@pytest.mark.parametrize(
    "raw",
    ["", "   ", "not a code", "E11.22'; DROP TABLE concept; --", "E11221234", "-E11", "糖尿病", "E11_22"],
)
def test_code_key_refuses_what_cannot_be_a_code(raw: str) -> None:
    assert code_key(raw) is None


@pytest.mark.parametrize("raw", [None, 1122, 11.22, b"E1122", ["E11"]])
def test_code_key_refuses_non_text(raw: object) -> None:
    assert code_key(raw) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "expected"),
    [("E1122", "E11.22"), ("E11", "E11"), ("S72001A", "S72.001A"), ("I10", "I10"), ("E119", "E11.9")],
)
def test_dotted(key: str, expected: str) -> None:
    assert dotted(key) == expected


@given(
    st.from_regex(r"[A-TV-Z][0-9][0-9A-Z](\.[0-9A-Z]{1,4})?", fullmatch=True),
    st.sampled_from(["", " ", "  ", "\t"]),
    st.booleans(),
)
def test_code_key_is_idempotent_and_round_trips_through_dotted(code: str, pad: str, lower: bool) -> None:
    typed = pad + (code.lower() if lower else code) + pad
    key = code_key(typed)
    assert key == code.replace(".", "")
    assert code_key(key) == key
    assert code_key(dotted(key)) == key
    assert dotted(key) == code


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I50", ["I50"]),
        ("adults with I50", ["I50"]),
        ("codes I50, I11 and J45", ["I50", "I11", "J45"]),
        ("heart failure in the CMS-HCC V28 model", []),  # V28 is a category, but here a model's name
        ("vitamin B12 deficiency", []),
        ("CKD stage G3a", []),
        ("CMS-HCC V28 with I50.9", ["I50.9"]),  # dotted: a code wherever it stands
        ("heart failure I5022", ["I5022"]),  # four characters or more: a code wherever it stands
    ],
)
def test_a_bare_three_character_token_is_a_code_only_where_a_code_can_stand(text: str, expected: list[str]) -> None:
    """ "CMS-HCC V28" used to add "Motorcycle rider injured..." (V28) to a decomposition."""
    assert codes_in_text(text) == expected
