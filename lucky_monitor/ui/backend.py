"""The QObject behind the QML RpcPanel mirror and debug-draw form: a pure view of Ticks.

:class:`MonitorBackend` maps each :class:`~lucky_monitor.core.session.Tick`
to Qt properties that QML binds to (:meth:`MonitorBackend.apply`), and turns
QML's clicks into calls of the :class:`~lucky_monitor.core.session.MonitorSession`
it was given (``set_service``, ``set_sim_mode``, ``draw``, ``repeat``,
``switch``). It holds no transport object and reads nothing but Ticks, so it
is tested with hand-made Ticks and a stand-in session.

Per :meth:`~MonitorBackend.apply` the work is small and bounded:

- every tick: the connection state, command results and requests in flight,
  the tools-channel state;
- at most 10 times a second: live header fields, rates and counters;
- when the session says the segment list changed (at most once a second):
  the picker's rows.

Properties are grouped; each group has one change signal, emitted only when a
value of the group really changed. Counters and pids that may exceed 2**31
are ``float`` properties (exact up to 2**53); a rate that is not known yet is
``-1``.

Truth comes from the segment, never from what was asked: a service switch
shows the ``services_enabled`` bit the engine published, the sim-mode combo
the ``sim_mode`` it published. A request in flight only marks the row
``pending``. Results and counters belong to one attach: a new ``generation``
clears them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Protocol

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
from PySide6.QtQml import QmlElement

from ..core.monitor import LinkState
from ..core.session import CommandResult, CommandsState, SegmentEntry, Tick
from ..core.text import DASH, age_text, bytes_text
from ..protocol.enums import EngineState, GpuObsMode, Mode, Service, SimMode
from ..protocol.header import Header, LiveFields
from .palette import BAD, DIM, GOOD, WARN

# ---------------------------------------------------------------------------
# Presentation helpers
# ---------------------------------------------------------------------------

QML_IMPORT_NAME = "LuckyMonitor.Backend"
QML_IMPORT_MAJOR_VERSION = 1


class ResultKind(StrEnum):
    """What a command's result text reports; QML colours a result by this, never by its text."""

    NONE = ""  # nothing sent yet
    OK = "ok"
    ERROR = "error"  # refused, failed, timed out, or the engine answered success = false
    PENDING = "pending"  # sent, waiting for the reply
    STALE = "stale"  # the last result, from before a change it no longer describes (dimmed)


#: Colour of the state line for each link state.
STATE_COLORS: dict[LinkState, str] = {
    LinkState.SEARCHING: DIM,
    LinkState.INCOMPATIBLE: BAD,
    LinkState.INITIALISING: WARN,
    LinkState.CONNECTED: GOOD,
    LinkState.WAITING_FOR_TRAINER: WARN,
    LinkState.ENGINE_STEPPING: GOOD,
    LinkState.FREE_RUNNING: GOOD,
    LinkState.PAUSED: WARN,
    LinkState.STALLED: BAD,
    LinkState.VIOLATION: BAD,
    LinkState.IMAGES_STUCK: BAD,
    LinkState.TRAINER_LOST: WARN,
    LinkState.CLOSING: WARN,
    LinkState.ENGINE_EXITED: BAD,
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
    return STATE_COLORS.get(state, DIM)


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
    def auto_row(newest: SegmentEntry | None) -> dict[str, Any]:
        """The *auto* entry, naming the segment it currently means."""
        label = f"auto: newest live ({newest.name})" if newest else "auto: newest live (none yet)"
        return {
            "name": "",
            "label": label,
            "serverPid": float(newest.server_pid) if newest else 0.0,
            "alive": newest is not None,
            "numEnvs": newest.num_envs if newest else 0,
            "age": "",
            "error": "",
            "isAuto": True,
        }

    @staticmethod
    def info_row(info: SegmentEntry) -> dict[str, Any]:
        """One listed segment; its age is the time since the engine's session began."""
        age = "" if info.age_s is None else f"up {age_text(info.age_s)}"
        if info.error is not None:
            label = f"{info.name} · invalid"
        elif not info.alive:
            label = f"{info.name} · {'heartbeat stale' if info.server_alive else 'engine gone'}"
        else:
            label = f"{info.name} · {info.num_envs} envs · {age}" if age else f"{info.name} · {info.num_envs} envs"
        return {
            "name": info.name,
            "label": label,
            "serverPid": float(info.server_pid),
            "alive": info.alive,
            "numEnvs": info.num_envs,
            "age": age,
            "error": info.error or "",
            "isAuto": False,
        }

    @staticmethod
    def missing_row(name: str, attached: bool = False, state: str = "not found") -> dict[str, Any]:
        """A chosen segment the list does not hold: one not attached (``state`` says why: ``not found`` while
        the monitor looks for it, or the state its last attach ended in, ``engine exited``, ``incompatible``,
        for a name outside the listed prefix), or, ``attached``, one attached by a name outside that prefix."""
        return {
            "name": name,
            "label": f"{name} · attached (a name outside the list's prefix)" if attached else f"{name} · {state}",
            "serverPid": 0.0,
            "alive": attached,
            "numEnvs": 0,
            "age": "",
            "error": "" if attached else state,
            "isAuto": False,
        }

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
    (``"ok 0.8 ms"`` / ``"error: ..."``) and ``resultKind`` (``""``,
    ``"pending"``, ``"ok"`` or ``"error"``: what colour the result gets).
    """

    ROLES = ("name", "bit", "available", "enabled", "pending", "lastResult", "resultKind")
    DISPLAY = "name"

    def __init__(self, parent: QObject | None = None) -> None:
        rows = [
            {
                "name": n,
                "bit": i,
                "available": False,
                "enabled": False,
                "pending": False,
                "lastResult": "",
                "resultKind": ResultKind.NONE.value,
            }
            for i, n in enumerate(Service.labels())
        ]
        super().__init__(rows, parent)


# ---------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------

_DASH = DASH


class SessionLike(Protocol):
    """What the backend calls on the session (a stand-in in tests)."""

    def switch(self, name: str | None) -> None: ...
    def set_service(self, bit: int, enabled: bool) -> None: ...
    def set_sim_mode(self, mode: int) -> None: ...
    def draw(self, kind: str, **values: Any) -> bool: ...
    def repeat(self, kind: str, hz: float) -> None: ...


#: property -> (group, default). A group shares one change signal "<group>Changed".
_FIELDS: dict[str, tuple[str, Any]] = {
    # connection
    "segmentName": ("connection", ""),
    "state": ("connection", LinkState.SEARCHING.value),
    "stateText": ("connection", "searching"),
    "reason": ("connection", ""),
    "notice": ("connection", ""),
    "healthy": ("connection", False),
    "stateColor": ("connection", DIM),
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
    # rates and counters (-1: not known)
    "framesPerSec": ("rates", -1.0),
    "imagesPerSec": ("rates", -1.0),
    "engineSharePct": ("rates", -1.0),
    "trainerSharePct": ("rates", -1.0),
    "frameSeq": ("rates", _DASH),
    "actionSeq": ("rates", _DASH),
    "imageSeq": ("rates", _DASH),
    "tornImages": ("rates", _DASH),
    "tornHot": ("rates", _DASH),
    "framesSkipped": ("rates", _DASH),
    "liveEvery": ("rates", ""),  # "every 2 s" when the live values refresh slower than twice a second
    # tools channel
    "toolsAvailable": ("tools", False),
    "toolsReason": ("tools", "no segment attached"),
    # simulation mode
    "simMode": ("simMode", 0),
    "simModePending": ("simMode", False),
    "simModeResult": ("simMode", ""),
    "simModeResultKind": ("simMode", ""),
    # debug draw
    "lastDrawResult": ("draw", ""),
    "lastDrawResultKind": ("draw", ""),
    "lastRttMs": ("draw", -1.0),
    "drawPending": ("draw", False),
    "drawCount": ("draw", 0),
    "repeatKind": ("draw", ""),
    "repeatHz": ("draw", 0.0),
}

_TYPES = {str: str, bool: bool, int: int, float: float}


def _prop(name: str, notify: Signal) -> Property:
    default = _FIELDS[name][1]

    def fget(self: MonitorBackend) -> Any:
        return self._v[name]

    return Property(_TYPES[type(default)], fget, notify=notify)


def _rate(v: float | None) -> float:
    return -1.0 if v is None else round(v, 1)


@QmlElement
class MonitorBackend(QObject):
    """Properties and slots for ``RpcPanel.qml`` and ``DebugDraw.qml``.

    Parameters
    ----------
    session
        Where QML's requests go (a :class:`~lucky_monitor.core.session.MonitorSession`);
        ``None`` makes every request a no-op (a view of hand-made Ticks).
    parent
        Optional QObject parent.

    Notes
    -----
    Call :meth:`apply` with every Tick the window gets. No method raises into
    Qt: a failure becomes a result text.
    """

    connectionChanged = Signal()
    selectionChanged = Signal()
    factsChanged = Signal()
    ratesChanged = Signal()
    toolsChanged = Signal()
    simModeChanged = Signal()
    drawChanged = Signal()

    LIVE_PERIOD_S = 0.1

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
    liveEvery = _prop("liveEvery", ratesChanged)
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
    simModeResultKind = _prop("simModeResultKind", simModeChanged)
    # draw
    lastDrawResult = _prop("lastDrawResult", drawChanged)
    lastDrawResultKind = _prop("lastDrawResultKind", drawChanged)
    lastRttMs = _prop("lastRttMs", drawChanged)
    drawPending = _prop("drawPending", drawChanged)
    drawCount = _prop("drawCount", drawChanged)
    repeatKind = _prop("repeatKind", drawChanged)
    repeatHz = _prop("repeatHz", drawChanged)

    def __init__(self, session: SessionLike | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._v: dict[str, Any] = {k: d for k, (_, d) in _FIELDS.items()}
        self._segments = SegmentListModel(self)
        self._services = ServiceListModel(self)
        self._generation: int | None = None
        self._next_live = 0.0
        self._shown_key: tuple[object, ...] | None = None
        self._shown_commands: object = None
        # A repeat's sends and answers are shown at the panels' rate (see apply): when next, and the
        # draw result held meanwhile (the newest), with the status of the one shown last.
        self._next_commands = 0.0
        self._held_result: tuple[CommandResult, Tick] | None = None
        self._next_result = 0.0
        self._shown_draw_status: str | None = None
        self._selected: str | None = None
        self._segment_rows: tuple[SegmentEntry, ...] | None = None
        self._attached_name: str | None = None  # the segment attached as of the last tick
        self._detached_state: LinkState | None = None  # the state while no segment is attached
        # Whether Debug was enabled when the draw result shown came (None: nothing to mark stale).
        self._draw_debug_on: bool | None = None
        self._shown_switches: tuple[int, int] | None = None  # (services_enabled, sim_mode) as shown

    # ------------------------------------------------------------ constants
    @Property(QObject, constant=True)
    def segments(self) -> SegmentListModel:
        """The segment picker's model (:class:`SegmentListModel`)."""
        return self._segments

    @Property(QObject, constant=True)
    def services(self) -> ServiceListModel:
        """The services list's model (:class:`ServiceListModel`)."""
        return self._services

    @Property("QVariantList", constant=True)  # type: ignore[arg-type]  # a type name: the stub wants a type
    def simModeNames(self) -> list[str]:
        """``["realtime", "deterministic", "fast"]``: index = ``sim_mode``."""
        return list(SimMode.labels())

    # ------------------------------------------------------------ python API
    def value(self, name: str) -> Any:
        """The current value of property ``name`` (for tests and the window)."""
        return self._v[name]

    def apply(self, tick: Tick) -> None:
        """Show ``tick``. Bounded work; never raises for what a Tick holds."""
        if tick.generation != self._generation:
            self._generation = tick.generation
            self._on_attach(tick.header)
            self._next_live = 0.0
            self._shown_key = None
            self._held_result, self._shown_draw_status = None, None
        # The session hands over the same state texts, ToolsState and CommandsState objects while
        # nothing changed: compare those (identity first) and skip what is already shown.
        key = (tick.name, tick.state, tick.text, tick.reason, tick.notice, tick.header is None, tick.tools)
        if key != self._shown_key:
            self._shown_key = key
            self._apply_state(tick)
        # While a draw repeats (10 a second and more), its sends and answers are shown at the panels' rate:
        # each showing re-evaluates the debug-draw form's bindings, and at 10 Hz that cost the window 0.7 % of a
        # core. A change of state (a repeat started or stopped, a service or mode pending, a result of another
        # status) is shown at once.
        commands = tick.commands
        if commands is not self._shown_commands:
            shown = self._shown_commands
            steady = (
                isinstance(shown, CommandsState)
                and bool(commands.repeat_kind)
                and (commands.repeat_kind, commands.repeat_hz) == (shown.repeat_kind, shown.repeat_hz)
                and (commands.pending_services, commands.sim_pending) == (shown.pending_services, shown.sim_pending)
            )
            if not steady or tick.t >= self._next_commands:
                self._shown_commands = commands
                self._next_commands = tick.t + self.LIVE_PERIOD_S
                self._apply_commands(tick)
        repeating = bool(commands.repeat_kind)
        for r in tick.results:
            if r.kind in ("service", "sim"):
                self._apply_result(r, tick)
            elif (
                repeating
                and r.kind == commands.repeat_kind  # a one-off draw sent meanwhile is answered at once
                and r.status == self._shown_draw_status
                and tick.t < self._next_result
            ):
                self._held_result = (r, tick)  # the newest of the repeat's answers, shown when due
            else:
                self._show_draw_result(r, tick)
        if self._held_result is not None and (tick.t >= self._next_result or not repeating):
            self._show_draw_result(*self._held_result)
        if tick.live is not None:
            self._apply_switches(tick.live)
        if self._draw_debug_on is not None and tick.live is not None:
            self._mark_stale_draw_result(bool(tick.live.services_enabled >> Service.DEBUG & 1))
        if tick.t >= self._next_live or tick.header is None:
            self._next_live = tick.t + self.LIVE_PERIOD_S
            self._apply_live(tick)
        attached = tick.name if tick.header is not None else None
        detached_state = tick.state if tick.header is None else None
        if (
            tick.segments_changed
            or self._segment_rows is None
            or tick.selected != self._selected
            or attached != self._attached_name
            or detached_state != self._detached_state
        ):
            self._selected = tick.selected
            self._segment_rows = tick.segments
            self._attached_name = attached
            self._detached_state = detached_state
            self._apply_segments(tick.segments, tick.selected)

    def _apply_state(self, tick: Tick) -> None:
        self._set(
            segmentName=tick.name or "",
            state=tick.state.value,
            stateText=tick.text,
            reason=tick.reason or "",
            notice=tick.notice or "",
            healthy=tick.state.healthy,
            stateColor=state_color(tick.state),
            attached=tick.header is not None,
        )
        tools = tick.tools
        self._set(
            toolsAvailable=tools.ours,
            toolsReason=tools.reason,
            toolsText=_DASH
            if tick.header is None
            else (f"{bytes_text(tools.ring_size)} ×2" if tools.exported else "none"),
            toolsOwnerText=_DASH if tick.header is None else tools.owner_text,
        )

    # ------------------------------------------------------------ slots: connection
    @Slot(str)
    def selectSegment(self, name: str) -> None:
        """Follow segment ``name``; ``""`` or ``"auto"`` follows the newest live one."""
        if self._session is None:
            return
        target = None if name in ("", "auto") else name
        if target == self._selected:
            return
        self._session.switch(target)
        self._selected = target
        self._apply_segments(self._segment_rows or (), target)

    @Slot()
    def refreshSegments(self) -> None:
        """Nothing to do: the session refreshes the list once a second."""

    # ------------------------------------------------------------ slots: commands
    @Slot(int, bool)
    def setServiceEnabled(self, bit: int, enabled: bool) -> None:
        """Ask the engine to enable or disable service ``bit`` (the switch follows the segment)."""
        if not 0 <= bit < len(Service) or self._session is None:
            return
        self._services.update_row(bit, pending=True, lastResult="waiting…", resultKind="pending")
        self._shown_commands = None  # the next tick settles the pending marks
        self._session.set_service(bit, bool(enabled))

    @Slot(int)
    def setSimMode(self, mode: int) -> None:
        """Ask the engine for simulation mode ``mode`` (0 realtime, 1 deterministic, 2 fast)."""
        if self._session is None:
            return
        self._set(simModePending=True, simModeResult="waiting…", simModeResultKind="pending")
        self._shown_commands = None  # the next tick settles the pending marks
        self._session.set_sim_mode(int(mode))

    @Slot(float, float, float, float, float, float, float, float, float, float, bool)
    def drawLine(
        self,
        x0: float,
        y0: float,
        z0: float,
        x1: float,
        y1: float,
        z1: float,
        r: float,
        g: float,
        b: float,
        a: float,
        clear: bool,
    ) -> None:
        """Draw a line from ``(x0, y0, z0)`` to ``(x1, y1, z1)`` in colour ``rgba`` (0..1)."""
        self._draw("line", start=(x0, y0, z0), end=(x1, y1, z1), rgba=(r, g, b, a), clear=clear)

    @Slot(float, float, float, float, float, float, float, float, float, float, float, bool)
    def drawArrow(
        self,
        ox: float,
        oy: float,
        oz: float,
        dx: float,
        dy: float,
        dz: float,
        r: float,
        g: float,
        b: float,
        a: float,
        scale: float,
        clear: bool,
    ) -> None:
        """Draw an arrow at ``(ox, oy, oz)`` along ``(dx, dy, dz) * scale`` in colour ``rgba``."""
        self._draw("arrow", origin=(ox, oy, oz), direction=(dx, dy, dz), rgba=(r, g, b, a), scale=scale, clear=clear)

    @Slot(float, float, float, float, float, float, float, bool)
    def drawVelocity(
        self, ox: float, oy: float, oz: float, vx: float, vy: float, wz: float, scale: float, clear: bool
    ) -> None:
        """Draw a velocity command (``lin_vel_x``, ``lin_vel_y``, ``ang_vel_z``) at ``(ox, oy, oz)``."""
        self._draw("velocity", origin=(ox, oy, oz), lin_vel_x=vx, lin_vel_y=vy, ang_vel_z=wz, scale=scale, clear=clear)

    @Slot()
    def clearDrawings(self) -> None:
        """Stop repeating and erase every debug primitive."""
        self._draw("clear")

    @Slot(str, float)
    def setRepeat(self, kind: str, hz: float) -> None:
        """Repeat the last ``kind`` draw (``line``/``arrow``/``velocity``) at ``hz``; ``""`` or 0 Hz stops."""
        if self._session is not None:
            self._session.repeat(kind, hz if math.isfinite(hz) else 0.0)

    # ------------------------------------------------------------ internals
    def _draw(self, kind: str, **values: Any) -> None:
        if self._session is None:
            return
        if self._session.draw(kind, **values):
            self._set(drawPending=True)
            self._shown_commands = None  # the next tick settles the pending marks

    def _set(self, **values: Any) -> None:
        """Store values; emit each touched group's signal once if something changed."""
        groups: set[str] = set()
        for k, v in values.items():
            if self._v[k] != v:
                self._v[k] = v
                groups.add(_FIELDS[k][0])
        for g in sorted(groups):
            getattr(self, g + "Changed").emit()

    def _apply_segments(self, entries: tuple[SegmentEntry, ...], selected: str | None) -> None:
        newest = next((e for e in entries if e.error is None and e.alive), None)
        rows = [SegmentListModel.auto_row(newest), *(SegmentListModel.info_row(e) for e in entries)]
        name = selected or ""
        if name and all(r["name"] != name for r in rows):
            # "not found" beside a file that exists read as a contradiction (a shrunk segment of a stopped engine)
            state = "not found" if self._detached_state in (None, LinkState.SEARCHING) else self._detached_state.value
            rows.append(SegmentListModel.missing_row(name, attached=name == self._attached_name, state=state))
        reset = self._segments.set_rows(rows, key="name")
        self._set(selectedSegment=name, segmentIndex=max(self._segments.index_of(name), 0))
        if reset:
            # A reset may have moved the picker's current index: make bindings re-read it.
            self.selectionChanged.emit()

    def _on_attach(self, h: Header | None) -> None:
        """A new attach (or a detach): facts from the header, every per-attach value afresh."""
        self._draw_debug_on = None
        self._shown_switches = None  # the new attach's switches are shown at its first tick
        self._set(**{k: d for k, (g, d) in _FIELDS.items() if g in ("facts", "rates")})
        self._set(
            simModePending=False,
            simModeResult="",
            simModeResultKind="",
            lastDrawResult="",
            lastDrawResultKind="",
            lastRttMs=-1.0,
            drawPending=False,
            drawCount=0,
        )
        for bit in range(len(Service)):
            avail = h is not None and bool(h.services_available >> bit & 1)
            self._services.update_row(bit, available=avail, enabled=False, pending=False, lastResult="", resultKind="")
        if h is None:
            return
        if h.has_images:
            image = (
                f"{h.image_width}×{h.image_height}×{h.image_channels} {h.pixel_format}, "
                f"{'bottom-up' if h.bottom_up else 'top-down'}"
            )
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
            segmentSize=bytes_text(h.segment_size),
        )

    def _apply_live(self, tick: Tick) -> None:
        # Said on the sections' title lines: the grid's counters and the status bar move between these refreshes.
        period = self.LIVE_PERIOD_S
        self._set(liveEvery="" if period <= 0.5 else f"every {period:g} s")
        live = tick.live
        if live is None:
            self._set(framesPerSec=_rate(tick.rates.frames_per_s), imagesPerSec=_rate(tick.rates.images_per_s))
            return
        age = tick.heartbeat_age_s
        share = tick.engine_share
        c = tick.counters
        self._set(
            clientPid=float(live.client_pid),
            trainerAlive=bool(tick.trainer_alive),
            # The field as the engine last wrote it: stopped, it still reads "running" (its heartbeat says more).
            engineState=EngineState.name_of(live.engine_state)
            + (" (last written)" if tick.state is LinkState.STALLED else ""),
            heartbeatAge=_DASH if age is None else ("< 0.5 s" if age < 0.5 else f"{age:.1f} s"),
            framesPerSec=_rate(tick.rates.frames_per_s),
            imagesPerSec=_rate(tick.rates.images_per_s),
            engineSharePct=-1.0 if share is None else round(100.0 * share, 1),
            trainerSharePct=-1.0 if share is None else round(100.0 * (1.0 - share), 1),
            frameSeq=str(live.frame_seq),  # u64 counters as exact decimal text: a QML number holds 53 bits
            actionSeq=str(live.action_seq),
            imageSeq=str(live.image_seq),
            tornImages=str(c.torn_images),
            tornHot=str(c.torn_hot),
            framesSkipped=str(c.frames_skipped),
        )

    def _apply_switches(self, live: LiveFields) -> None:
        """The services' switches and the simulation mode, at every tick they change (not with the live facts).

        At the panel's slow refresh a switch just turned off read "ok 5.5 ms · on" for up to 2 s, and a
        mode just chosen flipped back in the combo until the next refresh.
        """
        key = (live.services_enabled, live.sim_mode)
        if key == self._shown_switches:
            return
        self._shown_switches = key
        self._set(simMode=int(live.sim_mode if SimMode.get(live.sim_mode) is not None else SimMode.REALTIME))
        mask = live.services_enabled
        for bit in range(len(Service)):
            self._services.update_row(bit, enabled=bool(mask >> bit & 1))

    def _apply_commands(self, tick: Tick) -> None:
        cmd = tick.commands
        for bit in range(len(Service)):
            if self._services.row(bit)["pending"] and bit not in cmd.pending_services:
                self._services.update_row(bit, pending=False)
        self._set(
            drawPending=cmd.draw_pending,
            repeatKind=cmd.repeat_kind,
            repeatHz=cmd.repeat_hz,
            drawCount=cmd.draws_answered,
        )
        if not cmd.sim_pending:
            self._set(simModePending=False)

    def _show_draw_result(self, r: CommandResult, tick: Tick) -> None:
        self._held_result = None
        self._shown_draw_status = r.status
        self._next_result = tick.t + self.LIVE_PERIOD_S
        self._apply_result(r, tick)

    def _apply_result(self, r: CommandResult, tick: Tick) -> None:
        kind = r.status
        if r.kind == "service":
            if 0 <= r.target < len(Service):
                self._services.update_row(r.target, lastResult=r.text, resultKind=kind)
        elif r.kind == "sim":
            self._set(simModeResult=r.text, simModeResultKind=kind)
        else:  # draws, and unreadable replies on the tools ring
            # The RTT beside a result is that result's: a refusal's reply has one too; no reply, none
            # (a refusal once showed the RTT of the success before it).
            rtt = -1.0 if r.rtt_s is None else round(r.rtt_s * 1e3, 2)
            self._set(lastDrawResult=r.text, lastDrawResultKind=kind, lastRttMs=rtt)
            live = tick.live
            self._draw_debug_on = None if live is None else bool(live.services_enabled >> Service.DEBUG & 1)

    def _mark_stale_draw_result(self, debug_on: bool) -> None:
        """Say so when the Debug service was switched since the last draw result came.

        "error: service Debug is disabled" read as current after Debug was
        turned back on, until the next send. The result stays (it is the last
        one), dimmed, with what changed after it.
        """
        if debug_on == self._draw_debug_on:
            return
        self._draw_debug_on = None  # said once; the next result starts afresh
        text = self.value("lastDrawResult")
        if text:
            self._set(
                lastDrawResult=f"{text} · before Debug was turned {'on' if debug_on else 'off'}",
                lastDrawResultKind=ResultKind.STALE,
            )
