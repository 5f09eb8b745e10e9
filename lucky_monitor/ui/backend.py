"""The QObject behind the QML RpcPanel mirror and debug-draw form.

:class:`MonitorBackend` turns the state of a Qt-free
:class:`~lucky_monitor.core.monitor.MonitorCore` into Qt properties that QML
binds to, and QML's clicks into requests on the engine's tools channel. The
window calls :meth:`MonitorBackend.update` from its 60 Hz timer, right after
``core.poll()``. Each call does a bounded, small amount of work:

- every call: compare the connection status; collect command replies
  (:meth:`CommandClient.poll <lucky_monitor.core.commands.CommandClient.poll>`,
  non-blocking); send a repeated debug draw when it is due;
- at most 10 times a second: live header fields, rates and counters;
- once a second: the segment list (``list_segments``) and, while the tools
  channel is held by someone else, one more look at its owner word.

Properties are grouped; each group has one change signal, emitted only when a
value of the group really changed. Counters and pids that may exceed 2**31
are ``float`` properties (exact up to 2**53).

Truth comes from the segment, never from what was asked: a service switch
shows the ``services_enabled`` bit the engine published, the sim-mode combo
the ``sim_mode`` it published. A request in flight only marks the row
``pending``.

Tools channel: claimed when the core attaches (and re-claimed after every
re-attach: the core's ``generation`` changes), released on detach, on
:meth:`~MonitorBackend.selectSegment` and on :meth:`~MonitorBackend.close`.
While another live monitor holds it the backend says "tools channel held by
pid N" and looks again once a second.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtCore import (
    Property,
    QAbstractListModel,
    QByteArray,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    Signal,
    Slot,
)

from ..core.commands import CommandClient, Reply
from ..core.monitor import LinkState, MonitorCore
from ..core.text import DASH, age_text, bytes_text, ms_text
from ..protocol.enums import EngineState, GpuObsMode, Mode, Service, SimMode
from ..protocol.errors import LuckyMonitorError, ToolsChannelBusy, ToolsChannelUnavailable
from ..protocol.messages import (
    Arrow,
    Color,
    DrawReq,
    DrawResp,
    Line,
    MethodId,
    SetServiceEnabledReq,
    SetServiceEnabledResp,
    SetSimulationModeReq,
    SetSimulationModeResp,
    Vec3,
    VelocityCommand,
)
from ..transport.discovery import SegmentInfo, list_segments, pid_alive
from ..transport.shm import Segment
from ..transport.tools import ToolsChannel, tools_owner

__all__ = [
    "STATE_COLORS",
    "MonitorBackend",
    "SegmentListModel",
    "ServiceListModel",
    "age_text",
    "bytes_text",
    "state_color",
]

# ---------------------------------------------------------------------------
# Presentation helpers
# ---------------------------------------------------------------------------

GREEN, AMBER, RED, GREY = "#4cd07d", "#f5b935", "#ff5f56", "#9aa0a6"

#: Colour of the state line for each link state.
STATE_COLORS: dict[LinkState, str] = {
    LinkState.SEARCHING: GREY,
    LinkState.INCOMPATIBLE: RED,
    LinkState.INITIALISING: AMBER,
    LinkState.CONNECTED: GREEN,
    LinkState.WAITING_FOR_TRAINER: AMBER,
    LinkState.ENGINE_STEPPING: GREEN,
    LinkState.FREE_RUNNING: GREEN,
    LinkState.PAUSED: AMBER,
    LinkState.STALLED: RED,
    LinkState.VIOLATION: RED,
    LinkState.TRAINER_LOST: AMBER,
    LinkState.CLOSING: AMBER,
    LinkState.ENGINE_EXITED: RED,
}


def state_color(state: LinkState) -> str:
    """The state line's colour: green healthy, amber waiting, red broken, grey searching.

    Parameters
    ----------
    state : LinkState

    Returns
    -------
    str
        ``#rrggbb``.
    """
    return STATE_COLORS.get(state, GREY)


# ---------------------------------------------------------------------------
# List models
# ---------------------------------------------------------------------------

_USER = int(Qt.ItemDataRole.UserRole)
_DISPLAY = int(Qt.ItemDataRole.DisplayRole)


class _RowModel(QAbstractListModel):
    """A list of dict rows with fixed roles; updates emit only what changed."""

    ROLES: tuple[str, ...] = ()
    DISPLAY = ""  # the role that also answers Qt.DisplayRole

    def __init__(self, rows: Sequence[dict[str, Any]] = (), parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[dict[str, Any]] = [dict(r) for r in rows]
        self._role_of = {name: _USER + 1 + i for i, name in enumerate(self.ROLES)}

    # Qt API -----------------------------------------------------------------
    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def roleNames(self) -> dict[int, QByteArray]:
        return {role: QByteArray(name.encode()) for name, role in self._role_of.items()}

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = _DISPLAY) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row = self._rows[index.row()]
        if role == _DISPLAY:
            return row.get(self.DISPLAY)
        k = role - _USER - 1
        if 0 <= k < len(self.ROLES):
            return row.get(self.ROLES[k])
        return None

    # Python API -------------------------------------------------------------
    @property
    def rows(self) -> list[dict[str, Any]]:
        """A copy of the rows (role name -> value)."""
        return [dict(r) for r in self._rows]

    def row(self, i: int) -> dict[str, Any]:
        """A copy of row ``i``."""
        return dict(self._rows[i])

    def update_row(self, i: int, **values: Any) -> bool:
        """Set some roles of row ``i``; emit ``dataChanged`` for the roles that changed."""
        row = self._rows[i]
        changed = [self._role_of[k] for k, v in values.items() if row.get(k) != v]
        if not changed:
            return False
        row.update(values)
        if self.DISPLAY in values:
            changed.append(_DISPLAY)
        idx = self.index(i, 0)
        self.dataChanged.emit(idx, idx, changed)
        return True

    def set_rows(self, rows: Sequence[dict[str, Any]], key: str) -> bool:
        """Replace the rows; return True if the model was reset.

        Rows with the same ``key`` sequence are updated in place
        (``dataChanged`` only where a value changed); otherwise the model is
        reset.
        """
        if [r[key] for r in rows] == [r[key] for r in self._rows]:
            for i, r in enumerate(rows):
                self.update_row(i, **r)
            return False
        self.beginResetModel()
        self._rows = [dict(r) for r in rows]
        self.endResetModel()
        return True


class SegmentListModel(_RowModel):
    """Segments for the picker; row 0 is *auto* (follow the newest live segment).

    Roles: ``name`` ("" for auto), ``label`` (what the picker shows),
    ``serverPid``, ``alive``, ``numEnvs``, ``age`` ("12 s"), ``error``,
    ``isAuto``.
    """

    ROLES = ("name", "label", "serverPid", "alive", "numEnvs", "age", "error", "isAuto")
    DISPLAY = "label"

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__([self.auto_row(None)], parent)

    @staticmethod
    def auto_row(newest: SegmentInfo | None) -> dict[str, Any]:
        """The *auto* entry, naming the segment it currently means."""
        label = f"auto: newest live ({newest.name})" if newest else "auto: newest live (none yet)"
        return {"name": "", "label": label, "serverPid": float(newest.server_pid) if newest else 0.0,
                "alive": newest is not None, "numEnvs": newest.num_envs if newest else 0, "age": "",
                "error": "", "isAuto": True}

    @staticmethod
    def info_row(info: SegmentInfo, now_wall: float) -> dict[str, Any]:
        """One listed segment."""
        age = age_text(now_wall - info.mtime) if info.mtime else ""
        if info.error is not None:
            label = f"{info.name} · invalid"
        elif not info.server_alive:
            label = f"{info.name} · engine gone"
        else:
            label = f"{info.name} · {info.num_envs} envs · {age}" if age else f"{info.name} · {info.num_envs} envs"
        return {"name": info.name, "label": label, "serverPid": float(info.server_pid),
                "alive": info.error is None and info.server_alive, "numEnvs": info.num_envs, "age": age,
                "error": info.error or "", "isAuto": False}

    @staticmethod
    def missing_row(name: str) -> dict[str, Any]:
        """A chosen segment that does not exist (the monitor keeps looking for it)."""
        return {"name": name, "label": f"{name} · not found", "serverPid": 0.0, "alive": False, "numEnvs": 0,
                "age": "", "error": "not found", "isAuto": False}

    def index_of(self, name: str) -> int:
        """Row of segment ``name`` ("" is auto, row 0); -1 if absent."""
        for i, r in enumerate(self._rows):
            if r["name"] == name:
                return i
        return -1


class ServiceListModel(_RowModel):
    """One row per service bit.

    Roles: ``name``, ``bit``, ``available`` (header ``services_available``),
    ``enabled`` (live ``services_enabled``, as the engine reports it),
    ``pending`` (a request for it is in flight), ``lastResult``
    (``"ok 0.8 ms"`` / ``"error: ..."``).
    """

    ROLES = ("name", "bit", "available", "enabled", "pending", "lastResult")
    DISPLAY = "name"

    def __init__(self, parent: QObject | None = None) -> None:
        rows = [{"name": n, "bit": i, "available": False, "enabled": False, "pending": False, "lastResult": ""}
                for i, n in enumerate(Service.labels())]
        super().__init__(rows, parent)


# ---------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------

_DASH = DASH

#: property -> (group, default). A group shares one change signal "<group>Changed".
_FIELDS: dict[str, tuple[str, Any]] = {
    # connection
    "segmentName": ("connection", ""),
    "state": ("connection", LinkState.SEARCHING.value),
    "stateText": ("connection", "searching"),
    "reason": ("connection", ""),
    "notice": ("connection", ""),
    "healthy": ("connection", False),
    "stateColor": ("connection", GREY),
    "attached": ("connection", False),
    # selection
    "selectedSegment": ("selection", ""),
    "segmentIndex": ("selection", 0),
    # header facts
    "serverPid": ("facts", 0.0),
    "clientPid": ("facts", 0.0),
    "trainerAlive": ("facts", False),
    "mode": ("facts", _DASH),
    "numEnvs": ("facts", 0),
    "obsSize": ("facts", 0),
    "actSize": ("facts", 0),
    "imageText": ("facts", _DASH),
    "cmdRingText": ("facts", _DASH),
    "toolsText": ("facts", _DASH),
    "toolsOwnerText": ("facts", _DASH),
    "gpuText": ("facts", _DASH),
    "sessionId": ("facts", _DASH),
    "segmentSize": ("facts", _DASH),
    "engineState": ("facts", _DASH),
    "heartbeatAge": ("facts", _DASH),
    # rates and counters
    "framesPerSec": ("rates", 0.0),
    "imagesPerSec": ("rates", 0.0),
    "engineSharePct": ("rates", -1.0),
    "trainerSharePct": ("rates", -1.0),
    "frameSeq": ("rates", 0.0),
    "actionSeq": ("rates", 0.0),
    "imageSeq": ("rates", 0.0),
    "tornImages": ("rates", 0.0),
    "tornHot": ("rates", 0.0),
    "framesSkipped": ("rates", 0.0),
    # tools channel
    "toolsAvailable": ("tools", False),
    "toolsReason": ("tools", "no segment attached"),
    # simulation mode
    "simMode": ("simMode", 0),
    "simModePending": ("simMode", False),
    "simModeResult": ("simMode", ""),
    # debug draw
    "lastDrawResult": ("draw", ""),
    "lastRttMs": ("draw", -1.0),
    "drawPending": ("draw", False),
    "drawCount": ("draw", 0),
    "repeatKind": ("draw", ""),
    "repeatHz": ("draw", 0.0),
}

_TYPES = {str: str, bool: bool, int: int, float: float}

_DRAW_KINDS = ("line", "arrow", "velocity")
_MAX_REPEAT_HZ = 60.0


def _prop(name: str, notify: Signal) -> Property:
    default = _FIELDS[name][1]

    def fget(self: MonitorBackend) -> Any:
        return self._v[name]

    return Property(_TYPES[type(default)], fget, notify=notify)


class MonitorBackend(QObject):
    """Properties and slots for ``RpcPanel.qml`` and ``DebugDraw.qml``.

    Parameters
    ----------
    parent
        Optional QObject parent.
    clock
        Monotonic seconds; injectable for tests.
    command_timeout_s
        A request without a reply after this long is reported as timed out.
    tools_pid
        The pid written into the tools channel's owner word (default: this
        process).

    Notes
    -----
    Call :meth:`update` (with the window's ``MonitorCore``) after every
    ``core.poll()``, and :meth:`close` before the core is closed. No method
    raises into Qt: a failure becomes a result text.
    """

    connectionChanged = Signal()
    selectionChanged = Signal()
    factsChanged = Signal()
    ratesChanged = Signal()
    toolsChanged = Signal()
    simModeChanged = Signal()
    drawChanged = Signal()

    LIVE_PERIOD_S = 0.1
    SEGMENTS_PERIOD_S = 1.0
    CLAIM_RETRY_S = 1.0

    # connection
    segmentName = _prop("segmentName", connectionChanged)
    state = _prop("state", connectionChanged)
    stateText = _prop("stateText", connectionChanged)
    reason = _prop("reason", connectionChanged)
    notice = _prop("notice", connectionChanged)
    healthy = _prop("healthy", connectionChanged)
    stateColor = _prop("stateColor", connectionChanged)
    attached = _prop("attached", connectionChanged)
    # selection
    selectedSegment = _prop("selectedSegment", selectionChanged)
    segmentIndex = _prop("segmentIndex", selectionChanged)
    # facts
    serverPid = _prop("serverPid", factsChanged)
    clientPid = _prop("clientPid", factsChanged)
    trainerAlive = _prop("trainerAlive", factsChanged)
    mode = _prop("mode", factsChanged)
    numEnvs = _prop("numEnvs", factsChanged)
    obsSize = _prop("obsSize", factsChanged)
    actSize = _prop("actSize", factsChanged)
    imageText = _prop("imageText", factsChanged)
    cmdRingText = _prop("cmdRingText", factsChanged)
    toolsText = _prop("toolsText", factsChanged)
    toolsOwnerText = _prop("toolsOwnerText", factsChanged)
    gpuText = _prop("gpuText", factsChanged)
    sessionId = _prop("sessionId", factsChanged)
    segmentSize = _prop("segmentSize", factsChanged)
    engineState = _prop("engineState", factsChanged)
    heartbeatAge = _prop("heartbeatAge", factsChanged)
    # rates
    framesPerSec = _prop("framesPerSec", ratesChanged)
    imagesPerSec = _prop("imagesPerSec", ratesChanged)
    engineSharePct = _prop("engineSharePct", ratesChanged)
    trainerSharePct = _prop("trainerSharePct", ratesChanged)
    frameSeq = _prop("frameSeq", ratesChanged)
    actionSeq = _prop("actionSeq", ratesChanged)
    imageSeq = _prop("imageSeq", ratesChanged)
    tornImages = _prop("tornImages", ratesChanged)
    tornHot = _prop("tornHot", ratesChanged)
    framesSkipped = _prop("framesSkipped", ratesChanged)
    # tools
    toolsAvailable = _prop("toolsAvailable", toolsChanged)
    toolsReason = _prop("toolsReason", toolsChanged)
    # sim mode
    simMode = _prop("simMode", simModeChanged)
    simModePending = _prop("simModePending", simModeChanged)
    simModeResult = _prop("simModeResult", simModeChanged)
    # draw
    lastDrawResult = _prop("lastDrawResult", drawChanged)
    lastRttMs = _prop("lastRttMs", drawChanged)
    drawPending = _prop("drawPending", drawChanged)
    drawCount = _prop("drawCount", drawChanged)
    repeatKind = _prop("repeatKind", drawChanged)
    repeatHz = _prop("repeatHz", drawChanged)

    def __init__(
        self,
        parent: QObject | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        command_timeout_s: float = 2.0,
        tools_pid: int | None = None,
    ) -> None:
        super().__init__(parent)
        self._clock = clock
        self._timeout = command_timeout_s
        self._tools_pid = os.getpid() if tools_pid is None else int(tools_pid)
        self._v: dict[str, Any] = {k: d for k, (_, d) in _FIELDS.items()}
        self._segments = SegmentListModel(self)
        self._services = ServiceListModel(self)
        self._core: MonitorCore | None = None
        self._attach_key: tuple[int, int] | None = None
        self._seg: Segment | None = None
        self._chan: ToolsChannel | None = None
        self._client: CommandClient | None = None
        self._holder = 0  # pid holding the tools channel when it is not us
        self._pending: dict[int, tuple[str, int]] = {}  # correlation id -> (kind, detail)
        self._last_draw: dict[str, DrawReq] = {}
        self._repeat_next = 0.0
        self._repeat_cid: int | None = None
        self._next_live = 0.0
        self._next_segments = 0.0
        self._next_claim = 0.0
        self._hb: tuple[int, float] | None = None  # (heartbeat_ns, when it last changed)

    # ------------------------------------------------------------ constants
    @Property(QObject, constant=True)
    def segments(self) -> SegmentListModel:
        """The segment picker's model (:class:`SegmentListModel`)."""
        return self._segments

    @Property(QObject, constant=True)
    def services(self) -> ServiceListModel:
        """The services list's model (:class:`ServiceListModel`)."""
        return self._services

    @Property("QVariantList", constant=True)
    def simModeNames(self) -> list[str]:
        """``["realtime", "deterministic", "fast"]``: index = ``sim_mode``."""
        return list(SimMode.labels())

    # ------------------------------------------------------------ python API
    def value(self, name: str) -> Any:
        """The current value of property ``name`` (for tests and the window)."""
        return self._v[name]

    @property
    def tools_channel(self) -> ToolsChannel | None:
        """The claimed tools channel, or ``None``."""
        return self._chan

    def update(self, core: MonitorCore) -> None:
        """Refresh from ``core`` (call after each ``core.poll()``, at most 60 Hz).

        Never blocks and never raises for a vanished or broken segment.

        Parameters
        ----------
        core : MonitorCore
        """
        self._core = core
        now = self._clock()
        seg = core.segment
        key = (id(core), core.generation) if seg is not None else None
        if key != self._attach_key:
            self._attach_key = key
            self._on_attach(seg, now)
        self._update_connection(core)
        self._update_selection(core)
        if self._client is not None:
            self._collect(now)
        elif seg is not None and now >= self._next_claim:
            self._try_claim(seg, now)
        if now >= self._next_live:
            self._next_live = now + self.LIVE_PERIOD_S
            self._update_live(core, now)
        if now >= self._next_segments:
            self._next_segments = now + self.SEGMENTS_PERIOD_S
            self._refresh_segments(core)
        self._run_repeat(now)

    def close(self) -> None:
        """Stop repeating and release the tools channel. Idempotent."""
        self._set(repeatKind="", repeatHz=0.0)
        self._release("monitor closed")
        self._seg = None
        self._attach_key = None

    # ------------------------------------------------------------ slots: connection
    @Slot(str)
    def selectSegment(self, name: str) -> None:
        """Follow segment ``name``; ``""`` or ``"auto"`` follows the newest live one."""
        if self._core is None:
            return
        target = None if name in ("", "auto") else name
        if target == self._core.name:
            return
        self._release("segment switched")
        self._core.switch(target)
        self._next_segments = 0.0
        self._update_connection(self._core)
        self._update_selection(self._core)

    @Slot()
    def refreshSegments(self) -> None:
        """Re-read the segment list at the next :meth:`update`."""
        self._next_segments = 0.0

    # ------------------------------------------------------------ slots: commands
    @Slot(int, bool)
    def setServiceEnabled(self, bit: int, enabled: bool) -> None:
        """Ask the engine to enable or disable service ``bit`` (the switch follows the segment)."""
        if Service.get(bit) is None:
            return
        if not self._services.row(bit)["available"]:
            self._services.update_row(bit, lastResult="error: service not available")
            return
        err = self._send(MethodId.SetServiceEnabledReq, SetServiceEnabledReq(service=bit, enabled=bool(enabled)),
                         ("service", bit))
        if err is not None:
            self._services.update_row(bit, lastResult=f"error: {err}")
        else:
            self._services.update_row(bit, pending=True, lastResult="waiting…")

    @Slot(int)
    def setSimMode(self, mode: int) -> None:
        """Ask the engine for simulation mode ``mode`` (0 realtime, 1 deterministic, 2 fast)."""
        if SimMode.get(mode) is None:
            self._set(simModeResult=f"error: simulation mode {mode} unknown")
            return
        err = self._send(MethodId.SetSimulationModeReq, SetSimulationModeReq(mode=SimMode(mode)),
                         ("sim", mode))
        if err is not None:
            self._set(simModeResult=f"error: {err}")
        else:
            self._set(simModePending=True, simModeResult="waiting…")

    @Slot(float, float, float, float, float, float, float, float, float, float, bool)
    def drawLine(self, x0: float, y0: float, z0: float, x1: float, y1: float, z1: float,
                 r: float, g: float, b: float, a: float, clear: bool) -> None:
        """Draw a line from ``(x0, y0, z0)`` to ``(x1, y1, z1)`` in colour ``rgba`` (0..1)."""
        try:
            line = Line(_vec("start", x0, y0, z0), _vec("end", x1, y1, z1), _color(r, g, b, a))
        except ValueError as exc:
            self._set(lastDrawResult=f"error: {exc}")
            return
        self._draw("line", DrawReq(lines=(line,), clear_previous=bool(clear)))

    @Slot(float, float, float, float, float, float, float, float, float, float, float, bool)
    def drawArrow(self, ox: float, oy: float, oz: float, dx: float, dy: float, dz: float,
                  r: float, g: float, b: float, a: float, scale: float, clear: bool) -> None:
        """Draw an arrow at ``(ox, oy, oz)`` along ``(dx, dy, dz) * scale`` in colour ``rgba``."""
        try:
            arrow = Arrow(_vec("origin", ox, oy, oz), _vec("direction", dx, dy, dz), _color(r, g, b, a),
                          _finite("scale", scale))
        except ValueError as exc:
            self._set(lastDrawResult=f"error: {exc}")
            return
        self._draw("arrow", DrawReq(arrows=(arrow,), clear_previous=bool(clear)))

    @Slot(float, float, float, float, float, float, float, bool)
    def drawVelocity(self, ox: float, oy: float, oz: float, vx: float, vy: float, wz: float,
                     scale: float, clear: bool) -> None:
        """Draw a velocity command (``lin_vel_x``, ``lin_vel_y``, ``ang_vel_z``) at ``(ox, oy, oz)``."""
        try:
            cmd = VelocityCommand(_vec("origin", ox, oy, oz), _finite("lin_vel_x", vx), _finite("lin_vel_y", vy),
                                  _finite("ang_vel_z", wz), _finite("scale", scale))
        except ValueError as exc:
            self._set(lastDrawResult=f"error: {exc}")
            return
        self._draw("velocity", DrawReq(velocity_command=cmd, clear_previous=bool(clear)))

    @Slot()
    def clearDrawings(self) -> None:
        """Stop repeating and erase every debug primitive."""
        self._set(repeatKind="", repeatHz=0.0)
        self._draw("clear", DrawReq(clear_previous=True))

    @Slot(str, float)
    def setRepeat(self, kind: str, hz: float) -> None:
        """Repeat the last ``kind`` draw (``line``/``arrow``/``velocity``) at ``hz``; ``""`` or 0 Hz stops.

        At most one repeated request is in flight; the rate is capped at 60 Hz
        (the rate of :meth:`update`).
        """
        if not kind or not (hz > 0 and math.isfinite(hz)):
            self._set(repeatKind="", repeatHz=0.0)
            return
        if kind not in _DRAW_KINDS:
            self._set(lastDrawResult=f"error: cannot repeat {kind!r}; choose line, arrow or velocity")
            return
        if kind not in self._last_draw:
            self._set(lastDrawResult=f"error: nothing to repeat: send the {kind} once first")
            return
        self._repeat_next = self._clock()
        self._set(repeatKind=kind, repeatHz=min(float(hz), _MAX_REPEAT_HZ))

    # ------------------------------------------------------------ internals: state
    def _set(self, **values: Any) -> None:
        """Store values; emit each touched group's signal once if something changed."""
        groups: set[str] = set()
        for k, v in values.items():
            if self._v[k] != v:
                self._v[k] = v
                groups.add(_FIELDS[k][0])
        for g in sorted(groups):
            getattr(self, g + "Changed").emit()

    def _update_connection(self, core: MonitorCore) -> None:
        st = core.status
        self._set(segmentName=st.name or "", state=st.state.value, stateText=st.text, reason=st.reason or "",
                  notice=st.notice or "", healthy=st.state.healthy, stateColor=state_color(st.state),
                  attached=core.segment is not None)

    def _update_selection(self, core: MonitorCore) -> None:
        selected = core.name or ""
        if selected != self._v["selectedSegment"]:
            self._next_segments = 0.0  # make sure the picker lists it
        index = self._segments.index_of(selected)
        self._set(selectedSegment=selected, segmentIndex=max(index, 0))

    def _refresh_segments(self, core: MonitorCore) -> None:
        infos = list_segments(core.prefix)
        newest = next((i for i in infos if i.error is None and i.server_alive), None)
        wall = time.time()
        rows = [SegmentListModel.auto_row(newest), *(SegmentListModel.info_row(i, wall) for i in infos)]
        selected = core.name or ""
        if selected and all(r["name"] != selected for r in rows):
            rows.append(SegmentListModel.missing_row(selected))
        reset = self._segments.set_rows(rows, key="name")
        self._set(segmentIndex=max(self._segments.index_of(selected), 0))
        if reset:
            # A reset may have moved the picker's current index: make bindings re-read it.
            self.selectionChanged.emit()

    def _on_attach(self, seg: Segment | None, now: float) -> None:
        """The core attached to a (new) segment or detached: start over."""
        self._release("detached" if seg is None else "re-attached")
        self._seg = seg
        self._hb = None
        self._next_live = 0.0
        self._next_claim = now
        if seg is None:
            self._set(**{k: d for k, (g, d) in _FIELDS.items() if g in ("facts", "rates")})
            self._set(toolsAvailable=False, toolsReason="no segment attached")
            for bit in range(len(Service)):
                self._services.update_row(bit, available=False, enabled=False, pending=False)
            return
        h = seg.header
        if h.has_images:
            image = (f"{h.image_width}×{h.image_height}×{h.image_channels} {h.pixel_format}, "
                     f"{'bottom-up' if h.bottom_up else 'top-down'}")
        else:
            image = "none"
        if h.gpu_available:
            mode = GpuObsMode.name_of(h.gpu_obs_mode)
            gpu = f"{mode} · device {h.gpu_device_id} · handle {h.gpu_obs_handle[:6].hex()}…"
        else:
            gpu = "none"
        self._set(
            serverPid=float(h.server_pid),
            mode=Mode.name_of(h.mode),
            numEnvs=h.num_envs,
            obsSize=h.obs_size,
            actSize=h.act_size,
            imageText=image,
            cmdRingText=f"{bytes_text(h.cmd_ring_size)} ×2",
            gpuText=gpu,
            sessionId=f"{h.session_id:016x}",
            segmentSize=bytes_text(h.segment_size or seg.size),
        )
        for bit in range(len(Service)):
            self._services.update_row(bit, available=bool(h.services_available >> bit & 1), pending=False)
        if not h.has_tools:
            self._set(toolsAvailable=False, toolsReason="engine exports no tools channel")
        else:
            self._set(toolsAvailable=False, toolsReason="tools channel not claimed yet")
        self._update_tools_text()

    def _update_tools_text(self) -> None:
        seg = self._seg
        if seg is None:
            self._set(toolsText=_DASH, toolsOwnerText=_DASH)
            return
        h = seg.header
        if not h.has_tools:
            self._set(toolsText="none", toolsOwnerText=_DASH)
            return
        if self._chan is not None:
            owner = f"this monitor (pid {self._chan.pid})"
        elif self._holder:
            owner = f"pid {self._holder}"
        else:
            owner = "free"
        self._set(toolsText=f"{bytes_text(h.tools_ring_size)} ×2", toolsOwnerText=owner)

    def _update_live(self, core: MonitorCore, now: float) -> None:
        seg = core.segment
        if seg is None:
            return
        try:
            live = seg.live()
        except (LuckyMonitorError, OSError, ValueError):
            return  # closed under us; the core reports it on its next poll
        if self._hb is None or self._hb[0] != live.heartbeat_ns:
            self._hb = (live.heartbeat_ns, now)
        hb_age = now - self._hb[1]
        cpid = live.client_pid
        rates, counters = core.rates, core.counters
        share = rates.engine_share if cpid else None
        self._set(
            clientPid=float(cpid),
            trainerAlive=bool(cpid) and pid_alive(cpid),
            engineState=EngineState.name_of(live.engine_state),
            heartbeatAge="< 0.5 s" if hb_age < 0.5 else f"{hb_age:.1f} s",
            framesPerSec=round(rates.frames_per_s, 1),
            imagesPerSec=round(rates.images_per_s, 1),
            engineSharePct=-1.0 if share is None else round(100.0 * share, 1),
            trainerSharePct=-1.0 if share is None else round(100.0 * (1.0 - share), 1),
            frameSeq=float(live.frame_seq),
            actionSeq=float(live.action_seq),
            imageSeq=float(live.image_seq),
            tornImages=float(counters.torn_images),
            tornHot=float(counters.torn_hot),
            framesSkipped=float(counters.frames_skipped),
            simMode=int(live.sim_mode if SimMode.get(live.sim_mode) is not None else SimMode.REALTIME),
        )
        mask = live.services_enabled
        for bit in range(len(Service)):
            self._services.update_row(bit, enabled=bool(mask >> bit & 1))

    # ------------------------------------------------------------ internals: tools channel
    def _try_claim(self, seg: Segment, now: float) -> None:
        self._next_claim = now + self.CLAIM_RETRY_S
        if not seg.header.has_tools:
            self._next_claim = math.inf  # fixed for the life of the segment
            return
        try:
            if seg.still_valid() is not None:
                return  # gone: the core notices on its next poll
            owner = tools_owner(seg)
            if owner and owner != self._tools_pid and pid_alive(owner):
                raise ToolsChannelBusy(owner)
            chan = ToolsChannel.claim(seg, pid=self._tools_pid)
        except ToolsChannelBusy as exc:
            self._holder = exc.pid
            self._set(toolsAvailable=False, toolsReason=str(exc))
        except ToolsChannelUnavailable:
            self._next_claim = math.inf
            self._set(toolsAvailable=False, toolsReason="engine exports no tools channel")
        except (LuckyMonitorError, OSError, ValueError) as exc:
            self._set(toolsAvailable=False, toolsReason=f"tools channel: {exc}")
        else:
            self._chan = chan
            self._client = CommandClient(chan, timeout_s=self._timeout)
            self._holder = 0
            self._set(toolsAvailable=True, toolsReason="")
        self._update_tools_text()

    def _release(self, why: str) -> None:
        """Fail what is in flight, give the tools channel back, forget the client."""
        pending, self._pending = self._pending, {}
        for kind, detail in pending.values():
            self._finish(kind, detail, f"error: {why}", None)
        self._repeat_cid = None
        chan, self._chan, self._client = self._chan, None, None
        self._holder = 0
        if chan is not None:
            chan.release()
        self._next_claim = self._clock()
        if self._seg is not None and self._seg.header.has_tools:
            self._set(toolsAvailable=False, toolsReason="tools channel not claimed yet")
        self._update_tools_text()

    def _send(self, method: MethodId, payload: object, what: tuple[str, int]) -> str | None:
        """Push one request; return ``None`` or why it could not be sent."""
        if self._client is None:
            return self._v["toolsReason"] or "tools channel unavailable"
        try:
            cid = self._client.send(method, payload)
        except (LuckyMonitorError, ValueError, OverflowError) as exc:
            return str(exc)
        self._pending[cid] = what
        return None

    def _collect(self, now: float) -> None:
        assert self._client is not None
        replies = self._client.poll()
        for r in replies:
            what = self._pending.pop(r.correlation_id, None)
            if what is None:
                continue  # corrupt ring or undecodable reply: the request it belonged to times out
            kind, detail = what
            if r.correlation_id == self._repeat_cid:
                self._repeat_cid = None
            self._finish(kind, detail, self._result_text(kind, r), r)
        if replies:
            self._next_live = 0.0  # show what the engine just applied

    def _result_text(self, kind: str, r: Reply) -> str:
        if r.error is not None:
            return f"error: {r.error}"
        payload = r.response.payload if r.response is not None else None
        if kind in _DRAW_KINDS or kind == "clear":
            if isinstance(payload, DrawResp) and not payload.success:
                return f"failed (engine: success = false) {ms_text(r.rtt_s)}"
            return f"success {ms_text(r.rtt_s)}"
        if kind == "service" and not isinstance(payload, SetServiceEnabledResp):
            return f"error: unexpected reply {type(payload).__name__}"
        if kind == "sim" and not isinstance(payload, SetSimulationModeResp):
            return f"error: unexpected reply {type(payload).__name__}"
        return f"ok {ms_text(r.rtt_s)}"

    def _finish(self, kind: str, detail: int, text: str, reply: Reply | None) -> None:
        if kind == "service":
            still = any(w == ("service", detail) for w in self._pending.values())
            self._services.update_row(detail, pending=still, lastResult=text)
        elif kind == "sim":
            still = any(w[0] == "sim" for w in self._pending.values())
            self._set(simModePending=still, simModeResult=text)
        else:
            still = any(w[0] in (*_DRAW_KINDS, "clear") for w in self._pending.values())
            values: dict[str, Any] = {"drawPending": still, "lastDrawResult": text}
            if reply is not None:
                values["drawCount"] = self._v["drawCount"] + 1
                if reply.response is not None:
                    values["lastRttMs"] = round(reply.rtt_s * 1e3, 2)
            self._set(**values)

    # ------------------------------------------------------------ internals: draw
    def _draw(self, kind: str, req: DrawReq) -> int | None:
        if kind in _DRAW_KINDS:
            self._last_draw[kind] = req
        err = self._send(MethodId.DrawReq, req, (kind, 0))
        if err is not None:
            self._set(lastDrawResult=f"error: {err}")
            return None
        self._set(drawPending=True)
        return next(reversed(self._pending))

    def _run_repeat(self, now: float) -> None:
        kind = self._v["repeatKind"]
        if not kind or self._client is None or self._repeat_cid is not None or now < self._repeat_next:
            return
        period = 1.0 / self._v["repeatHz"]
        self._repeat_next = self._repeat_next + period if now - self._repeat_next < period else now + period
        self._repeat_cid = self._draw(kind, self._last_draw[kind])


def _finite(name: str, v: float) -> float:
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"{name} is not a finite number")
    return v


def _vec(name: str, x: float, y: float, z: float) -> Vec3:
    return Vec3(_finite(f"{name}.x", x), _finite(f"{name}.y", y), _finite(f"{name}.z", z))


def _color(r: float, g: float, b: float, a: float) -> Color:
    """A colour with every channel clamped to 0..1 (non-finite channels are refused)."""
    return Color(*(min(1.0, max(0.0, _finite(n, v))) for n, v in zip("rgba", (r, g, b, a), strict=True)))
