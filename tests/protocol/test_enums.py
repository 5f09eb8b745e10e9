"""The protocol vocabularies: values and labels are the spec's (schema/LAYOUT.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lucky_monitor.protocol import messages
from lucky_monitor.protocol.enums import EngineState, GpuObsMode, ImageFormat, Mode, Service, SimMode

VOCABULARIES = (EngineState, GpuObsMode, ImageFormat, Mode, Service, SimMode)


def test_values_and_labels_are_the_specs() -> None:
    assert {int(m): m.label for m in EngineState} == {0: "initialising", 1: "running", 2: "paused", 3: "closing"}
    assert {int(m): m.label for m in SimMode} == {0: "realtime", 1: "deterministic", 2: "fast"}
    assert {int(m): m.label for m in Mode} == {0: "training", 1: "inference"}
    assert {int(m): m.label for m in GpuObsMode} == {0: "cpu", 1: "cuda_ipc", 2: "vulkan_external"}
    assert ImageFormat.labels() == ("auto", "rgb", "bgr", "rgba", "bgra", "gray")
    assert Service.labels() == ("Agent", "MuJoCo", "MujocoScene", "Telemetry", "Scene", "Camera", "Viewport", "Debug")


def test_messages_use_the_same_enums() -> None:
    assert messages.Service is Service
    assert messages.SetSimulationModeReq().mode is SimMode.REALTIME


@pytest.mark.parametrize("vocab", VOCABULARIES)
@given(value=st.integers(-(2**64), 2**64))
def test_name_of_never_raises(vocab: type[EngineState], value: int) -> None:
    name = vocab.name_of(value)
    member = vocab.get(value)
    assert name == (member.label if member is not None else f"unknown ({value})")


def test_name_of_an_unknown_value() -> None:
    assert EngineState.name_of(7) == "unknown (7)"
    assert EngineState.name_of(3) == "closing"
    assert SimMode.get(True) is None and SimMode.get("0") is None


def test_from_label_round_trips_and_lists_the_choices() -> None:
    for vocab in VOCABULARIES:
        for member in vocab:
            assert vocab.from_label(member.label) is member
    with pytest.raises(ValueError, match="ImageFormat: 'yuv', expected one of auto, rgb, bgr"):
        ImageFormat.from_label("yuv")


def test_describe_for_messages() -> None:
    assert SimMode.describe() == "0 realtime, 1 deterministic, 2 fast"
    assert EngineState.max_value() == 3


def test_service_bits_and_masks() -> None:
    assert Service.CAMERA.bit == 0x20
    assert Service.all_mask() == 0xFF
    assert Service.names_in(0x3F) == ["Agent", "MuJoCo", "MujocoScene", "Telemetry", "Scene", "Camera"]
    assert Service.in_mask(0x100 | Service.DEBUG.bit) == [Service.DEBUG]  # unknown bits are ignored
    assert Service.names_in(0) == []


def test_image_format_channels() -> None:
    assert [f.channels for f in ImageFormat] == [None, 3, 3, 4, 4, 1]
    assert [f.label for f in ImageFormat if f.has_alpha] == ["rgba", "bgra"]
    assert [f.label for f in ImageFormat if f.blue_first] == ["bgr", "bgra"]


@pytest.mark.parametrize(
    ("fmt", "channels", "want"),
    [
        (0, 1, ImageFormat.GRAY),
        (0, 3, ImageFormat.RGB),
        (0, 4, ImageFormat.RGBA),
        (0, 2, None),
        (0, 0, None),
        (1, 3, ImageFormat.RGB),
        (2, 3, ImageFormat.BGR),
        (4, 4, ImageFormat.BGRA),
        (5, 1, ImageFormat.GRAY),
        (1, 4, None),
        (5, 3, None),
        (6, 3, None),
        (2**32 - 1, 3, None),
    ],
)
def test_resolve(fmt: int, channels: int, want: ImageFormat | None) -> None:
    assert ImageFormat.resolve(fmt, channels) is want
