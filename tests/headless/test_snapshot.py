"""``lucky-monitor snapshot``: exact pixels from a consistent copy, written by the Qt-free PNG encoder.

Pillow, an independent PNG decoder, reads every file back; the expected pixels
are computed here from the segment's stored bytes, not by the monitor's tiler.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from PIL import Image

from lucky_monitor.cli import main
from lucky_monitor.headless.png import encode_png, write_png
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine
from lucky_monitor.transport.shm import platform_kind
from tests.conftest import unique_segment_name

pytestmark = pytest.mark.timeout(60)

linux_only = pytest.mark.skipif(platform_kind() != "dir", reason="segments are exercised on Linux")


def read_png(path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im).copy()


@pytest.mark.parametrize("shape", [(7, 5), (7, 5, 3), (3, 9, 4), (1, 1, 3)])
def test_png_round_trips_through_an_independent_decoder(tmp_path, shape) -> None:
    rng = np.random.default_rng(len(shape) * 100 + shape[0])
    img = rng.integers(0, 256, shape, dtype=np.uint8)
    write_png(tmp_path / "x.png", img)
    np.testing.assert_array_equal(read_png(tmp_path / "x.png"), img)
    assert os.listdir(tmp_path) == ["x.png"]  # no temporary left behind


@pytest.mark.parametrize(
    "bad", [np.zeros((2, 2, 2), np.uint8), np.zeros((2, 2, 3), np.float32), np.zeros((0, 4, 3), np.uint8)]
)
def test_png_refuses_what_it_cannot_encode(bad) -> None:
    with pytest.raises(ValueError, match="PNG"):
        encode_png(bad)


@pytest.fixture
def engine():
    made: list[ReferenceEngine] = []

    def make(**kw: object) -> ReferenceEngine:
        base: dict[str, object] = {"num_envs": 7, "obs_size": 8, "act_size": 2, "image": (20, 12), "camera_fps": 0}
        base.update(kw)
        eng = ReferenceEngine(EngineConfig(name=unique_segment_name("snap"), **base))  # type: ignore[arg-type]
        made.append(eng)
        for _ in range(3):
            eng.tick()
        return eng

    yield make
    for eng in made:
        eng.close()


def rgb_top_down(stored: np.ndarray, fmt: str, bottom_up: bool) -> np.ndarray:
    """The oracle: one env's stored image as RGB, row 0 at the top."""
    img = stored[::-1] if bottom_up else stored
    if fmt == "gray":
        return np.repeat(img[..., :1], 3, axis=2)
    if fmt in ("bgr", "bgra"):
        return img[..., 2::-1]
    return img[..., :3]


@linux_only
@pytest.mark.parametrize(("fmt", "bottom_up"), [("rgb", False), ("bgr", True), ("bgra", False), ("gray", True)])
def test_env_snapshot_is_the_stored_image_normalised(engine, tmp_path, fmt, bottom_up, capsys) -> None:
    eng = engine(fmt=fmt, bottom_up=bottom_up)
    out = tmp_path / "env.png"
    assert main(["snapshot", eng.name, "-o", str(out), "--env", "5"]) == 0
    assert "env 5 20x12 written" in capsys.readouterr().out
    got = read_png(out)
    assert got.shape == (12, 20, 3)
    np.testing.assert_array_equal(got, rgb_top_down(np.asarray(eng.seg.images[5]), fmt, bottom_up))
    # the reference engine paints a red bar on each image's left edge: red, not blue, after decoding
    if fmt != "gray":
        edge = [tuple(int(v) for v in px) for px in got[:, 0]]
        assert (255, 0, 0) in edge and (0, 0, 255) not in edge


@linux_only
@pytest.mark.parametrize(("cols", "labels"), [(None, False), (2, False), (7, True)])
def test_grid_snapshot_is_row_major_without_gaps(engine, tmp_path, cols, labels) -> None:
    eng = engine(fmt="bgr", bottom_up=True)
    out = tmp_path / "grid.png"
    argv = ["snapshot", eng.name, "-o", str(out)]
    argv += [] if cols is None else ["--cols", str(cols)]
    argv += ["--labels"] if labels else []
    assert main(argv) == 0
    got = read_png(out)
    c = 3 if cols is None else cols  # ceil(sqrt(7)) = 3
    gap = 2 if labels else 0
    rows = -(-7 // c)
    assert got.shape == (rows * 12 + (rows - 1) * gap, c * 20 + (c - 1) * gap, 3)
    for env in range(7):
        row, col = divmod(env, c)
        y0, x0 = row * (12 + gap), col * (20 + gap)
        tile = got[y0 : y0 + 12, x0 : x0 + 20]
        want = rgb_top_down(np.asarray(eng.seg.images[env]), "bgr", True)
        if labels:
            # the corner carries the label (white ink on black); every other pixel is the image's
            assert (tile[:7, :5] == 0).all(axis=-1).any() and (tile[:7, :5] == 255).all(axis=-1).any()
            np.testing.assert_array_equal(tile[8:], want[8:])
            np.testing.assert_array_equal(tile[:, 6:], want[:, 6:])
        else:
            np.testing.assert_array_equal(tile, want)
    if not labels and rows * c > 7:  # empty slots of the last row hold the gap colour
        assert (got[-12:, -20:] == 40).all()


@linux_only
def test_bad_input_is_one_line_and_a_documented_code(engine, tmp_path, segment_factory, capsys) -> None:
    eng = engine()
    out = str(tmp_path / "x.png")
    assert main(["snapshot", eng.name, "-o", out, "--env", "7"]) == 2
    assert main(["snapshot", eng.name, "-o", out, "--cols", "0"]) == 2
    assert main(["snapshot", eng.name, "-o", str(tmp_path)]) == 2
    assert main(["snapshot", unique_segment_name("none"), "-o", out]) == 5
    noimg = segment_factory()
    noimg.set("heartbeat_ns", time.monotonic_ns())
    assert main(["snapshot", noimg.name, "-o", out, "--timeout", "2"]) == 5
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 5 and all(line.startswith("lucky-monitor: error: ") for line in err)
    assert "no image region" in err[-1]
    assert not os.path.exists(out)


@linux_only
def test_a_grid_too_large_to_hold_is_a_usage_error_with_cols_and_unavailable_without(
    engine, tmp_path, monkeypatch, capsys
) -> None:
    """The grid's size is checked before any copy: --cols that make it too large are the user's to change
    (exit 2, as any --cols out of range); the default layout too large is exit 5 and says to choose one."""
    import lucky_monitor.core.tiler as tiler_mod

    eng = engine()  # 7 envs of 20x12: 2 columns make a 40-pixel-wide grid, 3 a 60, 7 a 140
    monkeypatch.setattr(tiler_mod, "MAX_GRID_SIDE", 45)
    out = str(tmp_path / "x.png")
    assert main(["snapshot", eng.name, "-o", out, "--cols", "7"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == (
        "lucky-monitor: error: snapshot: --cols 7 gives a 140x12x3 grid, over 45 pixels a side or 1073741824 bytes"
        " (usage: lucky-monitor snapshot --help)"
    )
    assert main(["snapshot", eng.name, "-o", out]) == 5
    assert "choose the layout with --cols" in capsys.readouterr().err
    assert not os.path.exists(out)
    monkeypatch.setattr(tiler_mod, "MAX_GRID_SIDE", 100)  # 3 columns, 3 rows: 60 x 36 fits
    assert main(["snapshot", eng.name, "-o", out, "--cols", "2"]) == 0


@linux_only
def test_an_engine_that_never_stops_writing_images_gives_no_picture(segment_factory, tmp_path, capsys) -> None:
    seg = segment_factory(image=(8, 6, 3))
    seg.set("heartbeat_ns", time.monotonic_ns())
    seg.set("image_seq", 3)  # odd: the engine is inside a write, and stays there
    out = tmp_path / "x.png"
    assert main(["snapshot", seg.name, "-o", str(out), "--timeout", "0.5"]) == 5
    assert "no consistent copy" in capsys.readouterr().err
    assert not out.exists()


@linux_only
def test_an_image_region_over_the_copy_limit_is_refused_without_allocating_it(
    engine, tmp_path, monkeypatch, capsys
) -> None:
    """A valid header may describe 256 GiB of images: no buffer of that size is made, one line says why."""
    import lucky_monitor.core.monitor as monitor_mod
    import lucky_monitor.headless._common as common_mod
    from lucky_monitor.core.session import MonitorSession

    eng = engine()
    region = eng.seg.header.num_envs * eng.seg.header.image_bytes_per_env
    monkeypatch.setattr(monitor_mod, "FULL_IMAGE_COPY_MAX_BYTES", region - 1)
    monkeypatch.setattr(common_mod, "FULL_IMAGE_COPY_MAX_BYTES", region - 1)
    out = str(tmp_path / "x.png")
    assert main(["snapshot", eng.name, "-o", out]) == 5
    line = capsys.readouterr().err.strip()
    assert line.startswith("lucky-monitor: error: ") and "this command copies at once" in line, line
    assert not os.path.exists(out)
    session = MonitorSession.read_only(eng.name)
    try:
        deadline = time.monotonic() + 5
        while not session.step().attached and time.monotonic() < deadline:
            time.sleep(0.01)
        assert session._link.images is None  # no whole-region buffer
    finally:
        session.close()


@linux_only
def test_a_dead_engines_segment_is_refused_without_waiting_out_the_timeout(segment_factory, tmp_path, capsys) -> None:
    """The segment of an engine that died is not waited on for the whole --timeout: once the state has
    read "engine exited" for a second, one line says so (exit 5)."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid that is gone
    seg = segment_factory(image=(8, 6, 3), server_pid=child.pid)
    seg.set("heartbeat_ns", time.monotonic_ns())
    out = tmp_path / "x.png"
    t0 = time.monotonic()
    assert main(["snapshot", seg.name, "-o", str(out), "--timeout", "600"]) == 5
    assert time.monotonic() - t0 < 60  # not the 600 s asked for
    err = capsys.readouterr().err.strip()
    assert (
        err == f"lucky-monitor: error: could not attach to {seg.name}: engine exited (engine pid {child.pid} is gone)"
    )
    assert not out.exists()


@linux_only
@pytest.mark.parametrize("command", ["snapshot", "record"])
def test_an_engine_that_dies_inside_an_image_write_is_said_without_waiting_out_the_timeout(
    segment_factory, tmp_path, capsys, command
) -> None:
    """Seen: `snapshot`/`record` waited their whole --timeout for a consistent copy after the engine had died
    inside a write, then said "engine exited"; now a second or so after it died."""
    import subprocess
    import sys
    import threading

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        seg = segment_factory(image=(8, 6, 3), server_pid=child.pid)
        seg.set("heartbeat_ns", time.monotonic_ns())
        seg.set("image_seq", 3)  # odd: inside a write, for good
        killer = threading.Timer(1.5, child.kill)
        killer.start()
        out = tmp_path / ("x.png" if command == "snapshot" else "x.mp4")
        t0 = time.monotonic()
        argv = [command, seg.name, "-o", str(out), "--timeout", "600"]
        argv += ["--seconds", "5"] if command == "record" else []
        assert main(argv) == 5
        assert time.monotonic() - t0 < 60  # not the 600 s asked for
        err = capsys.readouterr().err.strip()
        assert err.startswith("lucky-monitor: error: no consistent copy of the images"), err
        assert err.endswith(f"engine exited (engine pid {child.pid} is gone)"), err
        assert not out.exists()
    finally:
        child.kill()
        child.wait()
