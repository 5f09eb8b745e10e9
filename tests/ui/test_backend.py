"""MonitorBackend and the LuckyMonitor QML views: hand-made Ticks, then the reference engine.

The backend is a pure view of :class:`~lucky_monitor.core.session.Tick`
values, so most tests build Ticks by hand (``tests/ui/ticks.py``) and give
the backend a stand-in session that records what the slots ask for.

The engine-backed tests drive an in-process :class:`ReferenceEngine` by
calling ``tick()`` between the session's ``step()`` and the backend's
``apply()``, the way the window's timer interleaves them, until the expected
state shows up (or a generous deadline passes, which is a failure, never a
timing assertion).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import shiboken6
from PySide6.QtCore import QMetaObject, QObject, QPoint, QPointF, Qt, QUrl
from PySide6.QtQuick import QQuickItem
from PySide6.QtQuickWidgets import QQuickWidget
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from lucky_monitor.core.monitor import Counters, LinkState, Rates
from lucky_monitor.core.session import CommandResult, CommandsState, MonitorSession, SegmentEntry, Tick, ToolsState
from lucky_monitor.protocol.enums import Service
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine
from lucky_monitor.transport.shm import Segment, platform_kind
from lucky_monitor.transport.tools import ToolsChannel, tools_owner
from lucky_monitor.ui.backend import (
    MonitorBackend,
    ResultKind,
    SegmentListModel,
    age_text,
    bytes_text,
    state_color,
)
from lucky_monitor.ui.palette import BAD, DIM, GOOD, WARN
from lucky_monitor.ui.qml_host import QmlLoadError, make_quick_widget, qml_dir
from tests.ui.ticks import attached_tick, live_fields, small_header, tick

engine_only = pytest.mark.skipif(platform_kind() != "dir", reason="segments are exercised on Linux")

CAMERA = int(Service.CAMERA)
SERVICES = Service.labels()
#: Test segments use their own prefix, so that no monitor following the newest
#: live ``LuckyEngine_*`` segment (another test run, a demo) claims their tools channel.
PREFIX = "LuckyTestUI_"
_serial = itertools.count()


def engine_name() -> str:
    return f"{PREFIX}{next(_serial)}_{uuid.uuid4().hex[:10]}"  # at most 30 characters (LAYOUT C2)


def small_config(**kw: object) -> EngineConfig:
    cfg: dict[str, object] = {
        "num_envs": 4,
        "obs_size": 6,
        "act_size": 2,
        "image": (16, 16),
        "cmd_ring_size": 64 * 1024,
        "tools_ring_size": 16 * 1024,
    }
    cfg.update(kw)
    cfg.setdefault("name", engine_name())
    return EngineConfig(**cfg)  # type: ignore[arg-type]


class Rig:
    """Engines, one MonitorSession and one MonitorBackend, stepped together."""

    def __init__(self) -> None:
        self.engines: list[ReferenceEngine] = []
        self.session: MonitorSession | None = None
        self._backend: MonitorBackend | None = None
        self.tick: Tick | None = None

    @property
    def backend(self) -> MonitorBackend:
        assert self._backend is not None, "call follow() first"
        return self._backend

    def engine(self, **kw: object) -> ReferenceEngine:
        eng = ReferenceEngine(small_config(**kw))
        self.engines.append(eng)
        return eng

    def follow(self, name: str | None, *, command_timeout_s: float = 5.0) -> MonitorBackend:
        self.session = MonitorSession(name, prefix=PREFIX, command_timeout_s=command_timeout_s)
        self.session.CLAIM_RETRY_S = 0.05  # look again quickly when the channel frees up
        self._backend = MonitorBackend(self.session)
        return self._backend

    def step(self, *, tick: bool = True) -> Tick:
        if tick:
            for eng in self.engines:
                if not eng.seg.closed:
                    eng.tick()
        assert self.session is not None
        self.tick = self.session.step()
        self.backend.apply(self.tick)
        QApplication.processEvents()
        return self.tick

    def pump(self, cond: Callable[[], bool], what: str, *, timeout: float = 15.0, tick: bool = True) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                b = self.backend
                raise AssertionError(
                    f"gave up waiting for: {what} (state {b.value('stateText')!r}, "
                    f"reason {b.value('reason')!r}, tools {b.value('toolsReason')!r})"
                )
            self.step(tick=tick)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        for eng in self.engines:
            eng.close()


def owner_of(name: str) -> int:
    """The tools channel's owner pid, read through a separately attached read-only segment."""
    with Segment.attach(name) as seg:
        return tools_owner(seg)


class StandInSession:
    """Records what the backend asks of its session; ``draw`` answers ``draw_sent``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.draw_sent = True

    def switch(self, name: str | None) -> None:
        self.calls.append(("switch", name))

    def set_service(self, bit: int, enabled: bool) -> None:
        self.calls.append(("set_service", bit, enabled))

    def set_sim_mode(self, mode: int) -> None:
        self.calls.append(("set_sim_mode", mode))

    def draw(self, kind: str, **values: Any) -> bool:
        self.calls.append(("draw", kind, values))
        return self.draw_sent

    def repeat(self, kind: str, hz: float) -> None:
        self.calls.append(("repeat", kind, hz))


class SignalCounts:
    """How often each of the backend's group signals fired."""

    GROUPS = ("connection", "selection", "facts", "rates", "tools", "simMode", "draw")

    def __init__(self, backend: MonitorBackend) -> None:
        self.counts = dict.fromkeys(self.GROUPS, 0)
        for g in self.GROUPS:
            getattr(backend, g + "Changed").connect(lambda g=g: self._hit(g))

    def _hit(self, group: str) -> None:
        self.counts[group] += 1

    def take(self) -> dict[str, int]:
        """The groups that fired since the last call."""
        fired = {g: n for g, n in self.counts.items() if n}
        self.counts = dict.fromkeys(self.GROUPS, 0)
        return fired


@pytest.fixture
def rig(qapp) -> Iterator[Rig]:
    r = Rig()
    yield r
    r.close()


@pytest.fixture
def views(qtbot) -> Iterator[Callable[[MonitorBackend, str], QQuickWidget]]:
    """Factory of shown QML views; each is closed and deleted before its backend."""
    made: list[QQuickWidget] = []

    def make(backend: MonitorBackend, component: str) -> QQuickWidget:
        w = make_quick_widget(backend, component)
        w.resize(340 if component == "RpcPanel" else 380, 900 if component == "RpcPanel" else 480)
        w.show()
        qtbot.waitExposed(w)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()
        w.setSource(QUrl())  # tear the QML down while its backend certainly lives
    made.clear()  # Python owns the views: dropping the last reference deletes them now


def qml_child(view: QQuickWidget, name: str) -> QObject:
    """The QML object called ``name``, searched through QObject children and visual children
    (Repeater delegates are only the latter)."""
    seen: set[int] = set()
    stack: list[QObject] = [view.rootObject()]
    while stack:
        obj = stack.pop()
        key = shiboken6.getCppPointer(obj)[0]
        if key in seen:
            continue
        seen.add(key)
        if obj.objectName() == name:
            return obj
        stack.extend(obj.children())
        if isinstance(obj, QQuickItem):
            stack.extend(obj.childItems())
    raise AssertionError(f"no QML object named {name!r}")


def colour_of(label: QObject) -> str:
    """A QML label's text colour as ``#rrggbb``."""
    return label.property("color").name()


def services_enabled(name: str) -> int:
    with Segment.attach(name) as seg:
        return seg.counter("services_enabled")


def not_blank(view: QQuickWidget, path) -> None:
    image = view.grab().toImage()
    assert image.save(str(path))
    ptr = image.constBits()
    pixels = np.frombuffer(ptr, np.uint8, count=image.sizeInBytes())
    assert pixels.min() != pixels.max(), "the view rendered a uniform image"


# ---------------------------------------------------------------------------
# helpers and QML loading
# ---------------------------------------------------------------------------


def test_text_helpers() -> None:
    assert bytes_text(64) == "64 B"
    assert bytes_text(512 * 1024) == "512 KiB"
    assert bytes_text(1_400_000) == "1.3 MiB"
    assert age_text(12.7) == "12 s"
    assert age_text(185) == "3 min"
    assert age_text(-5) == "0 s"
    assert age_text(7300) == "2 h"
    expected = {
        LinkState.SEARCHING: DIM,
        LinkState.CONNECTED: GOOD,
        LinkState.FREE_RUNNING: GOOD,
        LinkState.WAITING_FOR_TRAINER: WARN,
        LinkState.PAUSED: WARN,
        LinkState.INITIALISING: WARN,
        LinkState.ENGINE_EXITED: BAD,
        LinkState.STALLED: BAD,
        LinkState.INCOMPATIBLE: BAD,
        LinkState.VIOLATION: BAD,
        LinkState.IMAGES_STUCK: BAD,
    }
    for state, colour in expected.items():
        assert state_color(state) == colour, state
    assert all(state_color(s) in (GOOD, WARN, BAD, DIM) for s in LinkState)


def test_qml_dir_holds_the_module() -> None:
    root = qml_dir()
    assert (root / "LuckyMonitor" / "qmldir").is_file()
    assert (root / "LuckyMonitor" / "RpcPanel.qml").is_file()
    assert (root / "LuckyMonitor" / "DebugDraw.qml").is_file()


def test_views_load_without_warnings_before_any_update(views, tmp_path) -> None:
    backend = MonitorBackend()
    panel = views(backend, "RpcPanel")
    draw = views(backend, "DebugDraw")
    assert panel.resizeMode() == QQuickWidget.ResizeMode.SizeRootObjectToView
    assert qml_child(panel, "stateLine").property("text") == "searching"
    assert qml_child(panel, "serviceSwitch_Camera").property("enabled") is False
    assert qml_child(draw, "drawForm").property("enabled") is False
    assert qml_child(panel, "turnSplitText").property("text") == "—"  # detached: nothing known of a trainer
    assert qml_child(panel, "simMode").property("currentIndex") == -1  # nor of a simulation mode
    for view in (panel, draw):  # a required property given at creation, not a context property
        assert view.rootContext().contextProperty("backend") is None
    assert colour_of(qml_child(draw, "lastDrawResult")) == DIM  # "none yet"
    not_blank(panel, tmp_path / "panel.png")
    not_blank(draw, tmp_path / "draw.png")


@pytest.mark.qt_log_ignore(r"NoSuchView")
def test_missing_component_raises(qapp) -> None:
    with pytest.raises(QmlLoadError, match="NoSuchView"):
        make_quick_widget(MonitorBackend(), "NoSuchView")


# ---------------------------------------------------------------------------
# hand-made Ticks and a stand-in session (no engine)
# ---------------------------------------------------------------------------


def test_properties_follow_a_tick(qapp) -> None:
    h = dataclasses.replace(
        small_header(
            num_envs=6,
            obs_size=5,
            act_size=3,
            image=(32, 24, 4),
            image_format=4,
            image_flags=1,
            mode=1,
            services_available=0b1010_0101,
            session_id=0xABC,
            server_pid=1234,
        ),
        gpu_available=1,
        gpu_obs_mode=1,
        gpu_device_id=2,
        gpu_obs_handle=bytes(range(64)),
    )
    live = live_fields(
        client_pid=777,
        frame_seq=100,
        action_seq=99,
        image_seq=50,
        services_enabled=0b0000_0101,
        sim_mode=2,
        engine_state=2,
    )
    first = attached_tick(
        h,
        t=10.0,
        name="LuckyTestUI_a",
        selected="LuckyTestUI_a",
        state=LinkState.WAITING_FOR_TRAINER,
        text="waiting for trainer",
        notice="the monitor was late",
        live=live,
        heartbeat_age_s=3.04,
        trainer_alive=True,
        rates=Rates(frames_per_s=59.94, images_per_s=None, polls_engine_turn=1, polls_trainer_turn=3),
        counters=Counters(torn_images=2, torn_hot=1, frames_skipped=7),
        tools=ToolsState(True, False, 4321, "tools channel held by pid 4321", 16 * 1024),
    )
    b = MonitorBackend(StandInSession())
    signals = SignalCounts(b)
    b.apply(first)
    expected = {
        "segmentName": "LuckyTestUI_a",
        "state": "waiting for trainer",
        "stateText": "waiting for trainer",
        "reason": "",
        "notice": "the monitor was late",
        "healthy": True,
        "stateColor": WARN,
        "attached": True,
        "serverPid": 1234.0,
        "clientPid": 777.0,
        "trainerAlive": True,
        "mode": "inference",
        "numEnvs": 6,
        "obsSize": 5,
        "actSize": 3,
        "imageText": "32×24×4 bgra, bottom-up",
        "cmdRingText": "64 KiB ×2",
        "toolsText": "16 KiB ×2",
        "toolsOwnerText": "pid 4321",
        "gpuText": "cuda_ipc · device 2 · handle 000102030405…",
        "sessionId": "0000000000000abc",
        "segmentSize": bytes_text(h.segment_size),
        "engineState": "paused",
        "heartbeatAge": "3.0 s",
        "framesPerSec": 59.9,
        "imagesPerSec": -1.0,
        "engineSharePct": 25.0,
        "trainerSharePct": 75.0,
        "frameSeq": "100",
        "actionSeq": "99",
        "imageSeq": "50",
        "tornImages": "2",
        "tornHot": "1",
        "framesSkipped": "7",
        "toolsAvailable": False,
        "toolsReason": "tools channel held by pid 4321",
        "simMode": 2,
        "drawCount": 0,
        "repeatKind": "",
    }
    assert {k: b.value(k) for k in expected} == expected
    services = b.services.rows
    assert [r["available"] for r in services] == [bool(0b1010_0101 >> i & 1) for i in range(len(SERVICES))]
    assert [r["enabled"] for r in services] == [i in (0, 2) for i in range(len(SERVICES))]
    assert {"connection", "facts", "rates", "tools", "simMode"} <= set(signals.take())

    # The same values again: no group signals a change.
    b.apply(dataclasses.replace(first, t=10.2, seq=2))
    assert signals.take() == {}

    # The connection follows every tick; live fields and rates at most 10 times a second.
    b.apply(
        dataclasses.replace(
            first,
            t=10.25,
            seq=3,
            state=LinkState.STALLED,
            text="stalled",
            reason="no heartbeat for 2.0 s",
            live=dataclasses.replace(live, frame_seq=101),
        )
    )
    assert (b.value("stateColor"), b.value("healthy"), b.value("reason")) == (BAD, False, "no heartbeat for 2.0 s")
    assert b.value("frameSeq") == "100"
    assert set(signals.take()) == {"connection"}
    b.apply(
        dataclasses.replace(
            first,
            t=10.4,
            seq=4,
            state=LinkState.STALLED,
            text="stalled",
            live=dataclasses.replace(live, frame_seq=101),
            rates=Rates(),
        )
    )
    assert b.value("frameSeq") == "101"
    # u64 counters reach QML as exact decimal text (a QML number would round 2**64 - 1 to 2**64)
    b.apply(
        dataclasses.replace(
            first,
            t=10.6,
            seq=5,
            live=dataclasses.replace(live, frame_seq=2**64 - 1, action_seq=2**53 + 1, image_seq=2**63 + 3),
            rates=Rates(),
        )
    )
    assert (b.value("frameSeq"), b.value("actionSeq"), b.value("imageSeq")) == (
        "18446744073709551615",
        "9007199254740993",
        "9223372036854775811",
    )
    # a rate not known (None) is -1, and so is a share with no lock-step polls
    assert (b.value("framesPerSec"), b.value("imagesPerSec")) == (-1.0, -1.0)
    assert (b.value("engineSharePct"), b.value("trainerSharePct")) == (-1.0, -1.0)
    # a reason of None shows as ""
    assert b.value("reason") == ""


def test_unknown_values_do_not_raise(qapp) -> None:
    b = MonitorBackend()
    h = small_header(mode=7, image=None, tools_ring_size=None)
    b.apply(attached_tick(h, t=1.0, live=live_fields(engine_state=9, sim_mode=5), heartbeat_age_s=None))
    assert b.value("engineState") == "unknown (9)"
    assert b.value("mode") == "unknown (7)"
    assert b.value("simMode") == 0
    assert b.value("heartbeatAge") == "—"
    assert b.value("imageText") == "none" and b.value("toolsText") == "none" and b.value("toolsOwnerText") == "—"
    assert b.value("toolsReason") == "engine exports no tools channel"


def test_new_generation_clears_per_attach_values(qapp) -> None:
    session = StandInSession()
    b = MonitorBackend(session)
    results = (
        CommandResult("service", CAMERA, "ok", "ok 0.8 ms", 0.0008, 1),
        CommandResult("sim", 1, "ok", "ok 1.0 ms", 0.001, 2),
        CommandResult("line", 0, "ok", "success 2.5 ms", 0.0025, 3),
    )
    b.apply(
        attached_tick(
            t=1.0,
            results=results,
            commands=CommandsState(draws_answered=3),
            counters=Counters(torn_images=4, torn_hot=2, frames_skipped=9),
        )
    )
    assert b.value("drawCount") == 3 and b.value("tornImages") == "4" and b.value("framesSkipped") == "9"
    assert b.services.row(CAMERA)["lastResult"] == "ok 0.8 ms"
    assert b.value("simModeResult") == "ok 1.0 ms" and b.value("lastDrawResult") == "success 2.5 ms"
    b.setServiceEnabled(2, True)
    b.setSimMode(2)
    assert b.services.row(2)["pending"] and b.value("simModePending")

    # The engine was recreated: another session, no images, no tools channel.
    h2 = small_header(session_id=2, image=None, tools_ring_size=None, num_envs=3)
    b.apply(attached_tick(h2, generation=2, t=1.01, live=live_fields(frame_seq=1, action_seq=1)))
    cleared = {
        "drawCount": 0,
        "lastDrawResult": "",
        "lastDrawResultKind": "",
        "lastRttMs": -1.0,
        "drawPending": False,
        "simModeResult": "",
        "simModeResultKind": "",
        "simModePending": False,
        "tornImages": "0",
        "tornHot": "0",
        "framesSkipped": "0",
        "frameSeq": "1",
        "numEnvs": 3,
        "sessionId": f"{2:016x}",
        "imageText": "none",
        "toolsText": "none",
        "toolsAvailable": False,
    }
    assert {k: b.value(k) for k in cleared} == cleared
    for row in b.services.rows:
        assert (row["lastResult"], row["resultKind"], row["pending"]) == ("", "", False), row

    # A detach: every fact and rate back to "not known".
    b.apply(
        tick(
            generation=3,
            t=1.02,
            state=LinkState.ENGINE_EXITED,
            text="engine exited",
            reason="segment lost: unlinked",
            name="LuckyTestUI_hand",
        )
    )
    gone = {
        "attached": False,
        "stateColor": BAD,
        "reason": "segment lost: unlinked",
        "numEnvs": 0,
        "serverPid": 0.0,
        "clientPid": 0.0,
        "imageText": "—",
        "toolsText": "—",
        "toolsOwnerText": "—",
        "sessionId": "—",
        "engineState": "—",
        "heartbeatAge": "—",
        "framesPerSec": -1.0,
        "frameSeq": "—",
        "toolsReason": "no segment attached",
    }
    assert {k: b.value(k) for k in gone} == gone
    assert not any(r["available"] for r in b.services.rows)


def test_results_land_in_the_right_place(qapp) -> None:
    b = MonitorBackend(StandInSession())
    b.apply(attached_tick(t=1.0))
    b.apply(
        attached_tick(
            t=1.02,
            results=(
                CommandResult("service", 5, "ok", "ok 0.8 ms", 0.0008, 11),
                CommandResult("service", 2, "error", "error: service not available"),
                CommandResult("sim", 1, "ok", "ok 1.0 ms", 0.001, 12),
                CommandResult("line", 0, "ok", "success 2.5 ms", 0.0025, 13),
            ),
        )
    )
    rows = b.services.rows
    assert (rows[5]["lastResult"], rows[5]["resultKind"]) == ("ok 0.8 ms", ResultKind.OK)
    assert (rows[2]["lastResult"], rows[2]["resultKind"]) == ("error: service not available", ResultKind.ERROR)
    assert all((r["lastResult"], r["resultKind"]) == ("", "") for i, r in enumerate(rows) if i not in (2, 5))
    assert (b.value("simModeResult"), b.value("simModeResultKind")) == ("ok 1.0 ms", "ok")
    assert (b.value("lastDrawResult"), b.value("lastDrawResultKind")) == ("success 2.5 ms", "ok")
    assert b.value("lastRttMs") == 2.5

    # A result is shown once and stays until the next one.
    b.apply(attached_tick(t=1.04))
    assert b.value("lastDrawResult") == "success 2.5 ms" and b.value("simModeResultKind") == "ok"

    # The engine answered success = false: an error, shown with its own round trip (not the last good one's).
    b.apply(
        attached_tick(
            t=1.06, results=(CommandResult("arrow", 0, "error", "failed (engine: success = false) 3.0 ms", 0.003, 14),)
        )
    )
    assert (b.value("lastDrawResult"), b.value("lastDrawResultKind")) == (
        "failed (engine: success = false) 3.0 ms",
        "error",
    )
    assert b.value("lastRttMs") == 3.0

    # An unreadable reply on the tools ring (no request claims it) shows in the draw area as an error.
    b.apply(
        attached_tick(
            t=1.08, results=(CommandResult("reply", 0, "error", "error: corrupt message on the tools s2c ring"),)
        )
    )
    assert (b.value("lastDrawResult"), b.value("lastDrawResultKind")) == (
        "error: corrupt message on the tools s2c ring",
        "error",
    )
    assert b.value("lastRttMs") == -1.0  # no reply to time: no RTT beside it

    # Several in one tick: the last one shows; a service bit out of range is ignored.
    b.apply(
        attached_tick(
            t=1.1,
            results=(
                CommandResult("clear", 0, "ok", "success 0.5 ms", 0.0005, 15),
                CommandResult("velocity", 0, "error", "error: no reply within 2 s"),
                CommandResult("service", 99, "error", "error: no service bit 99"),
                CommandResult("sim", 7, "error", "error: simulation mode 7 unknown"),
            ),
        )
    )
    assert (b.value("lastDrawResult"), b.value("lastDrawResultKind")) == ("error: no reply within 2 s", "error")
    assert b.value("lastRttMs") == -1.0  # the last one's: it had no reply
    assert (b.value("simModeResult"), b.value("simModeResultKind")) == ("error: simulation mode 7 unknown", "error")
    assert [r["lastResult"] for r in b.services.rows] == [r["lastResult"] for r in rows]


def test_the_panels_frames_skipped_says_it_counts_the_whole_attach(views) -> None:
    """Seen beside the plots' "27 frames skipped in this window": the panel's 46, two numbers for one name."""
    b = MonitorBackend(StandInSession())
    panel = views(b, "RpcPanel")
    fact = qml_child(panel, "framesSkipped")
    assert fact.property("value") == "—"
    b.apply(attached_tick(t=1.0, counters=Counters(frames_seen=100, frames_skipped=46)))
    QApplication.processEvents()
    assert fact.property("value") == "46 since attach"


def test_a_long_draw_result_wraps_in_a_narrow_dock(views) -> None:
    """Seen in a 330 px dock: "error: service Debug is disabled ·…", the part saying why cut off."""
    b = MonitorBackend(StandInSession())
    off = live_fields(services_enabled=Service.all_mask() & ~Service.DEBUG.bit)
    on = live_fields(services_enabled=Service.all_mask())
    draw = views(b, "DebugDraw")
    draw.resize(330, 480)
    b.apply(attached_tick(t=1.0, live=off))
    b.apply(
        attached_tick(
            t=1.02, live=off, results=(CommandResult("line", 0, "error", "error: service Debug is disabled", 0.001, 3),)
        )
    )
    b.apply(attached_tick(t=1.06, live=on))
    QApplication.processEvents()
    label = qml_child(draw, "lastDrawResult")
    assert label.property("text") == "error: service Debug is disabled · before Debug was turned on"
    assert label.property("lineCount") == 2 and label.property("truncated") is False


def test_a_draw_result_from_before_debug_was_switched_says_so(qapp) -> None:
    """A refusal for a disabled Debug read as current after Debug came back on, until the next send."""
    b = MonitorBackend(StandInSession())
    off = live_fields(services_enabled=Service.all_mask() & ~Service.DEBUG.bit)
    on = live_fields(services_enabled=Service.all_mask())
    b.apply(attached_tick(t=1.0, live=off))
    refused = CommandResult("line", 0, "error", "error: service Debug is disabled", 0.001, 3)
    b.apply(attached_tick(t=1.02, live=off, results=(refused,)))
    assert (b.value("lastDrawResult"), b.value("lastDrawResultKind")) == (refused.text, ResultKind.ERROR)
    b.apply(attached_tick(t=1.04, live=off))  # nothing changed: the result stands as it came
    assert b.value("lastDrawResultKind") == ResultKind.ERROR

    b.apply(attached_tick(t=1.06, live=on))  # Debug turned back on: the refusal is from before
    assert b.value("lastDrawResult") == "error: service Debug is disabled · before Debug was turned on"
    assert b.value("lastDrawResultKind") == ResultKind.STALE
    b.apply(attached_tick(t=1.08, live=off))  # said once, not stacked
    assert b.value("lastDrawResult").count("before") == 1

    ok = CommandResult("line", 0, "ok", "success 2.0 ms", 0.002, 4)  # the next result starts afresh
    b.apply(attached_tick(t=1.1, live=on, results=(ok,)))
    assert (b.value("lastDrawResult"), b.value("lastDrawResultKind")) == ("success 2.0 ms", ResultKind.OK)
    b.apply(attached_tick(t=1.12, live=off))
    assert b.value("lastDrawResult") == "success 2.0 ms · before Debug was turned off"

    b.apply(attached_tick(t=1.14, generation=2, live=on))  # a new attach forgets it
    assert (b.value("lastDrawResult"), b.value("lastDrawResultKind")) == ("", "")
    b.apply(attached_tick(t=1.16, generation=2, live=off))
    assert b.value("lastDrawResult") == ""


def test_switches_and_the_mode_follow_the_engine_at_once_whatever_the_panels_refresh(qapp) -> None:
    """Seen at the budget's panel 0.5 Hz: "Debug  ok 5.5 ms  on" for 2 s after Debug was switched off."""
    b = MonitorBackend(StandInSession())
    b.LIVE_PERIOD_S = 2.0
    everything = Service.all_mask()
    b.apply(attached_tick(t=1.0, live=live_fields(services_enabled=everything, sim_mode=0)))
    assert b.services.row(Service.DEBUG)["enabled"] is True and b.value("simMode") == 0
    off = everything & ~Service.DEBUG.bit
    b.apply(attached_tick(t=1.02, live=live_fields(services_enabled=off, sim_mode=1, frame_seq=999)))
    assert b.services.row(Service.DEBUG)["enabled"] is False  # not at the next live refresh, 2 s on
    assert b.value("simMode") == 1
    assert b.value("frameSeq") != "999"  # the live facts still wait for their refresh


def test_a_stalled_engines_state_reads_as_last_written(qapp) -> None:
    """Seen: "stalled for 9 s" in the title beside "engine  running · pid N" in the panel (a SIGSTOPped engine)."""
    b = MonitorBackend(StandInSession())
    b.apply(attached_tick(t=1.0, live=live_fields(engine_state=1)))
    assert b.value("engineState") == "running"
    b.apply(attached_tick(t=5.0, state=LinkState.STALLED, text="stalled for 3 s", live=live_fields(engine_state=1)))
    assert b.value("engineState") == "running (last written)"
    b.apply(attached_tick(t=9.0, live=live_fields(engine_state=1)))
    assert b.value("engineState") == "running"


def test_slots_call_the_session_and_mark_pending(qapp) -> None:
    s = StandInSession()
    b = MonitorBackend(s)
    b.apply(attached_tick(t=1.0))

    b.setServiceEnabled(CAMERA, False)
    assert s.calls == [("set_service", CAMERA, False)]
    row = b.services.row(CAMERA)
    assert (row["pending"], row["lastResult"], row["resultKind"]) == (True, "waiting…", ResultKind.PENDING)
    b.setServiceEnabled(len(SERVICES), True)
    b.setServiceEnabled(-1, True)
    assert len(s.calls) == 1  # no such bit: not asked

    b.setSimMode(2)
    assert s.calls[-1] == ("set_sim_mode", 2)
    assert (b.value("simModePending"), b.value("simModeResult"), b.value("simModeResultKind")) == (
        True,
        "waiting…",
        "pending",
    )

    b.drawLine(0, 0, 0, 1, 0, 0.5, 1, 0.25, 0.25, 1, True)
    assert s.calls[-1] == (
        "draw",
        "line",
        {"start": (0, 0, 0), "end": (1, 0, 0.5), "rgba": (1, 0.25, 0.25, 1), "clear": True},
    )
    assert b.value("drawPending") is True

    # While the session says they are in flight they stay pending; then they are not.
    b.apply(
        attached_tick(
            t=1.02, commands=CommandsState(pending_services=frozenset({CAMERA}), sim_pending=True, draw_pending=True)
        )
    )
    assert b.services.row(CAMERA)["pending"] and b.value("simModePending") and b.value("drawPending")
    b.apply(attached_tick(t=1.04, commands=CommandsState()))
    assert not b.services.row(CAMERA)["pending"] and not b.value("simModePending") and not b.value("drawPending")

    s.draw_sent = False  # refused by the session: an error result follows, nothing is pending
    b.drawArrow(0, 0, 0.5, 0, 0, 1, 0.2, 0.9, 0.3, 1, 1.5, False)
    assert s.calls[-1] == (
        "draw",
        "arrow",
        {"origin": (0, 0, 0.5), "direction": (0, 0, 1), "rgba": (0.2, 0.9, 0.3, 1), "scale": 1.5, "clear": False},
    )
    assert b.value("drawPending") is False
    s.draw_sent = True
    b.drawVelocity(0, 0, 0, 1, 0, 0.5, 0.5, False)
    assert s.calls[-1] == (
        "draw",
        "velocity",
        {"origin": (0, 0, 0), "lin_vel_x": 1, "lin_vel_y": 0, "ang_vel_z": 0.5, "scale": 0.5, "clear": False},
    )
    assert b.value("drawPending") is True
    b.clearDrawings()
    assert s.calls[-1] == ("draw", "clear", {})

    b.setRepeat("line", 20.0)
    assert s.calls[-1] == ("repeat", "line", 20.0)
    b.setRepeat("line", math.inf)
    assert s.calls[-1] == ("repeat", "line", 0.0)
    b.setRepeat("", 0.0)
    assert s.calls[-1] == ("repeat", "", 0.0)
    b.apply(attached_tick(t=1.2, commands=CommandsState(repeat_kind="arrow", repeat_hz=60.0, draws_answered=7)))
    assert (b.value("repeatKind"), b.value("repeatHz"), b.value("drawCount")) == ("arrow", 60.0, 7)

    n = len(s.calls)
    b.selectSegment("LuckyTestUI_x")
    assert s.calls[n:] == [("switch", "LuckyTestUI_x")]
    assert b.value("selectedSegment") == "LuckyTestUI_x"
    assert b.segments.row(b.value("segmentIndex"))["label"] == "LuckyTestUI_x · not found"
    b.selectSegment("LuckyTestUI_x")  # already chosen
    b.selectSegment("auto")
    b.selectSegment("")  # auto again
    assert s.calls[n:] == [("switch", "LuckyTestUI_x"), ("switch", None)]
    assert (b.value("selectedSegment"), b.value("segmentIndex")) == ("", 0)

    # Without a session every request is a no-op.
    idle = MonitorBackend()
    idle.apply(attached_tick(t=1.0))
    idle.setServiceEnabled(CAMERA, False)
    idle.setSimMode(1)
    idle.drawLine(0, 0, 0, 1, 1, 1, 1, 1, 1, 1, False)
    idle.setRepeat("line", 10.0)
    idle.selectSegment("LuckyTestUI_x")
    assert not idle.services.row(CAMERA)["pending"] and not idle.value("simModePending")
    assert not idle.value("drawPending") and idle.value("selectedSegment") == ""


def test_segment_rows_from_entries(qapp) -> None:
    b = MonitorBackend(StandInSession())
    model = b.segments
    resets, changes = [], []
    model.modelReset.connect(lambda: resets.append(1))
    model.dataChanged.connect(lambda *a: changes.append(1))
    entries = (
        SegmentEntry("LuckyTestUI_b", 11, True, 4, 185.0, None),
        SegmentEntry("LuckyTestUI_a", 12, False, 2, 10.0, None),
        SegmentEntry("LuckyTestUI_c", 0, False, 0, None, "bad magic"),
        SegmentEntry("LuckyTestUI_d", 13, True, 8, None, None),
        SegmentEntry("LuckyTestUI_e", 14, False, 8, 5.0, None, server_alive=True),  # pid lives, heartbeat frozen
    )
    b.apply(tick(t=0.0, segments=entries, segments_changed=True))
    assert [r["label"] for r in model.rows] == [
        "auto: newest live (LuckyTestUI_b)",
        "LuckyTestUI_b · 4 envs · up 3 min",
        "LuckyTestUI_a · engine gone",
        "LuckyTestUI_c · invalid",
        "LuckyTestUI_d · 8 envs",
        "LuckyTestUI_e · heartbeat stale",
    ]
    assert model.row(1)["age"] == "up 3 min" and model.row(1)["serverPid"] == 11.0 and model.row(1)["alive"]
    assert model.row(3)["error"] == "bad magic" and not model.row(3)["alive"]
    assert model.row(0)["isAuto"] and model.row(0)["serverPid"] == 11.0
    assert (b.value("segmentIndex"), b.value("selectedSegment")) == (0, "")
    assert resets

    # The same segments, older: rows change in place, no reset.
    resets.clear()
    older = (dataclasses.replace(entries[0], age_s=3700.0), *entries[1:])
    b.apply(tick(t=1.0, segments=older, segments_changed=True))
    assert model.row(1)["label"] == "LuckyTestUI_b · 4 envs · up 1 h" and model.row(1)["age"] == "up 1 h"
    assert changes and not resets

    # The list is read only when the session says it changed.
    b.apply(tick(t=1.5, segments=(), segments_changed=False))
    assert model.rowCount() == 6

    # A chosen segment that does not exist gets its own row, and the picker points at it.
    b.apply(tick(t=2.0, selected="LuckyTestUI_gone", name="LuckyTestUI_gone", segments=older))
    last = model.row(model.rowCount() - 1)
    assert (last["name"], last["label"], last["error"]) == (
        "LuckyTestUI_gone",
        "LuckyTestUI_gone · not found",
        "not found",
    )
    assert (b.value("segmentIndex"), b.value("selectedSegment")) == (6, "LuckyTestUI_gone")
    # One that exists but cannot be attached (a name outside the prefix: not listed) says the state, not "not found".
    for state in (LinkState.INCOMPATIBLE, LinkState.ENGINE_EXITED, LinkState.SEARCHING):
        b.apply(tick(t=2.5, state=state, selected="LuckyTestUI_gone", name="LuckyTestUI_gone", segments=older))
        word = "not found" if state is LinkState.SEARCHING else state.value
        assert model.row(model.rowCount() - 1)["label"] == f"LuckyTestUI_gone · {word}"
    b.apply(tick(t=3.0, selected="LuckyTestUI_a", name="LuckyTestUI_a", segments=older))
    assert model.rowCount() == 6 and b.value("segmentIndex") == 2


def test_segment_rows() -> None:
    assert SegmentListModel.auto_row(None)["label"] == "auto: newest live (none yet)"
    model = SegmentListModel()
    assert model.rowCount() == 1 and model.index_of("") == 0 and model.index_of("x") == -1
    missing = SegmentListModel.missing_row("LuckyEngine_gone")
    assert model.set_rows([SegmentListModel.auto_row(None), missing], key="name") is True
    assert model.index_of("LuckyEngine_gone") == 1
    assert model.set_rows([SegmentListModel.auto_row(None), missing], key="name") is False


def test_views_follow_hand_made_ticks(views) -> None:
    s = StandInSession()
    b = MonitorBackend(s)
    panel = views(b, "RpcPanel")
    draw = views(b, "DebugDraw")
    b.apply(attached_tick(t=1.0))
    QApplication.processEvents()
    assert qml_child(panel, "stateLine").property("text") == "free-running"
    switch = qml_child(panel, "serviceSwitch_Camera")
    assert switch.property("checked") is True and switch.property("enabled") is True
    assert qml_child(draw, "drawForm").property("enabled") is True

    # QML's controls call the session through the backend's slots.
    assert QMetaObject.invokeMethod(switch, "click")
    assert s.calls[-1] == ("set_service", CAMERA, False)
    assert QMetaObject.invokeMethod(qml_child(draw, "sendOnce"), "click")
    assert s.calls[-1][:2] == ("draw", "line")
    QApplication.processEvents()
    assert switch.property("enabled") is False  # busy while pending
    assert colour_of(qml_child(panel, "serviceResult_Camera")) != GOOD

    # The engine answered, and then another monitor took the channel.
    b.apply(
        attached_tick(
            t=1.2,
            results=(
                CommandResult("service", CAMERA, "ok", "ok 0.7 ms", 0.0007, 1),
                CommandResult("line", 0, "error", "error: boom"),
            ),
        )
    )
    QApplication.processEvents()
    assert colour_of(qml_child(panel, "serviceResult_Camera")) == GOOD
    assert colour_of(qml_child(draw, "lastDrawResult")) == BAD
    b.apply(
        attached_tick(
            t=1.4,
            live=live_fields(services_enabled=Service.all_mask() & ~(1 << CAMERA)),
            tools=ToolsState(True, False, 4321, "tools channel held by pid 4321", 16 * 1024),
        )
    )
    QApplication.processEvents()
    assert switch.property("checked") is False and switch.property("enabled") is False
    assert qml_child(draw, "drawForm").property("enabled") is False
    assert qml_child(panel, "toolsReason").property("visible") is True


# ---------------------------------------------------------------------------
# with a reference engine
# ---------------------------------------------------------------------------


@engine_only
def test_views_follow_a_searching_session(rig, views) -> None:
    b = rig.follow(engine_name())  # nobody creates it
    panel = views(b, "RpcPanel")
    views(b, "DebugDraw")
    rig.pump(lambda: b.value("segmentIndex") > 0, "the missing segment listed in the picker", tick=False)
    assert b.value("state") == LinkState.SEARCHING.value
    assert b.value("stateColor") == DIM
    assert b.value("toolsReason") == "no segment attached"
    row = b.segments.row(b.value("segmentIndex"))
    assert row["name"] == rig.session.name and row["error"] == "not found"
    assert qml_child(panel, "segmentPicker").property("currentIndex") == b.value("segmentIndex")


@engine_only
def test_a_segment_attached_by_a_name_outside_the_prefix_is_not_listed_as_not_found(rig, views) -> None:
    """The picker lists segments of its prefix; one followed by a name outside it, attached and live, read
    "not found" while the panel showed it connected."""
    name = f"xlm_{uuid.uuid4().hex[:10]}"  # not PREFIX
    eng = rig.engine(name=name)
    b = rig.follow(name)
    views(b, "RpcPanel")
    rig.pump(lambda: b.value("attached") and b.value("segmentIndex") > 0, "attached and in the picker")
    row = b.segments.row(b.value("segmentIndex"))
    assert row["name"] == name and row["error"] == "" and row["alive"] is True, row
    assert row["label"] == f"{name} · attached (a name outside the list's prefix)"
    eng.close()
    rig.engines.remove(eng)
    rig.pump(lambda: not b.value("attached"), "detached", tick=False)
    rig.pump(lambda: b.segments.row(b.value("segmentIndex"))["error"] == "not found", "not found again", tick=False)


@engine_only
def test_backend_mirrors_the_engine(rig, views) -> None:
    eng = rig.engine(num_envs=5)
    b = rig.follow(eng.name)
    panel = views(b, "RpcPanel")
    rig.pump(
        lambda: b.value("attached") and b.value("toolsAvailable") and b.value("frameSeq") not in ("—", "0", "1"),
        "attached, tools claimed, frames flowing",
    )
    assert b.value("segmentName") == eng.name
    assert b.value("state") in (LinkState.FREE_RUNNING.value, LinkState.CONNECTED.value)
    assert b.value("healthy") is True and b.value("stateColor") == GOOD
    assert b.value("numEnvs") == 5 and b.value("obsSize") == 6 and b.value("actSize") == 2
    assert b.value("serverPid") == os.getpid() and b.value("clientPid") == 0
    assert b.value("mode").startswith("training")  # the label may say more
    assert b.value("imageText") == "16×16×3 rgb, top-down"
    assert b.value("cmdRingText") == "64 KiB ×2"
    assert b.value("toolsText") == "16 KiB ×2"
    assert b.value("toolsOwnerText") == f"this monitor (pid {os.getpid()})"
    assert b.value("gpuText") == "none"
    assert b.value("sessionId") == f"{eng.header.session_id:016x}"
    assert b.value("engineState") == "running"
    assert b.value("engineSharePct") == -1.0  # no trainer: no lock-step turns
    assert owner_of(eng.name) == os.getpid()
    assert rig.tick.tools.ours and rig.tick.tools.owner_pid == os.getpid()

    services = b.services.rows
    assert [r["name"] for r in services] == list(SERVICES)
    assert all(r["available"] and r["enabled"] and not r["pending"] for r in services)

    index = b.segments.index_of(eng.name)
    assert index > 0 and b.value("segmentIndex") == index
    assert b.segments.row(0)["isAuto"]

    assert qml_child(panel, "stateLine").property("text") == b.value("stateText")
    assert qml_child(panel, "segmentPicker").property("currentIndex") == index
    assert qml_child(panel, "serviceSwitch_Camera").property("checked") is True
    assert qml_child(panel, "serviceSwitch_Camera").property("enabled") is True


@engine_only
def test_camera_toggle_goes_through_the_engine(rig, views) -> None:
    eng = rig.engine()
    b = rig.follow(eng.name)
    panel = views(b, "RpcPanel")
    rig.pump(lambda: b.value("toolsAvailable") and b.services.row(CAMERA)["enabled"], "camera shown enabled")

    b.setServiceEnabled(CAMERA, False)
    rig.step(tick=False)  # the engine has not served it yet: nothing optimistic
    row = b.services.row(CAMERA)
    assert row["pending"] is True and row["enabled"] is True
    assert row["resultKind"] == ResultKind.PENDING
    assert CAMERA in rig.tick.commands.pending_services
    assert qml_child(panel, "serviceSwitch_Camera").property("enabled") is False  # busy while pending

    rig.pump(lambda: not b.services.row(CAMERA)["enabled"], "camera shown disabled")
    assert not services_enabled(eng.name) >> CAMERA & 1
    row = b.services.row(CAMERA)
    assert row["pending"] is False and row["lastResult"].startswith("ok ") and row["lastResult"].endswith(" ms")
    assert row["resultKind"] == ResultKind.OK
    assert colour_of(qml_child(panel, "serviceResult_Camera")) == GOOD
    switch = qml_child(panel, "serviceSwitch_Camera")
    assert switch.property("checked") is False and switch.property("enabled") is True
    # A success goes after a while, as the mode's does, keeping its room (the switch does not move).
    result, fade = qml_child(panel, "serviceResult_Camera"), qml_child(panel, "serviceFade_Camera")
    assert fade.property("interval") == 5000 and fade.property("running") is True
    assert result.property("opacity") == 1.0
    switch_x = switch.property("x")
    fade.setProperty("interval", 200)
    fade.restart()
    rig.pump(lambda: result.property("opacity") == 0.0, "the success faded", timeout=5.0)
    assert result.property("visible") is True and switch.property("x") == switch_x

    b.setServiceEnabled(CAMERA, True)
    rig.pump(lambda: b.services.row(CAMERA)["enabled"], "camera shown enabled again")
    assert services_enabled(eng.name) >> CAMERA & 1
    assert qml_child(panel, "serviceSwitch_Camera").property("checked") is True

    # The row's tooltip ("click to disable Camera") goes away at a click, until the pointer leaves the
    # row: it had stayed up over the row above, telling the state before the click.
    row_item = qml_child(panel, "serviceRow_Camera")
    centre = switch.mapToScene(QPointF(switch.property("width") / 2, switch.property("height") / 2)).toPoint()
    QTest.mouseMove(panel, centre)
    rig.pump(lambda: row_item.property("tipShown"), "the row's tooltip shown while hovered", tick=False)
    QTest.mouseClick(panel, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, centre)
    rig.pump(lambda: b.services.row(CAMERA)["pending"] or not b.services.row(CAMERA)["enabled"], "clicked")
    assert row_item.property("tipShown") is False
    rig.pump(lambda: not b.services.row(CAMERA)["enabled"], "camera shown disabled by the click")
    QTest.mouseMove(panel, QPoint(centre.x(), panel.height() - 2))  # away from the row
    rig.pump(lambda: not row_item.property("tipDismissed"), "dismissal forgotten off the row", tick=False)
    QTest.mouseMove(panel, centre)
    rig.pump(lambda: row_item.property("tipShown"), "shown again on the next hover", tick=False)


@engine_only
def test_sim_mode_follows_the_engine(rig, views) -> None:
    eng = rig.engine()
    b = rig.follow(eng.name)
    panel = views(b, "RpcPanel")
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    assert b.value("simMode") == 0
    fade = qml_child(panel, "simModeFade")
    assert fade.property("interval") == 5000
    fade.setProperty("interval", 1000)  # a success's line fades after 5 s; this test waits less
    b.setSimMode(1)
    assert b.value("simModePending") is True
    rig.pump(lambda: b.value("simMode") == 1 and not b.value("simModePending"), "deterministic mode shown")
    assert eng.sim_mode == 1
    assert b.value("simModeResult").startswith("ok ") and b.value("simModeResultKind") == ResultKind.OK
    assert qml_child(panel, "simMode").property("currentIndex") == 1
    assert colour_of(qml_child(panel, "aside_Simulation")) == GOOD  # on the section's title line
    # A success goes after a while (it pushed the facts below the fold at 1280x800); a failure stays.
    result = qml_child(panel, "aside_Simulation")
    assert result.property("visible") is True
    rig.pump(lambda: result.property("visible") is False, "the success faded", timeout=5.0)
    services_y = qml_child(panel, "serviceSwitch_Camera").mapToScene(QPointF(0, 0)).y()
    b.setSimMode(7)
    rig.step()  # the session's refusal arrives with the next tick
    assert b.value("simModeResult") == "error: simulation mode 7 unknown"
    assert b.value("simModeResultKind") == ResultKind.ERROR
    assert not b.value("simModePending")
    assert colour_of(qml_child(panel, "aside_Simulation")) == BAD
    assert qml_child(panel, "aside_Simulation").property("text") == "error: simulation mode 7 unknown"
    assert qml_child(panel, "serviceSwitch_Camera").mapToScene(QPointF(0, 0)).y() == services_y  # nothing moved
    assert result.property("visible") is True
    assert fade.property("running") is False
    assert eng.sim_mode == 1


@engine_only
def test_draw_requests_get_success(rig, views) -> None:
    eng = rig.engine()
    b = rig.follow(eng.name)
    draw = views(b, "DebugDraw")
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    assert qml_child(draw, "drawForm").property("enabled") is True

    b.drawLine(0, 0, 0, 1, 0, 0.5, 1, 0.25, 0.25, 1, False)
    assert b.value("drawPending") is True
    rig.pump(lambda: b.value("drawCount") == 1, "line answered")
    assert b.value("lastDrawResult").startswith("success ") and b.value("lastDrawResultKind") == ResultKind.OK
    assert b.value("lastRttMs") > 0 and not b.value("drawPending")
    assert qml_child(draw, "lastDrawResult").property("text") == b.value("lastDrawResult")
    assert colour_of(qml_child(draw, "lastDrawResult")) == GOOD

    b.drawArrow(0, 0, 0.5, 0, 0, 1, 0.2, 0.9, 0.3, 1, 1.5, False)
    rig.pump(lambda: b.value("drawCount") == 2, "arrow answered")
    assert b.value("lastDrawResult").startswith("success ")
    b.drawVelocity(0, 0, 0, 1, 0, 0.5, 0.5, True)
    rig.pump(lambda: b.value("drawCount") == 3, "velocity answered")
    assert b.value("lastDrawResult").startswith("success ")
    b.clearDrawings()
    rig.pump(lambda: b.value("drawCount") == 4, "clear answered")
    assert b.value("lastDrawResult").startswith("success ")

    b.drawLine(math.nan, 0, 0, 1, 0, 0, 1, 1, 1, 1, False)
    assert b.value("drawPending") is False  # refused: nothing sent
    rig.step()
    assert b.value("lastDrawResult").startswith("error: ") and "finite" in b.value("lastDrawResult")
    assert b.value("lastDrawResultKind") == ResultKind.ERROR
    assert colour_of(qml_child(draw, "lastDrawResult")) == BAD
    assert b.value("drawCount") == 4


@engine_only
def test_send_once_button_draws_the_form_values(rig, views) -> None:
    eng = rig.engine()
    b = rig.follow(eng.name)
    draw = views(b, "DebugDraw")
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    assert QMetaObject.invokeMethod(qml_child(draw, "sendOnce"), "click")
    rig.pump(lambda: b.value("drawCount") == 1, "the form's line answered")
    assert b.value("lastDrawResult").startswith("success ")
    assert "line" in rig.session._last_draw  # the form sent a line (the default tab)


@engine_only
def test_repeat_resends_until_stopped(rig) -> None:
    eng = rig.engine()
    b = rig.follow(eng.name)
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    b.setRepeat("arrow", 10)
    rig.step()
    assert b.value("lastDrawResult") == "error: nothing to repeat: send the arrow once first"
    assert b.value("repeatKind") == ""

    b.drawLine(0, 0, 0, 1, 1, 1, 1, 1, 1, 1, True)
    b.setRepeat("line", 1000)
    rig.step()
    assert b.value("repeatKind") == "line" and b.value("repeatHz") == 60.0
    rig.pump(lambda: b.value("drawCount") >= 4, "repeated lines answered")
    b.setRepeat("", 0)
    rig.pump(lambda: not b.value("drawPending"), "last repeat answered")
    done = b.value("drawCount")
    for _ in range(20):
        rig.step()
    assert b.value("drawCount") == done and b.value("repeatKind") == ""


@engine_only
def test_tools_channel_held_by_another_monitor(rig, views) -> None:
    eng = rig.engine()
    holder = os.getppid()
    other = ToolsChannel.claim(eng.name, pid=holder)
    try:
        b = rig.follow(eng.name)
        panel = views(b, "RpcPanel")
        draw = views(b, "DebugDraw")
        rig.pump(lambda: b.value("toolsReason").startswith("tools channel held"), "busy reported")
        assert b.value("toolsReason") == f"tools channel held by pid {holder}"
        assert b.value("toolsAvailable") is False
        assert b.value("toolsOwnerText") == f"pid {holder}"
        assert rig.tick.tools == ToolsState(True, False, holder, f"tools channel held by pid {holder}", 16 * 1024)
        for name in SERVICES:
            assert qml_child(panel, f"serviceSwitch_{name}").property("enabled") is False
        assert qml_child(panel, "simMode").property("enabled") is False
        assert qml_child(draw, "drawForm").property("enabled") is False
        assert qml_child(panel, "toolsReason").property("visible") is True
        before = services_enabled(eng.name)
        b.setServiceEnabled(CAMERA, False)
        rig.step()
        assert b.services.row(CAMERA)["lastResult"] == f"error: tools channel held by pid {holder}"
        assert b.services.row(CAMERA)["pending"] is False
        for _ in range(5):
            rig.step()
        assert services_enabled(eng.name) == before
        assert owner_of(eng.name) == holder
    finally:
        other.release()
    rig.pump(lambda: b.value("toolsAvailable"), "channel claimed once the other monitor let go")
    assert owner_of(eng.name) == os.getpid()
    assert qml_child(panel, "serviceSwitch_Camera").property("enabled") is True


@engine_only
def test_engine_without_tools_channel(rig, views) -> None:
    eng = rig.engine(tools_ring_size=0)
    b = rig.follow(eng.name)
    panel = views(b, "RpcPanel")
    rig.pump(lambda: b.value("attached") and b.value("frameSeq") not in ("—", "0"), "attached")
    for _ in range(3):
        rig.step()
    assert b.value("toolsAvailable") is False
    assert b.value("toolsReason") == "engine exports no tools channel"
    assert b.value("toolsText") == "none"
    assert not rig.tick.tools.exported
    assert qml_child(panel, "serviceSwitch_Camera").property("enabled") is False
    b.drawLine(0, 0, 0, 1, 1, 1, 1, 1, 1, 1, False)
    rig.step()
    assert b.value("lastDrawResult") == "error: engine exports no tools channel"


@engine_only
def test_channel_released_on_close_and_reclaimed_after_recreate(rig) -> None:
    eng = rig.engine()
    b = rig.follow(eng.name)
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    old_owner = eng.header.tools_offset
    assert int.from_bytes(eng.seg.buf[old_owner : old_owner + 4], "little") == os.getpid()

    # The engine recreates its segment under the same name: the session re-attaches,
    # gives the old channel back and claims the new one.
    generation = rig.tick.generation
    new = ReferenceEngine(dataclasses.replace(eng.cfg), exist_ok=True)
    rig.engines.append(new)
    rig.pump(
        lambda: (
            rig.tick.generation > generation
            and b.value("toolsAvailable")
            and b.value("sessionId") == f"{new.header.session_id:016x}"
        ),
        "re-attached and re-claimed",
    )
    assert int.from_bytes(eng.seg.buf[old_owner : old_owner + 4], "little") == 0
    off = new.header.tools_offset
    assert int.from_bytes(new.seg.buf[off : off + 4], "little") == os.getpid()

    # A request in flight when the channel goes is reported, not lost.
    b.setServiceEnabled(CAMERA, False)
    rig.session.close()
    assert int.from_bytes(new.seg.buf[off : off + 4], "little") == 0  # released at once
    t = rig.step(tick=False)
    assert any(r.kind == "service" and r.target == CAMERA and r.text == "error: monitor closed" for r in t.results)
    assert b.services.row(CAMERA)["lastResult"] == "error: monitor closed"
    assert b.services.row(CAMERA)["resultKind"] == ResultKind.ERROR
    assert b.services.row(CAMERA)["pending"] is False
    assert not t.tools.ours and b.value("toolsAvailable") is False
    assert rig.session.closed


@engine_only
def test_a_closed_session_does_not_read_as_attached(rig) -> None:
    eng = rig.engine()
    b = rig.follow(eng.name)
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    rig.session.close()
    t = rig.step(tick=False)
    assert (t.attached, t.state.healthy, b.value("attached"), b.value("healthy")) == (False, False, False, False)


@engine_only
def test_segment_picker_switches_and_releases(rig, views) -> None:
    first = rig.engine()
    second = rig.engine(num_envs=3)
    b = rig.follow(first.name)
    panel = views(b, "RpcPanel")
    rig.pump(lambda: b.value("toolsAvailable") and b.segments.index_of(second.name) > 0, "first attached")
    assert b.value("numEnvs") == 4
    b.selectSegment(second.name)
    assert rig.session.name == second.name
    rig.step(tick=False)
    off = first.header.tools_offset
    assert int.from_bytes(first.seg.buf[off : off + 4], "little") == 0  # released by the next step
    rig.pump(
        lambda: b.value("segmentName") == second.name and b.value("numEnvs") == 3 and b.value("toolsAvailable"),
        "second attached",
    )
    assert owner_of(second.name) == os.getpid()
    assert b.value("segmentIndex") == b.segments.index_of(second.name)
    assert qml_child(panel, "segmentPicker").property("currentIndex") == b.value("segmentIndex")
    labels = [r["label"] for r in b.segments.rows]
    assert any(label.startswith(f"{second.name} · 3 envs") for label in labels)


@engine_only
def test_request_timeout_is_reported(rig) -> None:
    eng = rig.engine()
    b = rig.follow(eng.name, command_timeout_s=0.2)
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    b.setSimMode(2)
    rig.pump(lambda: not b.value("simModePending"), "timed out", tick=False)  # the engine never serves it
    assert b.value("simModeResult") == "error: no reply within 0.2 s"
    assert b.value("simModeResultKind") == ResultKind.ERROR
    assert eng.sim_mode == 0


def test_the_panels_live_sections_say_how_often_they_refresh_when_it_is_slow(views) -> None:
    """Seen: the panel's image_seq 2 s behind the grid's, nothing saying the panel refreshes every 2 s."""
    b = MonitorBackend()
    panel = views(b, "RpcPanel")
    b.apply(attached_tick(t=1.0))
    assert b.value("liveEvery") == ""  # the full rate (10 Hz): nothing to say
    assert qml_child(panel, "aside_Rates").property("visible") is False
    b.LIVE_PERIOD_S = 2.0  # what the window sets at the budget's panel 0.5 Hz
    b.apply(attached_tick(t=3.0))
    assert b.value("liveEvery") == "every 2 s"
    for section in ("Segment", "Lock-step", "Rates", "Images"):
        aside = qml_child(panel, f"aside_{section}")
        assert aside.property("visible") is True and aside.property("text") == "every 2 s", section


def test_the_draw_forms_buttons_stay_put_when_the_tab_changes(views) -> None:
    """Seen: "Send once" sat 28 px lower on the Arrow tab than on Line; a click where it had been hit the row above."""
    b = MonitorBackend(StandInSession())
    draw = views(b, "DebugDraw")
    b.apply(attached_tick(t=1.0))
    QApplication.processEvents()
    tabs, send, clear = (qml_child(draw, n) for n in ("drawTabs", "sendOnce", "clearPrevious"))
    where = []
    for index in (0, 1, 2, 0):
        tabs.setProperty("currentIndex", index)
        draw.grabFramebuffer()  # a render: the layouts are polished before it
        where.append((send.mapToScene(QPointF(0, 0)).y(), clear.mapToScene(QPointF(0, 0)).y()))
    assert len(set(where)) == 1, where
    pages = [qml_child(draw, n) for n in ("linePage", "arrowPage", "velocityPage")]
    assert send.mapToScene(QPointF(0, 0)).y() > max(p.mapToScene(QPointF(0, p.height())).y() for p in pages)

    # A tall dock's spare height goes below the form: seen at 1920x1080, 150 px between the Line page's
    # colours and the clear box.
    for height in (480, 1000):
        draw.resize(380, height)
        for index in (2, 0):
            tabs.setProperty("currentIndex", index)
            draw.grabFramebuffer()
            bottom = max(p.mapToScene(QPointF(0, p.height())).y() for p in pages if p.property("visible"))
            if index == 0:
                colour = qml_child(draw, "colour")
                bottom = colour.mapToScene(QPointF(0, colour.height())).y()
            gap = clear.mapToScene(QPointF(0, 0)).y() - bottom
            assert gap <= (16 if index == 2 else 48), (height, index, gap)  # Line: the velocity page is taller


def test_a_repeats_sends_and_answers_are_shown_at_the_panels_rate_and_a_change_at_once(qapp) -> None:
    # At 10 Hz and more, showing each send and answer re-evaluated the debug-draw form's bindings 20 times a second
    # (0.7 % of a core of the window's 10 %). A steady repeat is shown at the panels' rate; what changes is not held.
    b = MonitorBackend(StandInSession())
    b.LIVE_PERIOD_S = 1.0  # a panel refresh a second
    emitted: list[int] = []
    b.drawChanged.connect(lambda: emitted.append(1))
    b.apply(attached_tick(t=0.0))
    repeat = CommandsState(repeat_kind="line", repeat_hz=10.0)
    t, answered = 0.0, 0
    b.apply(attached_tick(t=t, commands=repeat))  # the repeat starts: shown at once
    assert b.value("repeatKind") == "line"
    emitted.clear()
    for _ in range(30):  # 3 s of a repeat at 10 Hz: a send and an answer each 0.1 s
        t += 0.05
        b.apply(attached_tick(t=t, commands=dataclasses.replace(repeat, draw_pending=True, draws_answered=answered)))
        t += 0.05
        answered += 1
        ok = CommandResult("line", 0, "ok", f"success {answered} ms", answered / 1000, answered)
        b.apply(attached_tick(t=t, commands=dataclasses.replace(repeat, draws_answered=answered), results=(ok,)))
    assert 3 <= len(emitted) <= 8  # about twice a second (commands, results), not 60 times in 3 s
    assert b.value("drawCount") >= answered - 10  # within a panel period of the count
    # An answer of another status is shown at once, as is the last one when the repeat stops.
    t += 0.05
    bad = CommandResult("line", 0, "error", "error: service Debug is disabled", 0.001, 99)
    b.apply(attached_tick(t=t, commands=dataclasses.replace(repeat, draws_answered=answered + 1), results=(bad,)))
    assert (b.value("lastDrawResult"), b.value("lastDrawResultKind")) == ("error: service Debug is disabled", "error")
    t += 0.05
    good = CommandResult("line", 0, "ok", "success 1.5 ms", 0.0015, 100)
    b.apply(attached_tick(t=t, commands=dataclasses.replace(repeat, draws_answered=answered + 2), results=(good,)))
    assert b.value("lastDrawResult") == "success 1.5 ms"
    t += 0.05
    again = CommandResult("line", 0, "ok", "success 1.7 ms", 0.0017, 101)
    b.apply(attached_tick(t=t, commands=dataclasses.replace(repeat, draws_answered=answered + 3), results=(again,)))
    assert b.value("lastDrawResult") == "success 1.5 ms"  # held: the same status within the period
    # A one-off draw of another kind sent during the repeat is answered at once, not held behind the repeat's.
    t += 0.05
    arrow = CommandResult("arrow", 0, "ok", "success 2.2 ms", 0.0022, 102)
    b.apply(attached_tick(t=t, commands=dataclasses.replace(repeat, draws_answered=answered + 4), results=(arrow,)))
    assert b.value("lastDrawResult") == "success 2.2 ms" and b.value("lastRttMs") == 2.2
    t += 0.05
    again = CommandResult("line", 0, "ok", "success 1.7 ms", 0.0017, 103)
    b.apply(attached_tick(t=t, commands=dataclasses.replace(repeat, draws_answered=answered + 5), results=(again,)))
    assert b.value("lastDrawResult") == "success 2.2 ms"  # the repeat's answer waits its turn
    t += 0.05
    b.apply(attached_tick(t=t, commands=CommandsState(draws_answered=answered + 5)))  # the repeat stops
    assert b.value("lastDrawResult") == "success 1.7 ms" and b.value("lastRttMs") == 1.7
    assert b.value("drawCount") == answered + 5 and b.value("repeatKind") == ""
