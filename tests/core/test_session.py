"""MonitorSession and its Tick against the reference engine, in-process (no Qt).

Each test steps an in-process engine and the session alternately, the way the
window's timer interleaves them; regressions of readouts found wrong are named
after what a user saw.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from lucky_monitor.core.monitor import LinkState
from lucky_monitor.core.pacing import Yielder
from lucky_monitor.core.session import DisplayOptions, MonitorSession, Tick, ViewRequest
from lucky_monitor.protocol.ring import RingWriter
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine
from lucky_monitor.transport.shm import platform_kind, shm_path
from lucky_monitor.watch import JSON_KEYS, Watcher
from tests.conftest import dead_pid, unique_segment_name

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(platform_kind() != "dir", reason="segments are exercised on Linux"),
]


def config(name: str | None = None, **kw: object) -> EngineConfig:
    base: dict[str, object] = {
        "num_envs": 6,
        "obs_size": 8,
        "act_size": 2,
        "image": (16, 12),
        "sim_mode": 2,
        "camera_fps": 0,
        "cmd_ring_size": 64 * 1024,
        "tools_ring_size": 16 * 1024,
    }
    base.update(kw)
    return EngineConfig(name=name or unique_segment_name("sess"), **base)  # type: ignore[arg-type]


def run(session: MonitorSession, engines: list[ReferenceEngine], until, what: str, timeout: float = 20.0) -> Tick:
    deadline = time.monotonic() + timeout
    while True:
        for eng in engines:
            if not eng.seg.closed:
                eng.tick()
        tick = session.step()
        if until(tick):
            return tick
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}: {tick.state} {tick.text!r} {tick.reason!r}")


@pytest.fixture
def engines():
    made: list[ReferenceEngine] = []
    yield made
    for eng in made:
        eng.close()


def test_tick_is_one_consistent_snapshot(engines) -> None:
    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name)
    tick = run(s, engines, lambda t: t.image is not None and t.tools.ours, "first image and the tools channel")
    assert tick.state is LinkState.FREE_RUNNING and tick.attached
    assert tick.header is not None and tick.header.num_envs == 6
    assert tick.live is not None and tick.live.frame_seq >= 1 and tick.live.turn == "free-run"
    assert tick.image.grid.shape[2] == 3 and not tick.image.grid.flags.writeable
    assert tick.engine_alive is True and tick.trainer_alive is None
    assert tick.history is not None and tick.history.num_envs == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        tick.state = LinkState.STALLED  # type: ignore[misc]
    # The frame's views equal the engine's arrays and cannot be written through.
    tick = run(s, engines, lambda t: t.frame is not None, "a frame")
    np.testing.assert_array_equal(tick.frame.rewards, eng.seg.rewards)
    with pytest.raises(ValueError):
        tick.frame.rewards[0] = 1.0
    s.close()


@pytest.mark.parametrize(("second", "channels"), [({"fmt": "rgba"}, 4), ({"fmt": "gray"}, 1), ({"fmt": "bgr"}, 3)])
def test_engine_recreated_with_another_channel_count_reattaches_in_its_new_geometry(engines, second, channels) -> None:
    # Seen: "engine exited — segment lost: src_format: rgb needs 3 channels, images have 4", forever.
    first = ReferenceEngine(config())
    engines.append(first)
    s = MonitorSession(first.name)
    t1 = run(s, engines, lambda t: t.image is not None, "images of the first engine")
    assert t1.header.image_channels == 3
    first.close()
    new = ReferenceEngine(config(first.name, **second), exist_ok=True)
    engines.append(new)
    t2 = run(
        s,
        engines,
        lambda t: (
            t.header is not None
            and t.header.session_id == new.header.session_id
            and t.image is not None
            and t.image.new
        ),
        "images of the recreated engine",
    )
    assert t2.header.image_channels == channels
    assert t2.state is not LinkState.ENGINE_EXITED and t2.display_error is None
    assert t2.generation > t1.generation
    assert t2.image.layout.channels == channels
    s.close()


def test_close_from_inside_a_step_never_raises(engines) -> None:
    # Seen: Ctrl-C during a tick gave KeyError: 'image_seq'. A signal handler runs
    # between two bytecodes, here simulated from inside the image copy.
    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name)
    run(s, engines, lambda t: t.image is not None, "first image")
    sink = s._sink

    def sink_then_close(images: np.ndarray) -> None:
        sink(images)
        s.close()

    s._link.image_sink = sink_then_close
    eng.tick()
    tick = s.step()  # must not raise
    assert s.closed
    assert isinstance(tick, Tick)
    later = s.step()
    assert later.header is None or later.live is None


def test_counters_results_and_rates_belong_to_one_attach(engines) -> None:
    # Seen: after the engine died the status bar kept the last frames/s, and after
    # reattach the dead session's torn counts and command results stayed on screen.
    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name)
    run(s, engines, lambda t: t.tools.ours, "tools channel")
    s.set_service(99, True)
    tick = s.step()
    assert tick.results and tick.results[0].status == "error"
    tick = run(s, engines, lambda t: t.rates.frames_per_s is not None and t.counters.frames_seen > 20, "rates")
    eng.close()
    assert tick.engine_alive is True
    dead = run(s, [], lambda t: t.state is LinkState.ENGINE_EXITED, "engine exited")
    assert dead.engine_alive is False  # watch --json said null: the engine is known to be gone
    assert dead.rates.frames_per_s is None and dead.rates.images_per_s is None
    assert dead.live is None and dead.image is None and dead.history is None
    new = ReferenceEngine(config(eng.name), exist_ok=True)
    engines.append(new)
    back = run(
        s, engines, lambda t: t.header is not None and t.header.session_id == new.header.session_id, "reattached"
    )
    assert back.counters.frames_seen <= 1 and back.counters.frames_skipped == 0
    assert back.engine_alive is True
    assert back.results == ()
    assert back.reattached == 1 and back.notice and "reattached" in back.notice
    s.close()


def test_unreadable_reply_on_the_tools_ring_is_an_error_result(engines) -> None:
    # Seen: ring corruption was invisible; a corrupt tools reply must show as an error.
    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name)
    run(s, engines, lambda t: t.tools.ours, "tools channel")
    h = eng.header
    writer = RingWriter(eng.seg.buf, h.tools_s2c_offset, h.tools_ring_size)
    writer._pos[0] = writer._pos[0]  # the engine's own writer shares these words
    writer.push(b"\x07" * 24)  # not an envelope
    tick = s.step()
    errors = [r for r in tick.results if r.kind == "reply"]
    assert errors and errors[0].status == "error" and "undecodable" in errors[0].text
    s.close()


def test_draw_input_is_checked_by_one_builder_and_reported(engines) -> None:
    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name)
    run(s, engines, lambda t: t.tools.ours, "tools channel")
    assert s.draw("line", start=(0, 0, float("nan")), end=(1, 1, 1)) is False
    tick = s.step()
    assert tick.results[0].kind == "line" and tick.results[0].status == "error"
    assert s.draw("line", start=(0, 0, 0), end=(1, 1, 1)) is True
    tick = run(s, engines, lambda t: any(r.kind == "line" for r in t.results), "line answered")
    line = next(r for r in tick.results if r.kind == "line")
    assert line.ok and line.rtt_s is not None
    assert tick.commands.draws_answered == 1
    s.close()


def test_a_tools_channel_taken_from_under_the_window_is_given_up_not_written(engines) -> None:
    """Seen: another process wrote its pid into the owner word; the window went on sending beside it (two
    producers on tools c2s) and showed nothing. A send now finds the word not ours: nothing is written, the
    channel is given up, and the state says who holds it."""
    import struct

    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name)
    run(s, engines, lambda t: t.tools.ours, "tools channel")
    h = eng.header
    other = os.getppid()  # a live process that is not this monitor
    struct.pack_into("<I", eng.seg.buf, h.tools_offset, other)
    c2s_pos = bytes(eng.seg.buf[h.tools_offset + 64 : h.tools_offset + 72])  # tools c2s write_pos
    assert s.draw("line", start=(0, 0, 0), end=(1, 1, 1)) is False  # a fine line, not sent ...
    tick = s.step()
    line = next(r for r in tick.results if r.kind == "line")
    assert line.status == "error" and line.text == f"error: tools channel held by pid {other}", line
    assert bytes(eng.seg.buf[h.tools_offset + 64 : h.tools_offset + 72]) == c2s_pos  # ... but nothing was written
    tick = run(s, [], lambda t: not t.tools.ours and t.tools.owner_pid == other, "the holder named", timeout=5.0)
    assert tick.tools.reason == f"tools channel held by pid {other}"
    assert struct.unpack_from("<I", eng.seg.buf, h.tools_offset)[0] == other  # the taker's word left alone
    s.close()


def test_display_options_are_plain_values_applied_at_the_next_step(engines) -> None:
    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name)
    t = run(s, engines, lambda t: t.image is not None, "first image")
    assert t.image.layout.columns != 1
    s.set_display(DisplayOptions(columns=1, swap_rb=True))
    t = s.step()  # no new engine frame needed: the session copies again
    assert t.image is not None and t.image.new and t.image.layout.columns == 1
    assert t.image.options.swap_rb
    reading = s.read_pixel(0, 0, 0)
    shown = t.image.grid[0, 0].tolist()
    assert reading is not None and reading.format == "rgb" and list(reading.shown) == shown
    assert list(reading.stored) == shown[::-1]
    assert reading.stored == tuple(int(v) for v in eng.seg.images[0, 0, 0])
    assert reading.row is None  # rows as stored: y is the stored row
    s.set_display(DisplayOptions(columns=1, flip_rows=True))
    s.step()
    h = eng.seg.images.shape[1]
    reading = s.read_pixel(0, 2, 1)
    assert reading is not None and reading.y == 1 and reading.row == h - 2  # shown at row 1, read at its stored row
    assert reading.stored == tuple(int(v) for v in eng.seg.images[0, h - 2, 2])
    s.close()


def test_segment_list_age_is_the_engine_sessions_start(engines) -> None:
    # Seen: the picker's age was the file's mtime, which every write through the mapping moves.
    eng = ReferenceEngine(config(unique_segment_name("age")))
    engines.append(eng)
    s = MonitorSession(eng.name, prefix="LuckyEngine_age")
    tick = run(s, engines, lambda t: any(e.name == eng.name for e in t.segments), "listed")
    entry = next(e for e in tick.segments if e.name == eng.name)
    assert entry.alive and entry.age_s is not None
    started = time.time() - entry.age_s
    # This process is the engine: its start is the session's start, long before any write.
    assert started <= time.time() - (time.monotonic() - eng_start_monotonic()) + 2.0
    s.close()


def eng_start_monotonic() -> float:
    with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime", encoding="ascii") as f:
        uptime = float(f.read().split()[0])
    return time.monotonic() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def test_read_only_session_never_claims_the_tools_channel(engines) -> None:
    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False, images=False)
    tick = run(s, engines, lambda t: t.rates.images_per_s is not None and t.tools.exported, "image rate")
    off = eng.header.tools_offset
    assert int.from_bytes(eng.seg.buf[off : off + 4], "little") == 0
    assert tick.tools.exported and not tick.tools.ours and tick.tools.owner_pid == 0
    assert tick.image is None and tick.rates.images_per_s is not None
    s.close()


# ---------------------------------------------------------------------------
# watch
# ---------------------------------------------------------------------------


def test_watcher_json_lines_carry_every_documented_key(engines) -> None:
    import io

    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False, images=False)
    out = io.StringIO()
    w = Watcher(out, json_lines=True, interval=0.05)
    deadline = time.monotonic() + 10
    while out.getvalue().count("\n") < 3 and time.monotonic() < deadline:
        eng.tick()
        w.feed(s.step())
        time.sleep(0.005)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert lines[0]["event"] == "state" and lines[0]["state"] == "free-running"
    for rec in lines:
        assert tuple(rec) == JSON_KEYS
    summary = next(r for r in lines if r["event"] == "summary")
    assert summary["num_envs"] == 6 and summary["frame_seq"] >= 1 and summary["engine_alive"] is True
    s.close()


def test_a_fixed_header_field_rewritten_while_attached_drops_the_attach(engines) -> None:
    """C7: only live fields change. One that does not (num_envs 6 -> 5000) is seen within about a second,
    as a fresh attach sees it; put back, the segment is attached again (a new generation)."""
    import struct

    from lucky_monitor.protocol.header import OFFSET

    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False, images=False)
    tick = run(s, engines, lambda t: t.state is LinkState.FREE_RUNNING, "attached")
    generation = tick.generation
    struct.pack_into("<I", eng.seg.buf, OFFSET["num_envs"], 5000)
    tick = run(s, engines, lambda t: t.state is LinkState.INCOMPATIBLE, "the change seen", timeout=5.0)
    assert "num_envs" in tick.reason, tick.reason
    struct.pack_into("<I", eng.seg.buf, OFFSET["num_envs"], 6)
    tick = run(s, engines, lambda t: t.state is LinkState.FREE_RUNNING, "attached again", timeout=5.0)
    assert tick.generation > generation and tick.header is not None and tick.header.num_envs == 6
    s.close()


def test_a_fixed_field_rewritten_to_a_self_consistent_header_stays_incompatible_until_put_back(engines) -> None:
    """Seen: image_height 32 -> 16 (still a valid header) was attached again 20 ms after the change was seen,
    the grid showing the images' bytes at the wrong size as healthy. Same session_id: the first attach's
    non-live fields stand (C7), and a header that differs is incompatible until they come back."""
    import struct

    from lucky_monitor.protocol.header import OFFSET

    eng = ReferenceEngine(config(image=(16, 16)))
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False, images=False)
    tick = run(s, engines, lambda t: t.state is LinkState.FREE_RUNNING, "attached")
    generation = tick.generation
    struct.pack_into("<I", eng.seg.buf, OFFSET["image_height"], 8)
    tick = run(s, engines, lambda t: t.state is LinkState.INCOMPATIBLE, "the change seen", timeout=5.0)
    deadline = time.monotonic() + 2.0  # several attach attempts: each refused
    while time.monotonic() < deadline:
        eng.tick()
        tick = s.step()
        assert tick.state is LinkState.INCOMPATIBLE and tick.header is None, (tick.state, tick.reason)
    assert (
        tick.reason
        == "header field image_height differs from this session's first attach (16 -> 8): only live fields change"
    )
    struct.pack_into("<I", eng.seg.buf, OFFSET["image_height"], 16)
    tick = run(s, engines, lambda t: t.state is LinkState.FREE_RUNNING, "attached again", timeout=5.0)
    assert tick.generation > generation and tick.header is not None and tick.header.image_height == 16
    s.close()


@pytest.mark.parametrize(("field", "bad", "good"), [("engine_state", 7, 1), ("sim_mode", 9, 0)])
def test_a_live_field_out_of_its_range_while_attached_reads_incompatible(engines, field, bad, good) -> None:
    """Rule 9 holds at every poll, not only at attach: an engine_state the protocol has no word for is not
    shown as some other state (it read free-running); put back, the segment is attached again."""
    import struct

    from lucky_monitor.protocol.header import OFFSET

    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False, images=False)
    tick = run(s, engines, lambda t: t.state is LinkState.FREE_RUNNING, "attached")
    generation = tick.generation
    struct.pack_into("<I", eng.seg.buf, OFFSET[field], bad)
    tick = run(s, engines, lambda t: t.state is LinkState.INCOMPATIBLE, "the value seen", timeout=2.0)
    assert field in tick.reason and str(bad) in tick.reason, tick.reason
    assert tick.header is None  # nothing read through the attach is shown any more
    struct.pack_into("<I", eng.seg.buf, OFFSET[field], good)
    tick = run(s, engines, lambda t: t.state is LinkState.FREE_RUNNING, "attached again", timeout=5.0)
    assert tick.generation > generation
    s.close()


@pytest.mark.parametrize("field", ["frame_seq", "action_seq"])
def test_a_count_past_2_63_reads_incompatible_not_a_traceback(engines, field) -> None:
    """Seen: frame_seq set to 2^63 + 101 in a live segment made the window print a HistoryError traceback at
    every tick and `watch` and `export` exit 1 (`export` taking every other segment's metrics with it)."""
    import struct

    from lucky_monitor.protocol.header import OFFSET

    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False, images=False)
    run(s, engines, lambda t: t.state is LinkState.FREE_RUNNING and t.frame is not None, "attached")
    struct.pack_into("<Q", eng.seg.buf, OFFSET[field], (1 << 63) + 101)  # the engine stopped there: not stepped
    deadline = time.monotonic() + 2.0
    tick = s.step()
    while tick.state is not LinkState.INCOMPATIBLE and time.monotonic() < deadline:
        tick = s.step()
    assert tick.state is LinkState.INCOMPATIBLE, (tick.state, tick.reason)
    assert tick.reason == f"{field}: {(1 << 63) + 101}, must be below 2^63 (a count a signed 64-bit integer holds)"
    for _ in range(5):  # and it stays so while the value stays: each attach refuses it
        tick = s.step()
        assert tick.state in (LinkState.INCOMPATIBLE, LinkState.SEARCHING), tick.state
    s.close()


def test_a_trainer_killed_reads_trainer_exited_though_the_engine_cleared_its_pid_first(engines) -> None:
    """Seen: SIGKILL of the trainer went straight from lock-step to free-running in `watch` (3 of 3): the engine
    clears a dead trainer's client_pid within a step, before the monitor's next look at the pid."""
    import struct

    from lucky_monitor.protocol.header import OFFSET

    eng = ReferenceEngine(config())
    engines.append(eng)
    clock = [1000.0]
    s = MonitorSession(eng.name, tools=False, images=False, clock=lambda: clock[0])
    run(s, engines, lambda t: t.state is LinkState.FREE_RUNNING, "attached")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        struct.pack_into("<I", eng.seg.buf, OFFSET["client_pid"], sleeper.pid)  # a "trainer" claims the engine
        tick = run(s, engines, lambda t: t.live is not None and t.live.client_pid == sleeper.pid, "claimed")
        assert tick.state is not LinkState.TRAINER_LOST
    finally:
        sleeper.kill()
        sleeper.wait()
    eng._client_checked = (0, 0.0)  # the engine looks at once ...
    eng.tick()
    assert eng.clients_detached == 1  # ... and clears the pid before the monitor's next poll
    clock[0] += 0.1
    tick = s.step()
    assert tick.state is LinkState.TRAINER_LOST and tick.text == f"trainer pid {sleeper.pid} exited", tick.text
    from lucky_monitor.core.monitor import MonitorCore

    states = []
    for _ in range(round(MonitorCore.TRAINER_GONE_S / 0.25) + 2):  # said for TRAINER_GONE_S, then free-running
        clock[0] += 0.25
        eng.tick()
        beat = struct.unpack_from("<Q", eng.seg.buf, OFFSET["heartbeat_ns"])[0]
        struct.pack_into("<Q", eng.seg.buf, OFFSET["heartbeat_ns"], beat + 1)  # a beat a step (the clock is ours)
        states.append(s.step().state)
    gone = round(MonitorCore.TRAINER_GONE_S / 0.25) - 1
    assert set(states[:gone]) == {LinkState.TRAINER_LOST}, states
    assert states[-1] is LinkState.FREE_RUNNING, states
    s.close()


def test_watcher_says_no_image_rate_without_an_image_region_and_names_a_segment_once(engines) -> None:
    import io

    eng = ReferenceEngine(config(image=None))
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False, images=False)
    out = io.StringIO()
    w = Watcher(out, json_lines=True, interval=0.05)
    deadline = time.monotonic() + 10
    while '"summary"' not in out.getvalue() and time.monotonic() < deadline:
        eng.tick()
        w.feed(s.step())
        time.sleep(0.005)
    summary = next(json.loads(x) for x in out.getvalue().splitlines() if '"summary"' in x)
    assert summary["image"] == "none" and summary["images_per_s"] is None  # not 0.0 images a second
    s.close()
    with open(shm_path(unique_segment_name("garb")), "wb") as f:  # an incompatible segment: its name once
        f.write(b"\xff" * 200)
        name = os.path.basename(f.name)
    try:
        s = MonitorSession(name, tools=False, images=False)
        tick = s.step()
        out = io.StringIO()
        Watcher(out, json_lines=False, interval=10.0).feed(tick)
        line = out.getvalue().strip()
        assert tick.state is LinkState.INCOMPATIBLE and line.count(name) == 1, line
        s.close()
    finally:
        os.unlink(shm_path(name))


def test_watch_prints_the_summary_due_at_its_end(engines) -> None:
    """Seen: `--seconds 2 --interval 0.5` printed summaries at 0.5, 1.0 and 1.5 s, none for the last interval."""
    import argparse

    from lucky_monitor.watch import run_watch

    eng = ReferenceEngine(config())
    engines.append(eng)
    out = io.StringIO()
    args = argparse.Namespace(name=eng.name, json=True, seconds=2.0, interval=0.5, allow_other_user=False)
    assert run_watch(args, out=out) == 0
    summaries = [r for r in map(json.loads, out.getvalue().splitlines()) if r["event"] == "summary"]
    assert len(summaries) == 4, [r["time"] for r in summaries]


def test_watch_follows_a_kill_and_a_restart_with_another_channel_count(subprocess_env, tmp_path) -> None:
    name = unique_segment_name("watch")
    py = [sys.executable, "-m", "lucky_monitor"]
    env = dict(subprocess_env)
    sim_a = subprocess.Popen(
        [*py, "sim", "--name", name, "--envs", "4", "--image", "16x16", "--hz", "100"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sim_b = None
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(shm_path(name)) and time.monotonic() < deadline:
            time.sleep(0.05)
        watch = subprocess.Popen(
            [*py, "watch", name, "--json", "--seconds", "9", "--interval", "0.5"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(2.5)
        sim_a.send_signal(signal.SIGKILL)
        sim_a.wait()
        time.sleep(1.5)
        sim_b = subprocess.Popen(
            [*py, "sim", "--name", name, "--envs", "4", "--image", "16x16x4", "--format", "rgba", "--hz", "100"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        out, err = watch.communicate(timeout=30)
        assert watch.returncode == 0, err
    finally:
        for p in (sim_a, sim_b):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
                p.wait(timeout=10)
        if os.path.exists(shm_path(name)):
            os.unlink(shm_path(name))
    recs = [json.loads(x) for x in out.splitlines()]
    states = [r["state"] for r in recs if r["event"] == "state"]
    assert states[0] == "free-running"
    assert "engine exited" in states
    after = states[states.index("engine exited") :]
    assert "free-running" in after, states
    sessions = [r["session_id"] for r in recs if r["session_id"]]
    assert len(set(sessions)) == 2
    assert {r["image"] for r in recs if r["image"]} == {"16x16x3 rgb", "16x16x4 rgba"}
    last = [r for r in recs if r["event"] == "summary" and r["session_id"] == sessions[-1]]
    assert last and last[-1]["frame_seq"] > 10 and last[-1]["frames_per_s"] > 0


def test_a_stale_segment_is_not_attached_and_detached_every_poll(engines, segment_factory) -> None:
    # Seen: after an engine SIGKILL its file stays; the session attached to it, found the pid
    # dead and detached on every poll (the generation ran away, buffers were reallocated).
    seg = segment_factory(server_pid=dead_pid())
    s = MonitorSession(seg.name, tools=False)
    gens = set()
    state = None
    for _ in range(30):
        t = s.step()
        gens.add(t.generation)
        state = t.state
    assert state is LinkState.ENGINE_EXITED and t.reason and "is gone" in t.reason
    assert len(gens) <= 1 and t.header is None
    s.close()


# ---------------------------------------------------------------------------
# Display work bounded by the screen
# ---------------------------------------------------------------------------


def test_overview_is_downscaled_and_hover_and_snapshots_read_exact_bytes(engines) -> None:
    eng = ReferenceEngine(config(num_envs=256, image=(32, 32)))
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False)
    t = run(s, engines, lambda t: t.image is not None, "first image")
    full = t.image.layout
    assert t.image.step == 1 and t.image.grid.shape[:2] == (full.grid_height, full.grid_width)
    # The whole grid on a screen a quarter its size: tiles are shrunk to their screen size, not decimated.
    s.set_view(ViewRequest(0, 0, full.grid_width, full.grid_height, 0.25))
    t = s.step()
    img = t.image
    assert img.new and img.layout == full
    # the display buffer is the screen's size: a tile pitch of 34 px shown at 8.5 px is a 7 px tile
    # and a one-pixel gap, so the grid is within one pixel a tile of what the screen shows
    assert img.display_layout.height == img.display_layout.width == 7 and img.step == pytest.approx(32 / 7)
    assert abs(img.grid.shape[0] - full.grid_height * 0.25) <= full.rows
    assert abs(img.grid.shape[1] - full.grid_width * 0.25) <= full.columns
    src = eng.seg.images[17].astype(np.int16)
    shown = img.shown_tile(17).astype(np.int16)
    assert shown.shape == (7, 7, 3)
    # each shown pixel is the mean of four source pixels of the footprint it covers: within their range
    r = 32 / 7
    for i in range(7):
        for j in range(7):
            foot = src[int(i * r) : int(np.ceil((i + 1) * r)), int(j * r) : int(np.ceil((j + 1) * r))]
            assert (shown[i, j] >= foot.min(axis=(0, 1)) - 1).all() and (shown[i, j] <= foot.max(axis=(0, 1)) + 1).all()
    _, _, x1, y1 = img.display_rect()
    assert abs(x1 - full.grid_width) <= 4 and abs(y1 - full.grid_height) <= 4  # the last gap is one display pixel
    # Hover and saved pictures come from the segment's bytes, never the display buffer.
    reading = s.read_pixel(17, 5, 6)
    assert reading is not None and reading.stored == tuple(int(v) for v in eng.seg.images[17, 6, 5])
    grid = s.snapshot()
    assert grid is not None and grid.shape[:2] == (full.grid_height, full.grid_width)
    ox, oy = full.tile_origin(17)
    np.testing.assert_array_equal(grid[oy : oy + 32, ox : ox + 32], eng.seg.images[17])
    tile = s.snapshot(17)
    np.testing.assert_array_equal(tile, eng.seg.images[17])
    s.close()


def test_automatic_columns_follow_the_views_shape_and_an_explicit_count_stays(engines) -> None:
    eng = ReferenceEngine(config(num_envs=64, image=(32, 32)))
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False)
    t = run(s, engines, lambda t: t.image is not None, "first image")
    assert t.image.layout.columns == 8  # no view shape yet: near-square
    s.set_display(DisplayOptions(view_aspect=2.6))
    eng.tick()
    t = run(s, engines, lambda t: t.image is not None and t.image.new, "a new image")
    g = t.image.layout
    assert g.columns == 13 and g.columns_setting is None and t.image.options.view_aspect == 2.6
    np.testing.assert_array_equal(t.image.shown_tile(20), eng.seg.images[20])  # env 20: second row, 8th tile
    assert g.tile_origin(20) == (7 * 34, 34)
    s.set_display(DisplayOptions(columns=4, view_aspect=2.6))
    eng.tick()
    t = run(s, engines, lambda t: t.image is not None and t.image.new, "a new image")
    assert t.image.layout.columns == 4
    s.set_display(DisplayOptions(columns=4, view_aspect=0.5))  # the shape no longer matters
    eng.tick()
    t = run(s, engines, lambda t: t.image is not None and t.image.new, "a new image")
    assert t.image.layout.columns == 4
    s.set_display(DisplayOptions(view_aspect=0.0))  # a view of no width: near-square
    eng.tick()
    t = run(s, engines, lambda t: t.image is not None and t.image.new, "a new image")
    assert t.image.layout.columns == 8
    s.close()


def test_zoomed_in_only_the_tiles_in_view_are_copied(engines) -> None:
    eng = ReferenceEngine(config(num_envs=64, image=(32, 32)))
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False)
    run(s, engines, lambda t: t.image is not None, "first image")
    assert s._grid is not None
    s._grid.FULL_COPY_BYTES = 0  # as for a large segment
    full = s.step().image.layout
    ox, oy = full.tile_origin(0)
    s.set_view(ViewRequest(ox, oy, ox + 30, oy + 30, 4.0))  # env 0 fills the screen
    eng.tick()
    t = run(s, engines, lambda t: t.image is not None and t.image.new, "a new image")
    assert t.image.step == 1
    np.testing.assert_array_equal(t.image.shown_tile(0), eng.seg.images[0])
    far = full.num_envs - 1
    copied = {e for e in range(full.num_envs) if np.array_equal(t.image.shown_tile(e), eng.seg.images[e])}
    assert 0 in copied and far not in copied  # the far corner was not copied this frame
    # The frame says which tiles it was copied into (the view's, and one more on each side), and where they are.
    r0, r1, c0, c1 = t.image.region
    assert (r0, c0) == (0, 0) and 0 < r1 < full.rows and 0 < c1 < full.columns
    y0, y1, x0, x1 = t.image.copied_part()
    g = t.image.display_layout
    assert (y0, x0) == (0, 0) and (y1, x1) == (r1 * (g.height + g.gap) - g.gap, c1 * (g.width + g.gap) - g.gap)
    inside = {e for e in range(full.num_envs) if divmod(e, g.columns)[0] < r1 and divmod(e, g.columns)[1] < c1}
    assert inside <= copied
    s.set_view(None)  # no view: every tile, and the frame says so
    eng.tick()
    t = run(s, engines, lambda t: t.image is not None and t.image.new, "a new image")
    assert t.image.region is None and t.image.copied_part() is None
    s.close()


def _publish(eng: ReferenceEngine, colours: np.ndarray) -> int:
    """Write one constant colour per env under the image seqlock, as the engine does; the new ``image_seq``."""
    seg = eng.seg
    seq = seg.counter("image_seq")
    seg.set("image_seq", seq + 1)
    seg.images[:] = colours[:, None, None, :]
    seg.set("image_frame_seq", seg.counter("frame_seq"))
    seg.set("image_seq", seq + 2)
    return seq + 2


def _sampled_session(engines: list[ReferenceEngine], size: int = 40) -> tuple[ReferenceEngine, MonitorSession]:
    """1024 envs of 40x40 (4.9 MB) shown at a fifth of their size: the sampling helper's path, once it is up."""
    eng = ReferenceEngine(config(num_envs=1024, image=(size, size)))
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False)
    t = run(s, engines, lambda t: t.image is not None, "first image")
    full = t.image.layout
    s.set_view(ViewRequest(0, 0, full.grid_width, full.grid_height, 0.2))
    run(s, engines, lambda t: s._grid is not None and s._grid._in_flight is not None, "a request to the helper")
    return eng, s


def _settle(s: MonitorSession) -> Tick:
    """Step (the engine paused) until no sampling request is in flight."""
    deadline = time.monotonic() + 10
    t = s.step()
    while s._grid is not None and s._grid._in_flight is not None:
        assert time.monotonic() < deadline, "the helper never answered"
        time.sleep(0.002)
        t = s.step()
    return t


def test_the_sampling_helper_answers_at_a_later_step_and_the_step_does_not_wait_for_it(engines) -> None:
    eng, s = _sampled_session(engines)
    _settle(s)
    rng = np.random.default_rng(7)
    colours = rng.integers(0, 256, (1024, 3), dtype=np.uint8)
    seq = _publish(eng, colours)
    t = s.step()
    # The step sent the request and went on: nothing was copied in it.
    assert s._grid is not None and s._grid._in_flight is not None
    assert not t.image.new and t.image.image_seq < seq
    t = _settle(s)
    img = t.image
    assert img.new and img.image_seq == seq and img.step == pytest.approx(40 / 7)
    assert img.image_frame_seq == eng.seg.counter("frame_seq")
    for env in (0, 1, 511, 1023):
        assert (img.shown_tile(env) == colours[env]).all()  # a constant tile shrinks to its colour
    # The colour options of the request are checked against those in force when it is answered.
    seq = _publish(eng, colours[::-1].copy())
    s.step()
    assert s._grid._in_flight is not None
    s.set_display(DisplayOptions(swap_rb=True))
    t = _settle(s)
    assert t.image.image_seq == seq and t.image.options.swap_rb
    for env in (0, 1023):
        assert (t.image.shown_tile(env) == colours[1023 - env][::-1]).all()
    # And so is the row order: top half white, bottom half black, then shown flipped.
    seg = eng.seg
    seq = seg.counter("image_seq")
    seg.set("image_seq", seq + 1)
    seg.images[:, :20] = 255
    seg.images[:, 20:] = 0
    seg.set("image_seq", seq + 2)
    t = _settle(s)
    assert t.image.image_seq == seq + 2 and (t.image.shown_tile(3)[0] == 255).all()
    seg.set("image_seq", seq + 3)
    seg.set("image_seq", seq + 4)
    s.step()
    assert s._grid._in_flight is not None
    s.set_display(DisplayOptions(swap_rb=True, flip_rows=True))
    t = _settle(s)
    tile = t.image.shown_tile(3)
    assert t.image.image_seq == seq + 4 and (tile[0] == 0).all() and (tile[-1] == 255).all()
    s.close()


def test_an_answer_for_tiles_no_longer_in_view_is_dropped_and_the_new_ones_are_asked_for(engines) -> None:
    eng, s = _sampled_session(engines, size=64)  # 12.6 MB: half the envs are over the helper's 4 MiB
    assert s._grid is not None
    s._grid.FULL_COPY_BYTES = 0  # only the tiles in view, as for a larger segment
    full = _settle(s).image.layout
    rows = full.rows
    top = ViewRequest(0, 0, full.grid_width, full.grid_height / 2 - 70, 0.2)
    bottom = ViewRequest(0, full.grid_height / 2 + 70, full.grid_width, full.grid_height, 0.2)
    s.set_view(top)
    _settle(s)
    colours = np.full((1024, 3), 200, np.uint8)
    seq = _publish(eng, colours)
    s.step()
    assert s._grid._in_flight is not None  # asked for the top rows' envs
    s.set_view(bottom)  # same scale: the same layout, other tiles; the engine publishes nothing more
    t = _settle(s)
    last = full.num_envs - 1  # in the bottom row
    assert t.image.image_seq == seq and (t.image.shown_tile(last) == 200).all()
    assert rows > 8
    s.close()


def test_a_helper_that_stops_answering_is_replaced_and_the_window_never_freezes(engines, monkeypatch) -> None:
    from lucky_monitor.transport import sampler as sampler_module

    monkeypatch.setattr(sampler_module, "REPLY_TIMEOUT_S", 0.5)
    eng, s = _sampled_session(engines)
    assert s._grid is not None and s._grid._sampler is not None
    helper = s._grid._sampler._proc
    assert helper is not None
    os.kill(helper.pid, signal.SIGSTOP)
    try:
        steps = 0
        deadline = time.monotonic() + 10
        t = s.step()
        while "stopped answering" not in (t.reason or ""):
            assert time.monotonic() < deadline, "a stopped helper was never noticed"
            eng.tick()
            t = s.step()
            steps += 1
        # Steps went on while the helper kept the answer: a step that waited for it would have
        # waited out the time limit, and the first one would have said so.
        assert steps >= 10
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(helper.pid, signal.SIGCONT)
    assert helper.wait(5) is not None  # stopped by the session
    # The link attaches again and a new helper brings images.
    run(s, engines, lambda t: t.attached and t.image is not None and t.image.new and t.image.step > 1, "images again")
    colours = np.full((1024, 3), 9, np.uint8)
    seq = _publish(eng, colours)
    s.step()
    t = _settle(s)
    assert t.image.image_seq == seq and (t.image.shown_tile(5) == 9).all()
    s.close()


# ---------------------------------------------------------------------------
# Text from the segment reaches views bounded and escaped; another user's segment is refused
# ---------------------------------------------------------------------------

HOSTILE = ("\x1b[2J\r\nengine\x00says\u202e" * 4096)[: 64 * 1024]


def test_an_engine_error_of_64_kib_with_control_characters_shows_bounded_and_escaped(engines) -> None:
    from lucky_monitor.protocol import messages as m
    from lucky_monitor.protocol.envelope import Envelope, decode, encode
    from lucky_monitor.protocol.ring import RingReader

    eng = ReferenceEngine(config(tools_ring_size=256 * 1024))
    engines.append(eng)
    s = MonitorSession(eng.name)
    run(s, engines, lambda t: t.tools.ours, "tools channel")
    assert s.draw("line", start=(0, 0, 0), end=(1, 1, 1))
    # Answer as a hostile engine would, instead of the reference engine.
    h = eng.header
    request = decode(RingReader(eng.seg.buf, h.tools_c2s_offset, h.tools_ring_size).pop())
    RingWriter(eng.seg.buf, h.tools_s2c_offset, h.tools_ring_size).push(
        encode(Envelope(m.MethodId.DrawResp, request.correlation_id, None, HOSTILE, time.monotonic_ns()))
    )
    deadline = time.monotonic() + 10
    results: list = []
    traffic: list = []
    while not results and time.monotonic() < deadline:
        tick = s.step()
        results += tick.results
        traffic += tick.traffic
    (result,) = results
    assert result.status == "error" and len(result.text) <= 200 and result.text.isprintable()
    assert result.text.startswith("error: \\x1b[2J\\r\\nengine\\x00says\\u202e") and result.text.endswith("…")
    (entry,) = [e for e in traffic if e.pair == "tools" and e.direction == "s2c"]
    assert len(entry.error) <= 200 and entry.error.isprintable()
    s.close()


def test_a_hostile_reason_reaches_the_tick_and_watch_bounded_and_escaped(engines, monkeypatch) -> None:
    import io

    import lucky_monitor.core.monitor as monitor_mod
    from lucky_monitor.protocol.errors import HeaderError

    eng = ReferenceEngine(config())
    engines.append(eng)

    def attach(name: str, **kw: object):
        raise HeaderError("magic", HOSTILE)

    monkeypatch.setattr(monitor_mod.Segment, "attach", staticmethod(attach))
    s = MonitorSession(eng.name, tools=False, images=False)
    tick = s.step()
    assert tick.state is LinkState.INCOMPATIBLE
    assert len(tick.reason) <= 200 and tick.reason.isprintable() and tick.reason.startswith("magic: \\x1b[2J")
    out = io.StringIO()
    for json_lines in (True, False):
        Watcher(out, json_lines=json_lines, interval=10.0).feed(tick)
    json_line, text_line = out.getvalue().splitlines()
    assert json.loads(json_line)["reason"] == tick.reason
    assert "\x1b" not in text_line and len(text_line) < 400
    s.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_another_users_segment_is_refused_by_the_session_unless_allowed(engines) -> None:
    eng = ReferenceEngine(config())
    engines.append(eng)
    os.chown(eng.seg.path, 12345, 12345)
    s = MonitorSession(eng.name)
    tick = run(s, engines, lambda t: t.state is LinkState.INCOMPATIBLE, "refusal")
    assert "uid 12345" in tick.reason and "--allow-other-user" in tick.reason and tick.header is None
    s.close()
    auto = MonitorSession(None, prefix=eng.name)  # following the newest live: theirs is not a candidate
    tick = auto.step()
    assert tick.state is LinkState.SEARCHING and tick.header is None
    auto.close()
    s = MonitorSession(eng.name, allow_other_user=True)
    tick = run(s, engines, lambda t: t.tools.ours, "tools channel of another user's engine, allowed")
    assert tick.header is not None
    s.close()


def test_a_reused_pid_with_a_frozen_heartbeat_reads_stalled_at_once(segment_factory) -> None:
    # The engine died and an unrelated process got its pid: the heartbeat is frozen 10 s in the past.
    seg = segment_factory(server_pid=os.getppid())
    seg.set("engine_state", 1)
    seg.set("heartbeat_ns", time.monotonic_ns() - 10_000_000_000)
    s = MonitorSession(seg.name, tools=False)
    tick = s.step()
    assert tick.state is LinkState.STALLED and not tick.state.healthy, tick.text
    assert tick.heartbeat_age_s is not None and tick.heartbeat_age_s >= 9.0
    s.close()


def test_helper_processes_cpu_counts_as_the_sessions(engines) -> None:
    # The tools channel is held by a helper process (a shrinking segment can only kill it);
    # its CPU is the monitor's too, so the window's CPU budget adds it.
    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name)
    assert s.helper_cpu_s() == 0.0
    run(s, engines, lambda t: t.tools.ours, "tools channel")
    used = s.helper_cpu_s()
    assert used > 0.0  # an interpreter started and attached
    s.close()
    assert s.helper_cpu_s() >= used  # kept after the helper stopped


def test_a_held_tools_channel_is_checked_before_each_touch_not_at_every_step(engines) -> None:
    """The check is a wait4 and an fstat: made before a send or a read of replies, not 60 times a second."""
    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name)
    run(s, engines, lambda t: t.tools.ours, "tools channel")
    chan = s._chan
    assert chan is not None
    calls: list[float] = []
    real = chan.intact

    def counted() -> bool:
        calls.append(time.monotonic())
        return real()

    chan.intact = counted  # type: ignore[method-assign]
    steps, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < 0.4:
        eng.tick()
        s.step()
        steps += 1
    assert steps >= 20 and len(calls) <= 2, (steps, len(calls))  # idle: before the twice-a-second read of replies
    calls.clear()
    s.draw("line", start=(0, 0, 0), end=(1, 1, 1))
    tick = run(s, engines, lambda t: any(r.kind == "line" for r in t.results), "the draw's answer")
    assert calls  # checked before the send and before each read of the answer
    assert tick.tools.ours
    s.close()


def test_a_frames_tiles_are_tiled_after_the_guarded_read_in_short_bands_with_the_core_offered_between(engines) -> None:
    """The image seqlock guards the read alone; the tiling after it is cut into bands, the core offered between."""
    from lucky_monitor.core.session import GridDisplay
    from lucky_monitor.core.tiler import Tiler

    eng = ReferenceEngine(config(num_envs=64, image=(32, 32)))
    engines.append(eng)
    eng.tick()
    n, h, w, c = eng.seg.images.shape
    o = DisplayOptions()
    banded = GridDisplay(n, h, w, c)
    banded.configure(None, (h, w))
    assert banded.back is not None and banded.geometry.columns == 8
    offers: list[int] = []
    ticks = iter(range(1, 1 << 30))
    banded.yielder = Yielder(1.0, clock=lambda: float(next(ticks)), yield_=lambda: offers.append(1))  # due at each call
    banded.TILE_BAND_BYTES = 3 * h * w * c  # three tiles a band: 8 rows of 8 tiles cut in 3, 24 bands
    s = MonitorSession(eng.name, tools=False)
    s.step()
    seg = s._link.segment
    assert seg is not None
    untouched = banded.back.grid.copy()
    banded.copy(seg, "auto", False, o, None)
    np.testing.assert_array_equal(banded.back.grid, untouched)  # the read alone: nothing tiled yet
    assert offers == []
    banded.finish()
    assert len(offers) == 23  # between bands, not after the last
    whole = Tiler(n, h, w, c, columns=8, gap=banded.gap, gap_value=banded.gap_value)
    np.testing.assert_array_equal(banded.back.grid, whole.tile(eng.seg.images))
    # A read that turned out torn is discarded: never tiled by a later finish.
    before = banded.back.grid.copy()
    eng.tick()
    banded.copy(seg, "auto", False, o, None)
    banded.discard()
    banded.finish()
    np.testing.assert_array_equal(banded.back.grid, before)
    assert not np.array_equal(whole.tile(eng.seg.images), before)  # the engine did draw a new frame
    # With idle cores (the yielder not contended) the frame is tiled in one piece: no bands, no offers.
    banded.yielder.contended = False
    offers.clear()
    banded.copy(seg, "auto", False, o, None)
    banded.finish()
    assert offers == []
    np.testing.assert_array_equal(banded.back.grid, whole.tile(eng.seg.images))
    s.close()


@pytest.mark.parametrize("contended", [True, False])
def test_tiling_through_the_kept_copy_views_equals_a_fresh_tiler_frame_after_frame(contended: bool) -> None:
    """The views of each band's copies are made once per buffer, options and grid: in place new pixels,
    alternating back buffers, option changes (order, flip, alpha), a region and new columns all tile as a
    fresh Tiler does."""
    from lucky_monitor.core.session import GridDisplay
    from lucky_monitor.core.tiler import Tiler

    rng = np.random.default_rng(7)
    n, h, w, c = 21, 6, 5, 4
    g = GridDisplay(n, h, w, c)
    g.configure(None, (h, w))
    g.yielder = Yielder(1.0, yield_=lambda: None)
    g.yielder.contended = contended
    g.TILE_BAND_BYTES = 4 * h * w * c  # several bands, and a band inside a tile row
    src = np.empty((n, h, w, c), np.uint8)
    steps = [
        ("rgba", False, DisplayOptions(), None, None),
        ("rgba", False, DisplayOptions(), None, None),  # the same again: the kept views, new pixels
        ("rgba", False, DisplayOptions(), (1, 3, 1, 4), None),  # the tiles of a region only
        ("bgra", True, DisplayOptions(), None, None),
        ("rgba", False, DisplayOptions(swap_rb=True), None, None),
        ("rgba", False, DisplayOptions(show_alpha=True), None, None),  # a 4-channel grid: a new grid
        ("rgba", False, DisplayOptions(show_alpha=True), None, None),
        ("rgba", False, DisplayOptions(), None, 3),  # new columns: new buffers
        ("rgba", False, DisplayOptions(), None, 3),
    ]
    for fmt, flip, o, region, columns in steps:
        if columns is not None and g._plan.columns != columns:
            g.configure(columns)
        for _ in range(2):  # both back buffers, each with its own kept views
            src[...] = rng.integers(0, 256, src.shape, dtype=np.uint8)
            assert g.back is not None
            want = Tiler(n, h, w, c, columns=g.back.columns, gap=g.back.gap, gap_value=g.gap_value)
            want.grid[...] = g.back.grid if region is not None else want.grid  # tiles outside a region keep theirs
            want.tile(src, src_format=fmt, flip_rows=flip, swap_rb=o.swap_rb, show_alpha=o.show_alpha, region=region)
            g._pending = (src, fmt, flip, o, region)
            g.finish()
            np.testing.assert_array_equal(g.back.grid, want.grid, err_msg=f"{fmt} {flip} {o} {region} {columns}")
            g.swap()


@pytest.mark.parametrize("yield_us", [0.0, 1.0])
def test_a_step_offers_the_core_at_its_seams_unless_told_never(engines, yield_us: float) -> None:
    eng = ReferenceEngine(config(num_envs=64, image=(32, 32)))
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False, yield_us=yield_us)
    offers: list[int] = []
    real = s.yielder._yield
    s.yielder._yield = lambda: (offers.append(1), real())[1]  # type: ignore[method-assign]
    run(s, engines, lambda t: t.image is not None and t.frame is not None, "a frame with its image")
    for _ in range(5):
        eng.tick()
        s.step()
    s.close()
    if yield_us:
        assert len(offers) >= 6 * 3  # a step with a frame and an image: after the copies, the checks, the taps
    else:
        assert offers == []


def test_the_history_keeps_a_minute_of_every_env_within_a_bound(engines) -> None:
    """A newly selected env's curve is seeded from these rows: 600 covered 10-12 s of the 1-minute window."""
    from lucky_monitor.core.session import RASTER_BYTES, raster_rows

    eng = ReferenceEngine(config())
    engines.append(eng)
    s = MonitorSession(eng.name, tools=False, images=False)
    run(s, engines, lambda t: t.history is not None, "attached")
    assert s.history is not None and s.history.raster_capacity == raster_rows(eng.seg.header.num_envs) == 4096
    s.close()

    assert raster_rows(64) == raster_rows(1024) == 4096  # a minute at 60 Hz
    assert raster_rows(4096) == 1024 and raster_rows(4096) * 4096 * 4 <= RASTER_BYTES
    assert raster_rows(1) == 4096 and raster_rows(10**6) == 600
