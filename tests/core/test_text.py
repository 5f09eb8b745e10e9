"""Size, age and duration texts: one format everywhere, a dash for unknown, never an exception."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lucky_monitor.core.text import DASH, age_text, ago_text, bytes_text, ms_text, safe_text


@pytest.mark.parametrize(
    ("n", "want"),
    [
        (0, "0 B"),
        (64, "64 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (512 * 1024, "512 KiB"),
        (1_400_000, "1.3 MiB"),
        (1024**3, "1 GiB"),
        (5 * 1024**4, "5 TiB"),
        (2048 * 1024**5, "2048 PiB"),
        (1024 * 1024 - 1, "1.0 MiB"),  # 1023.999 KiB does not print as "1024.0 KiB"
    ],
)
def test_bytes_text(n: int, want: str) -> None:
    assert bytes_text(n) == want


@pytest.mark.parametrize(
    ("s", "want"),
    [
        (0, "0 s"),
        (12.7, "12 s"),
        (-5, "0 s"),
        (59.99, "59 s"),
        (60, "1 min"),
        (185, "3 min"),
        (7300, "2 h"),
        (86400 * 2.5, "2 d"),
    ],
)
def test_age_text(s: float, want: str) -> None:
    assert age_text(s) == want


def test_ago_and_ms() -> None:
    assert ago_text(100.0, 88.0) == "12 s ago"
    assert ago_text(100.0, 0.0) == ago_text(100.0, None) == DASH
    assert ms_text(0.00081) == "0.8 ms"
    assert ms_text(0.00081, 2) == "0.81 ms"


@pytest.mark.parametrize("unknown", [None, math.nan, math.inf, -math.inf, "3", True, 10**400])
def test_unknown_is_a_dash(unknown: object) -> None:
    assert bytes_text(unknown) == age_text(unknown) == ms_text(unknown) == DASH  # type: ignore[arg-type]
    assert bytes_text(-1) == DASH


@given(st.one_of(st.none(), st.floats(), st.integers(-(2**70), 2**70)))
def test_never_raises(x: float | None) -> None:
    for f in (bytes_text, age_text, ms_text):
        assert isinstance(f(x), str)
    assert isinstance(ago_text(0.0, x), str)


# ----------------------------------------------------------------------------- safe_text


def test_safe_text_keeps_printable_text_as_it_is() -> None:
    for s in ("", "engine says: no", "é → — 日本", "x" * 200):
        assert safe_text(s) == s
    assert safe_text(None) == ""
    assert safe_text(42) == "42"


def test_safe_text_escapes_control_and_invisible_characters() -> None:
    assert safe_text("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert safe_text("\x1b[31mred\x00") == "\\x1b[31mred\\x00"
    assert safe_text("\x7f\x85") == "\\x7f\\x85"
    assert safe_text("left\u202eright\u2028") == "left\\u202eright\\u2028"  # bidi override, line separator
    assert safe_text("<b>bold</b>") == "<b>bold</b>"  # markup is text: views show it plain


def test_safe_text_is_bounded_never_cuts_an_escape_and_costs_only_the_limit() -> None:
    huge = ("\x1b" + "y" * 7) * 8192  # 64 KiB
    out = safe_text(huge)
    assert len(out) <= 200 and out.endswith("…") and out.isprintable()
    assert out[:-1].endswith("y") or out[:-1].endswith("\\x1b")
    assert safe_text("abcde", 4) == "abc…" and safe_text("abcd", 4) == "abcd"
    assert safe_text("a\n\n", 3) == "a…"  # "a\\n" would leave no room for the ellipsis
    assert safe_text("\n" * 10, 1) == "…"
    for limit in range(1, 40):
        for s in ("\x00" * 50, "ab\ncd" * 20, "é" * 50):
            r = safe_text(s, limit)
            assert len(r) <= limit and r.isprintable()
