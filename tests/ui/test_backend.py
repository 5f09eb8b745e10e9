"""MonitorBackend and the LuckyMonitor QML views, against the reference engine.

Each test drives an in-process :class:`ReferenceEngine` by calling ``tick()``
between the monitor's ``poll()`` / ``update()`` steps, the way the window's
timer interleaves them, until the expected state shows up (or a generous
deadline passes, which is a failure, never a timing assertion).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import shiboken6
from PySide6.QtCore import QMetaObject, QObject, QUrl
from PySide6.QtQuick import QQuickItem
from PySide6.QtQuickWidgets import QQuickWidget
from PySide6.QtWidgets import QApplication

from lucky_monitor.core.monitor import LinkState, MonitorCore
from lucky_monitor.protocol.messages import Service
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

pytestmark = pytest.mark.skipif(platform_kind() != "dir", reason="segments are exercised on Linux")

CAMERA = int(Service.CAMERA)
#: Test segments use their own prefix, so that no monitor following the newest
#: live ``LuckyEngine_*`` segment (another test run, a demo) claims their tools channel.
PREFIX = "LuckyTestUI_"
_serial = itertools.count()


def engine_name() -> str:
    return f"{PREFIX}{os.getpid()}_{next(_serial)}_{uuid.uuid4().hex[:8]}"


def small_config(**kw: object) -> EngineConfig:
    cfg: dict[str, object] = {"num_envs": 4, "obs_size": 6, "act_size": 2, "image": (16, 16),
                              "cmd_ring_size": 64 * 1024, "tools_ring_size": 16 * 1024}
    cfg.update(kw)
    return EngineConfig(name=engine_name(), **cfg)  # type: ignore[arg-type]


class Rig:
    """Engines, one MonitorCore and one MonitorBackend, stepped together."""

    def __init__(self) -> None:
        self.engines: list[ReferenceEngine] = []
        self.core: MonitorCore | None = None
        self.backend = MonitorBackend(command_timeout_s=5.0)
        self.backend.CLAIM_RETRY_S = 0.05  # look again quickly when the channel frees up

    def engine(self, **kw: object) -> ReferenceEngine:
        eng = ReferenceEngine(small_config(**kw))
        self.engines.append(eng)
        return eng

    def follow(self, name: str | None) -> MonitorCore:
        self.core = MonitorCore(name, prefix=PREFIX)
        return self.core

    def step(self, *, tick: bool = True) -> None:
        if tick:
            for eng in self.engines:
                if not eng.seg.closed:
                    eng.tick()
        assert self.core is not None
        self.core.poll()
        self.backend.update(self.core)
        QApplication.processEvents()

    def pump(self, cond: Callable[[], bool], what: str, *, timeout: float = 15.0, tick: bool = True) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                b = self.backend
                raise AssertionError(f"gave up waiting for: {what} (state {b.value('stateText')!r}, "
                                     f"reason {b.value('reason')!r}, tools {b.value('toolsReason')!r})")
            self.step(tick=tick)

    def close(self) -> None:
        self.backend.close()
        if self.core is not None:
            self.core.close()
        for eng in self.engines:
            eng.close()


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
    expected = {LinkState.SEARCHING: DIM, LinkState.CONNECTED: GOOD, LinkState.FREE_RUNNING: GOOD,
                LinkState.WAITING_FOR_TRAINER: WARN, LinkState.PAUSED: WARN, LinkState.INITIALISING: WARN,
                LinkState.ENGINE_EXITED: BAD, LinkState.STALLED: BAD, LinkState.INCOMPATIBLE: BAD,
                LinkState.VIOLATION: BAD}
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
    for view in (panel, draw):  # a required property given at creation, not a context property
        assert view.rootContext().contextProperty("backend") is None
    assert colour_of(qml_child(draw, "lastDrawResult")) == DIM  # "none yet"
    not_blank(panel, tmp_path / "panel.png")
    not_blank(draw, tmp_path / "draw.png")


def test_views_follow_a_searching_core(rig, views) -> None:
    rig.follow(engine_name())  # nobody creates it
    panel = views(rig.backend, "RpcPanel")
    views(rig.backend, "DebugDraw")
    rig.pump(lambda: rig.backend.value("segmentIndex") > 0, "the missing segment listed in the picker", tick=False)
    b = rig.backend
    assert b.value("state") == LinkState.SEARCHING.value
    assert b.value("stateColor") == DIM
    assert b.value("toolsReason") == "no segment attached"
    row = b.segments.row(b.value("segmentIndex"))
    assert row["name"] == rig.core.name and row["error"] == "not found"
    assert qml_child(panel, "segmentPicker").property("currentIndex") == b.value("segmentIndex")


@pytest.mark.qt_log_ignore(r"NoSuchView")
def test_missing_component_raises(qapp) -> None:
    with pytest.raises(QmlLoadError, match="NoSuchView"):
        make_quick_widget(MonitorBackend(), "NoSuchView")


# ---------------------------------------------------------------------------
# with a reference engine
# ---------------------------------------------------------------------------


def test_backend_mirrors_the_engine(rig, views) -> None:
    eng = rig.engine(num_envs=5)
    rig.follow(eng.name)
    panel = views(rig.backend, "RpcPanel")
    b = rig.backend
    rig.pump(lambda: b.value("attached") and b.value("toolsAvailable") and b.value("frameSeq") > 1,
             "attached, tools claimed, frames flowing")
    assert b.value("segmentName") == eng.name
    assert b.value("state") in (LinkState.FREE_RUNNING.value, LinkState.CONNECTED.value)
    assert b.value("healthy") is True and b.value("stateColor") == GOOD
    assert b.value("numEnvs") == 5 and b.value("obsSize") == 6 and b.value("actSize") == 2
    assert b.value("serverPid") == os.getpid() and b.value("clientPid") == 0
    assert b.value("mode") == "training"
    assert b.value("imageText") == "16×16×3 rgb, top-down"
    assert b.value("cmdRingText") == "64 KiB ×2"
    assert b.value("toolsText") == "16 KiB ×2"
    assert b.value("toolsOwnerText") == f"this monitor (pid {os.getpid()})"
    assert b.value("gpuText") == "none"
    assert b.value("sessionId") == f"{eng.header.session_id:016x}"
    assert b.value("engineState") == "running"
    assert b.value("engineSharePct") == -1.0  # no trainer: no lock-step turns
    assert tools_owner(rig.core.segment) == os.getpid()

    services = b.services.rows
    assert [r["name"] for r in services] == list(Service.labels())
    assert all(r["available"] and r["enabled"] and not r["pending"] for r in services)

    index = b.segments.index_of(eng.name)
    assert index > 0 and b.value("segmentIndex") == index
    assert b.segments.row(0)["isAuto"]

    assert qml_child(panel, "stateLine").property("text") == b.value("stateText")
    assert qml_child(panel, "segmentPicker").property("currentIndex") == index
    assert qml_child(panel, "serviceSwitch_Camera").property("checked") is True
    assert qml_child(panel, "serviceSwitch_Camera").property("enabled") is True


def test_camera_toggle_goes_through_the_engine(rig, views) -> None:
    eng = rig.engine()
    rig.follow(eng.name)
    panel = views(rig.backend, "RpcPanel")
    b = rig.backend
    rig.pump(lambda: b.value("toolsAvailable") and b.services.row(CAMERA)["enabled"], "camera shown enabled")

    b.setServiceEnabled(CAMERA, False)
    rig.step(tick=False)  # the engine has not served it yet: nothing optimistic
    row = b.services.row(CAMERA)
    assert row["pending"] is True and row["enabled"] is True
    assert row["resultKind"] == ResultKind.PENDING
    assert qml_child(panel, "serviceSwitch_Camera").property("enabled") is False  # busy while pending

    rig.pump(lambda: not b.services.row(CAMERA)["enabled"], "camera shown disabled")
    assert not services_enabled(eng.name) >> CAMERA & 1
    row = b.services.row(CAMERA)
    assert row["pending"] is False and row["lastResult"].startswith("ok ") and row["lastResult"].endswith(" ms")
    assert row["resultKind"] == ResultKind.OK
    assert colour_of(qml_child(panel, "serviceResult_Camera")) == GOOD
    switch = qml_child(panel, "serviceSwitch_Camera")
    assert switch.property("checked") is False and switch.property("enabled") is True

    b.setServiceEnabled(CAMERA, True)
    rig.pump(lambda: b.services.row(CAMERA)["enabled"], "camera shown enabled again")
    assert services_enabled(eng.name) >> CAMERA & 1
    assert qml_child(panel, "serviceSwitch_Camera").property("checked") is True


def test_sim_mode_follows_the_engine(rig, views) -> None:
    eng = rig.engine()
    rig.follow(eng.name)
    panel = views(rig.backend, "RpcPanel")
    b = rig.backend
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    assert b.value("simMode") == 0
    b.setSimMode(1)
    assert b.value("simModePending") is True
    rig.pump(lambda: b.value("simMode") == 1 and not b.value("simModePending"), "deterministic mode shown")
    assert eng.sim_mode == 1
    assert b.value("simModeResult").startswith("ok ") and b.value("simModeResultKind") == ResultKind.OK
    assert qml_child(panel, "simMode").property("currentIndex") == 1
    assert colour_of(qml_child(panel, "simModeResult")) == GOOD
    b.setSimMode(7)
    assert b.value("simModeResult") == "error: simulation mode 7 unknown"
    assert b.value("simModeResultKind") == ResultKind.ERROR
    assert colour_of(qml_child(panel, "simModeResult")) == BAD
    assert eng.sim_mode == 1


def test_draw_requests_get_success(rig, views) -> None:
    eng = rig.engine()
    rig.follow(eng.name)
    draw = views(rig.backend, "DebugDraw")
    b = rig.backend
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
    assert b.value("lastDrawResult") == "error: start.x is not a finite number"
    assert b.value("lastDrawResultKind") == ResultKind.ERROR
    assert colour_of(qml_child(draw, "lastDrawResult")) == BAD
    assert b.value("drawCount") == 4


def test_send_once_button_draws_the_form_values(rig, views) -> None:
    eng = rig.engine()
    rig.follow(eng.name)
    draw = views(rig.backend, "DebugDraw")
    b = rig.backend
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    assert QMetaObject.invokeMethod(qml_child(draw, "sendOnce"), "click")
    rig.pump(lambda: b.value("drawCount") == 1, "the form's line answered")
    assert b.value("lastDrawResult").startswith("success ")
    assert "line" in b._last_draw  # the form sent a line (the default tab)


def test_repeat_resends_until_stopped(rig) -> None:
    eng = rig.engine()
    rig.follow(eng.name)
    b = rig.backend
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    b.setRepeat("arrow", 10)
    assert b.value("lastDrawResult") == "error: nothing to repeat: send the arrow once first"
    assert b.value("repeatKind") == ""

    b.drawLine(0, 0, 0, 1, 1, 1, 1, 1, 1, 1, True)
    b.setRepeat("line", 1000)
    assert b.value("repeatKind") == "line" and b.value("repeatHz") == 60.0
    rig.pump(lambda: b.value("drawCount") >= 4, "repeated lines answered")
    b.setRepeat("", 0)
    rig.pump(lambda: not b.value("drawPending"), "last repeat answered")
    done = b.value("drawCount")
    for _ in range(20):
        rig.step()
    assert b.value("drawCount") == done and b.value("repeatKind") == ""


def test_tools_channel_held_by_another_monitor(rig, views) -> None:
    eng = rig.engine()
    holder = os.getppid()
    other = ToolsChannel.claim(eng.name, pid=holder)
    try:
        rig.follow(eng.name)
        panel = views(rig.backend, "RpcPanel")
        draw = views(rig.backend, "DebugDraw")
        b = rig.backend
        rig.pump(lambda: b.value("toolsReason").startswith("tools channel held"), "busy reported")
        assert b.value("toolsReason") == f"tools channel held by pid {holder}"
        assert b.value("toolsAvailable") is False
        assert b.value("toolsOwnerText") == f"pid {holder}"
        for name in Service.labels():
            assert qml_child(panel, f"serviceSwitch_{name}").property("enabled") is False
        assert qml_child(panel, "simMode").property("enabled") is False
        assert qml_child(draw, "drawForm").property("enabled") is False
        assert qml_child(panel, "toolsReason").property("visible") is True
        before = services_enabled(eng.name)
        b.setServiceEnabled(CAMERA, False)
        assert b.services.row(CAMERA)["lastResult"] == f"error: tools channel held by pid {holder}"
        for _ in range(5):
            rig.step()
        assert services_enabled(eng.name) == before
        assert tools_owner(rig.core.segment) == holder
    finally:
        other.release()
    rig.pump(lambda: b.value("toolsAvailable"), "channel claimed once the other monitor let go")
    assert tools_owner(rig.core.segment) == os.getpid()
    assert qml_child(panel, "serviceSwitch_Camera").property("enabled") is True


def test_engine_without_tools_channel(rig, views) -> None:
    eng = rig.engine(tools_ring_size=0)
    rig.follow(eng.name)
    panel = views(rig.backend, "RpcPanel")
    b = rig.backend
    rig.pump(lambda: b.value("attached") and b.value("frameSeq") > 0, "attached")
    for _ in range(3):
        rig.step()
    assert b.value("toolsAvailable") is False
    assert b.value("toolsReason") == "engine exports no tools channel"
    assert b.value("toolsText") == "none"
    assert qml_child(panel, "serviceSwitch_Camera").property("enabled") is False
    b.drawLine(0, 0, 0, 1, 1, 1, 1, 1, 1, 1, False)
    assert b.value("lastDrawResult") == "error: engine exports no tools channel"


def test_channel_released_on_close_and_reclaimed_after_recreate(rig) -> None:
    eng = rig.engine()
    rig.follow(eng.name)
    b = rig.backend
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    old_owner = eng.header.tools_offset
    assert int.from_bytes(eng.seg.buf[old_owner : old_owner + 4], "little") == os.getpid()

    # The engine recreates its segment under the same name: the core re-attaches,
    # the backend gives the old channel back and claims the new one.
    generation = rig.core.generation
    new = ReferenceEngine(dataclasses.replace(eng.cfg), exist_ok=True)
    rig.engines.append(new)
    rig.pump(lambda: rig.core.generation > generation and b.value("toolsAvailable")
             and b.value("sessionId") == f"{new.header.session_id:016x}", "re-attached and re-claimed")
    assert int.from_bytes(eng.seg.buf[old_owner : old_owner + 4], "little") == 0
    off = new.header.tools_offset
    assert int.from_bytes(new.seg.buf[off : off + 4], "little") == os.getpid()

    # A request in flight when the channel goes is reported, not lost.
    b.setServiceEnabled(CAMERA, False)
    b.close()
    assert b.services.row(CAMERA)["lastResult"] == "error: monitor closed"
    assert b.services.row(CAMERA)["pending"] is False
    assert int.from_bytes(new.seg.buf[off : off + 4], "little") == 0
    assert b.tools_channel is None


def test_segment_picker_switches_and_releases(rig, views) -> None:
    first = rig.engine()
    second = rig.engine(num_envs=3)
    rig.follow(first.name)
    panel = views(rig.backend, "RpcPanel")
    b = rig.backend
    rig.pump(lambda: b.value("toolsAvailable") and b.segments.index_of(second.name) > 0, "first attached")
    assert b.value("numEnvs") == 4
    b.selectSegment(second.name)
    assert rig.core.name == second.name
    off = first.header.tools_offset
    assert int.from_bytes(first.seg.buf[off : off + 4], "little") == 0  # released at once
    rig.pump(lambda: b.value("segmentName") == second.name and b.value("numEnvs") == 3
             and b.value("toolsAvailable"), "second attached")
    assert b.value("segmentIndex") == b.segments.index_of(second.name)
    assert qml_child(panel, "segmentPicker").property("currentIndex") == b.value("segmentIndex")
    labels = [r["label"] for r in b.segments.rows]
    assert any(label.startswith(f"{second.name} · 3 envs") for label in labels)


def test_request_timeout_is_reported(rig) -> None:
    eng = rig.engine()
    rig.follow(eng.name)
    b = MonitorBackend(command_timeout_s=0.2)
    rig.backend.close()
    rig.backend = b
    rig.pump(lambda: b.value("toolsAvailable"), "tools claimed")
    b.setSimMode(2)
    rig.pump(lambda: not b.value("simModePending"), "timed out", tick=False)  # the engine never serves it
    assert b.value("simModeResult") == "error: no reply within 0.2 s"
    assert eng.sim_mode == 0


def test_segment_rows() -> None:
    assert SegmentListModel.auto_row(None)["label"] == "auto: newest live (none yet)"
    model = SegmentListModel()
    assert model.rowCount() == 1 and model.index_of("") == 0 and model.index_of("x") == -1
    missing = SegmentListModel.missing_row("LuckyEngine_gone")
    assert model.set_rows([SegmentListModel.auto_row(None), missing], key="name") is True
    assert model.index_of("LuckyEngine_gone") == 1
    assert model.set_rows([SegmentListModel.auto_row(None), missing], key="name") is False
