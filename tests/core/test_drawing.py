"""The one draw-request builder: one rule for out-of-range input (refuse, naming the field)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lucky_monitor.core import drawing as d
from lucky_monitor.protocol.envelope import Envelope, decode, encode
from lucky_monitor.protocol.errors import LuckyMonitorError
from lucky_monitor.protocol.messages import Color, MethodId, Vec3


def test_builders_make_the_requests() -> None:
    req = d.line_request((0, 0, 0), [1, 2, 3], (0, 1, 0))
    assert req.lines[0].start == Vec3(0, 0, 0) and req.lines[0].end == Vec3(1, 2, 3)
    assert req.lines[0].color == Color(0, 1, 0, 1) and not req.clear_previous
    arrow = d.arrow_request((0, 0, 0.5), (1, 0, 0), d.DEFAULT_COLOR, 2.0, True).arrows[0]
    assert arrow.scale == 2.0 and arrow.color == Color(*d.DEFAULT_COLOR)
    vel = d.velocity_request((0, 0, 0), 1.0, np.float32(0.5), np.int64(2), 1.5).velocity_command
    assert vel is not None and (vel.lin_vel_x, vel.lin_vel_y, vel.ang_vel_z, vel.scale) == (1.0, 0.5, 2.0, 1.5)
    assert d.clear_request().clear_previous


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: d.line_request((math.nan, 0, 0), (0, 0, 0)), r"start\.x: nan is not a finite number"),
        (lambda: d.line_request((0, 0, 0), (0, math.inf, 0)), r"end\.y: inf is not a finite number"),
        (lambda: d.line_request((1e308, 0, 0), (0, 0, 0)), r"start\.x: 1e\+308 is outside the float32 range"),
        (
            lambda: d.line_request((0, 0, 10**400), (0, 0, 0)),
            r"start\.z: an integer of 401 digits is outside the float32",
        ),
        (lambda: d.line_request((0, 0), (0, 0, 0)), r"start: expected 3 numbers \(x,y,z\), got 2"),
        (lambda: d.line_request((0, 0, "1"), (0, 0, 0)), r"start\.z: '1' is not a number"),
        (lambda: d.line_request((0, 0, True), (0, 0, 0)), r"start\.z: True is not a number"),
        (lambda: d.line_request((0, 0, 0), (0, 0, 0), (1.5, 0, 0)), r"color\.r: 1\.5 is outside 0\.\.1"),
        (lambda: d.line_request((0, 0, 0), (0, 0, 0), (1, 0, 0, -0.1)), r"color\.a: -0\.1 is outside 0\.\.1"),
        (lambda: d.line_request((0, 0, 0), (0, 0, 0), (1, 0)), r"color: expected 3 or 4 numbers \(r,g,b\[,a\]\)"),
        (lambda: d.arrow_request((0, 0, 0), (1, 0, 0), scale=0), r"scale: 0 is not greater than 0"),
        (lambda: d.arrow_request((0, 0, 0), (1, 0, 0), scale=-2), r"scale: -2 is not greater than 0"),
        (lambda: d.arrow_request((0, 0, 0), (1, 0, 0), scale=math.nan), r"scale: nan is not a finite number"),
        (lambda: d.velocity_request((0, 0, 0), 1, 4e38, 0), r"lin_vel_y: 4e\+38 is outside the float32 range"),
        (lambda: d.velocity_request((0, 0, 0), 1, 0, 0, scale=0), r"scale: 0 is not greater than 0"),
    ],
)
def test_out_of_range_input_is_refused_naming_the_field(build, message: str) -> None:
    with pytest.raises(d.DrawInputError, match=message) as info:
        build()
    assert isinstance(info.value, LuckyMonitorError) and info.value.exit_code == 2


def test_float32_limits_are_inclusive() -> None:
    req = d.line_request((d.FLOAT32_MAX, -d.FLOAT32_MAX, 0), (0, 0, 0))
    assert req.lines[0].start.x == d.FLOAT32_MAX


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,0", r"--color: expected 3 or 4 numbers \(r,g,b\[,a\]\), got '1,0'"),
        ("1,0,0,0,1", r"--color: expected 3 or 4 numbers"),
        ("2,0,0", r"--color\.r: 2 is outside 0\.\.1"),
        ("1,x,0", r"--color: 'x' in '1,x,0' is not a number"),
        ("1,nan,0", r"--color: nan is not a finite number"),
    ],
)
def test_parse_color_messages(text: str, message: str) -> None:
    with pytest.raises(d.DrawInputError, match=message):
        d.parse_color(text)


def test_parse_color_and_numbers_accept_what_they_should() -> None:
    assert d.parse_color("0,1,0") == (0.0, 1.0, 0.0, 1.0)
    assert d.parse_color(" 1, 0.2 ,0.2,0.5") == (1.0, 0.2, 0.2, 0.5)
    assert d.parse_numbers("-1.5, 0, 0.9", 3, "--from") == (-1.5, 0.0, 0.9)
    with pytest.raises(d.DrawInputError, match=r"--from: 1e\+308 is outside the float32 range"):
        d.parse_numbers("1e308,0,0", 3, "--from")
    with pytest.raises(d.DrawInputError, match=r"--from: expected 3 comma-separated numbers, got '1,2'"):
        d.parse_numbers("1,2", 3, "--from")


@pytest.mark.parametrize("part", ["1_0", "\uff11\uff10", "0x10", "1,5".replace(",", "٫"), "", "1 0"])
def test_numbers_are_written_the_plain_way(part: str) -> None:
    # Python's float() reads "1_0" as 10 and fullwidth digits as digits: a draw from x = 10 for a typo.
    with pytest.raises(d.DrawInputError, match=r"--from: .* is not a number"):
        d.parse_numbers(f"{part},0,0", 3, "--from")


def test_plain_numbers_take_the_usual_forms() -> None:
    from lucky_monitor.core.argtypes import plain_number

    for text, value in (("10", 10.0), (" -1.5 ", -1.5), (".5", 0.5), ("5.", 5.0), ("1e3", 1000.0), ("+2E-1", 0.2)):
        assert plain_number(text) == value
    assert plain_number("42", int) == 42 and isinstance(plain_number("42", int), int)
    for text in ("4.0", "1_000", "0b1", ""):
        with pytest.raises(ValueError):
            plain_number(text, int)


finite32 = st.floats(min_value=-d.FLOAT32_MAX, max_value=d.FLOAT32_MAX, allow_nan=False)
unit = st.floats(min_value=0.0, max_value=1.0)


@given(
    start=st.tuples(finite32, finite32, finite32),
    direction=st.tuples(finite32, finite32, finite32),
    rgba=st.tuples(unit, unit, unit, unit),
    scale=st.floats(min_value=1e-30, max_value=d.FLOAT32_MAX),
)
def test_anything_the_builder_accepts_encodes(start, direction, rgba, scale) -> None:
    req = d.arrow_request(start, direction, rgba, scale)
    assert decode(encode(Envelope(MethodId.DrawReq, 1, req))).method == MethodId.DrawReq


@given(x=st.one_of(st.floats(), st.integers(-(2**1100), 2**1100), st.none(), st.text(max_size=3)))
def test_the_builder_answers_every_number_with_a_request_or_a_draw_input_error(x) -> None:
    try:
        d.line_request((x, 0, 0), (0, 0, 0))
    except d.DrawInputError as exc:
        assert str(exc).startswith("start.x: ")
