"""``lucky-monitor record``: a playable video from consistent copies only, ended cleanly by Ctrl-C.

Videos are read back with imageio-ffmpeg's reader (ffmpeg decoding the file
from scratch), so "playable" means a decoder read every frame.
"""

from __future__ import annotations

import gc
import re
import signal
import struct
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from lucky_monitor.core.session import MonitorSession
from lucky_monitor.headless.record import even_frame, record
from lucky_monitor.protocol.header import OFFSET
from lucky_monitor.transport.shm import platform_kind
from tests.conftest import unique_segment_name

imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(platform_kind() != "dir", reason="segments are exercised on Linux"),
]


def engine_clock(seg, events, *, beats_until: int | None = None):
    """A fake clock that plays the engine: each call is 10 ms later and beats the heartbeat (up to call
    ``beats_until``); at call ``k`` it runs ``events[k]()`` (a write begun, the segment unlinked ...)."""
    t = {"now": 0.0, "calls": 0}

    def clock() -> float:
        t["calls"] += 1
        t["now"] += 0.01
        if beats_until is None or t["calls"] < beats_until:
            seg.set("heartbeat_ns", time.monotonic_ns())
        event = events.get(t["calls"])
        if event is not None:
            event()
        return t["now"]

    return clock


def decode(path) -> list[np.ndarray]:
    """Every frame of the video at ``path``, RGB."""
    with warnings.catch_warnings():
        # imageio-ffmpeg's reader leaves its ffmpeg pipes to the garbage collector (the writer does not)
        warnings.simplefilter("ignore", ResourceWarning)
        gen = imageio_ffmpeg.read_frames(str(path))
        meta = next(gen)
        w, h = meta["size"]
        frames = [np.frombuffer(f, np.uint8).reshape(h, w, 3).copy() for f in gen]
        gen.close()
        del gen
        gc.collect()
    return frames


def test_even_frame_pads_with_black_only_when_needed() -> None:
    img = np.full((5, 7, 3), 9, np.uint8)
    out = even_frame(img)
    assert out.shape == (6, 8, 3) and (out[:5, :7] == 9).all() and (out[5] == 0).all() and (out[:, 7] == 0).all()
    assert even_frame(out) is not None and even_frame(out).shape == (6, 8, 3)


def test_ctrl_c_leaves_a_playable_file_with_every_frame_it_reports(tmp_path, subprocess_env) -> None:
    sim = subprocess.Popen(
        [sys.executable, "-m", "lucky_monitor", "sim", "--envs", "4", "--image", "128x96", "--hz", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env,
    )
    rec = None
    try:
        assert sim.stdout is not None
        name = sim.stdout.readline().strip()
        assert name.startswith("LuckyEngine_")
        out = tmp_path / "run.mp4"
        rec = subprocess.Popen(
            [sys.executable, "-m", "lucky_monitor", "record", name, "-o", str(out), "--fps", "15"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env,
        )
        time.sleep(4.0)  # start-up, then a few seconds of video
        assert rec.poll() is None, rec.communicate()
        rec.send_signal(signal.SIGINT)
        stdout, stderr = rec.communicate(timeout=30)
        assert rec.returncode == 0, stderr
        assert "Traceback" not in stderr and "frame" in stderr  # the progress bar
        m = re.search(r"stopped by Ctrl-C: (\d+) frames .* \(?.*256x192\) written", stdout)
        assert m, stdout
        frames = decode(out)
        assert len(frames) == int(m.group(1)) >= 10
        # a 2x2 grid of the reference engine's images: each tile's left edge is its red bar
        for f in frames[:: max(1, len(frames) // 5)]:
            for x in (1, 129):
                r, g, b = (int(v) for v in f[48, x])
                assert r > 200 and g < 60 and b < 60, (x, r, g, b)
    finally:
        for p in (rec, sim):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for p in (rec, sim):
            if p is not None:
                for s in (p.stdout, p.stderr):
                    if s is not None:
                        s.close()


def test_a_torn_copy_never_reaches_the_video(segment_factory, tmp_path) -> None:
    """The engine rewrites the images from red to blue to green; it is caught mid-write (odd image_seq,
    half blue) at every poll of one stretch. No frame of the video may show blue."""
    seg = segment_factory(num_envs=1, image=(32, 32, 3))
    seg.set("heartbeat_ns", time.monotonic_ns())
    seg.images[0] = (255, 0, 0)
    seg.set("image_seq", 2)

    def begin() -> None:
        seg.set("image_seq", 3)  # a write begins ...
        seg.images[0, :16] = (0, 0, 255)  # ... and is half done for a long while

    def done() -> None:
        seg.images[0] = (0, 255, 0)
        seg.set("image_seq", 4)  # ... done: green

    clock = engine_clock(seg, {150: begin, 300: done})

    session = MonitorSession(seg.name, tools=False, images=False, discover=False, traffic=False, clock=clock)
    out = tmp_path / "torn.mp4"
    try:
        stats = record(
            session, str(out), fps=20, seconds=5, env=None, columns=None, timeout_s=2, stop={"now": False}, clock=clock
        )
    finally:
        session.close()
    frames = decode(out)
    assert len(frames) == stats.frames == 100
    colours = [tuple(int(v) for v in f[8, 8]) for f in frames]
    red = [c for c in colours if c[0] > 200 and c[1] < 60 and c[2] < 60]
    green = [c for c in colours if c[1] > 200 and c[0] < 60 and c[2] < 60]
    assert len(red) + len(green) == len(colours), set(colours)  # nothing blue, nothing half-way
    assert red and green and colours.index(green[0]) == len(red)  # red, then green, never back
    assert stats.torn > 0 and stats.new_images == 2


def test_a_missing_dependency_is_named_with_its_extra(monkeypatch, tmp_path, capsys) -> None:
    import importlib.util

    from lucky_monitor.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "imageio_ffmpeg" else real(n, *a))
    monkeypatch.setattr("lucky_monitor.cli._precheck", lambda name, allow: name)
    assert main(["record", "LuckyEngine_x", "-o", str(tmp_path / "x.mp4")]) == 5
    assert "pip install 'lucky-monitor[headless]'" in capsys.readouterr().err


def test_setup_errors_are_one_line_with_no_progress_bar_before_them(tmp_path, subprocess_env) -> None:
    """What is wrong with the request is said before a frame is written: no bar, no ffmpeg output."""
    name = unique_segment_name("recbad")
    py = [sys.executable, "-m", "lucky_monitor"]
    sim = subprocess.Popen(
        [*py, "sim", "--name", name, "--envs", "3", "--image", "16x8", "--hz", "50"],
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env,
    )
    try:
        assert sim.stdout is not None and sim.stdout.readline().strip() == name
        for argv, code, text in [
            (["--env", "9", "-o", str(tmp_path / "a.mp4")], 2, "--env 9: the segment has 3 envs (0..2)"),
            (["-o", str(tmp_path / "a.xyz")], 2, "the video's format comes from its extension: .mp4, .mkv, .mov"),
        ]:
            r = subprocess.run(
                [*py, "record", name, "--seconds", "1", *argv],
                capture_output=True,
                text=True,
                env=subprocess_env,
                timeout=60,
            )
            assert r.returncode == code, r.stderr
            assert r.stderr.count("\n") == 1 and text in r.stderr and "frame/s" not in r.stderr, r.stderr
        assert not (tmp_path / "a.xyz").exists() and not (tmp_path / "a.mp4").exists()
    finally:
        sim.terminate()
        sim.wait(10)
        sim.stdout.close()


def test_the_engine_going_away_ends_the_video_with_its_last_image(segment_factory, tmp_path) -> None:
    seg = segment_factory(num_envs=2, image=(16, 8, 3))
    seg.set("heartbeat_ns", time.monotonic_ns())
    seg.images[:] = (0, 255, 0)
    seg.set("image_seq", 2)
    clock = engine_clock(seg, {200: seg.unlink}, beats_until=200)  # the engine closes and removes its segment

    session = MonitorSession(seg.name, tools=False, images=False, discover=False, traffic=False, clock=clock)
    out = tmp_path / "gone.mp4"
    try:
        stats = record(
            session, str(out), fps=20, seconds=None, env=1, columns=None, timeout_s=2, stop={"now": False}, clock=clock
        )
    finally:
        session.close()
    assert stats.ended == "engine exited (segment unlinked)" and not stats.interrupted  # the link's words
    frames = decode(out)
    assert len(frames) == stats.frames > 10 and frames[0].shape == (8, 16, 3)
    assert all(tuple(int(v) for v in f[4, 8]) == pytest.approx((0, 255, 0), abs=12) for f in frames)


def test_a_header_broken_under_the_recording_ends_it_with_the_links_reason(segment_factory, tmp_path) -> None:
    # The engine is alive; its header stops being one: the recording says so ("engine gone" had been said).
    seg = segment_factory(num_envs=2, image=(16, 8, 3))
    seg.images[:] = (0, 255, 0)
    seg.set("image_seq", 2)
    clock = engine_clock(seg, {200: lambda: struct.pack_into("<I", seg.buf, OFFSET["magic"], 0x12345678)})

    session = MonitorSession(seg.name, tools=False, images=False, discover=False, traffic=False, clock=clock)
    try:
        stats = record(
            session,
            str(tmp_path / "b.mp4"),
            fps=20,
            seconds=None,
            env=1,
            columns=None,
            timeout_s=2,
            stop={"now": False},
            clock=clock,
        )
    finally:
        session.close()
    want = f"{seg.name}: incompatible (header field magic changed while attached (0x4C524243 -> 0x12345678))"
    assert stats.ended == want
    assert stats.frames > 10
