"""The command-traffic table: every envelope seen on the four rings, newest last.

Latency is the exact difference of the two ``sent_ns`` stamps; a response whose
latency is unknown (a stamp missing, its request not seen) reads "unknown",
with the reason as a tooltip, never "0.0 ms". The footer shows each ring's
counts, missed bytes, corrupt events and undecodable envelopes, and is
brought up to date on every refresh, whether or not a message arrived.
"""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt

from ..core.traffic import TrafficEntry, TrafficLog

COLUMNS = ("time", "direction", "method", "correlation", "bytes", "latency", "error")
UNKNOWN_LATENCY = "unknown"


class TrafficModel(QtCore.QAbstractTableModel):
    """A read-only table over a snapshot of :class:`TrafficLog` entries."""

    MAX_ROWS = 2000

    def __init__(self, parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[TrafficEntry] = []
        self._t0 = 0.0
        self._error_brush = QtGui.QBrush(QtGui.QColor(255, 110, 100))

    def set_entries(self, entries: list[TrafficEntry], t0: float) -> None:
        self.beginResetModel()
        self._rows = entries[-self.MAX_ROWS :]
        self._t0 = t0
        self.endResetModel()

    def rowCount(self, parent: QtCore.QModelIndex = QtCore.QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QtCore.QModelIndex = QtCore.QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def entry(self, row: int) -> TrafficEntry:
        return self._rows[row]

    def data(self, index: QtCore.QModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        e = self._rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if col == 0:
                return f"{e.t - self._t0:9.3f}"
            if col == 1:
                return e.arrow
            if col == 2:
                return e.method
            if col == 3:
                return f"{e.correlation_id:#x}"
            if col == 4:
                return str(e.size)
            if col == 5:
                if e.latency_s is not None:
                    return f"{e.latency_s * 1e3:.3f} ms"
                return UNKNOWN_LATENCY if e.unknown_latency else ""
            if col == 6:
                return e.error or ""
        if role == Qt.ItemDataRole.ToolTipRole and col == 5 and e.latency_s is None and e.unknown_latency:
            return f"latency unknown: {e.unknown_latency}"
        if role == Qt.ItemDataRole.ForegroundRole and e.error:
            return self._error_brush
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (0, 3, 4, 5):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None


class TrafficView(QtWidgets.QWidget):
    """Filterable table of command traffic plus per-ring tap statistics.

    The window calls :meth:`refresh` with its :class:`TrafficLog`; the table
    is rebuilt only when entries were added, the footer whenever a count
    changed (missed bytes and corruption included).
    """

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.log: TrafficLog | None = None
        self._seen_total = -1
        self._filter = ""
        self.model = TrafficModel(self)
        self.table = QtWidgets.QTableView()
        self.table.setModel(self.model)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        hh = self.table.horizontalHeader()
        hh.setStretchLastSection(True)
        for col, width in enumerate((80, 140, 190, 150, 60, 80)):
            self.table.setColumnWidth(col, width)
        self.filter_edit = QtWidgets.QLineEdit()
        self.filter_edit.setPlaceholderText("filter by method, e.g. Draw")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self._on_filter)
        self.follow_check = QtWidgets.QCheckBox("follow")
        self.follow_check.setChecked(True)
        self.stats_label = QtWidgets.QLabel("no segment")
        top = QtWidgets.QHBoxLayout()
        top.addWidget(QtWidgets.QLabel("method"))
        top.addWidget(self.filter_edit, 1)
        top.addWidget(self.follow_check)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(top)
        lay.addWidget(self.table, 1)
        lay.addWidget(self.stats_label)

    def set_log(self, log: TrafficLog | None) -> None:
        self.log = log
        self._seen_total = -1
        self.refresh()

    def _on_filter(self, text: str) -> None:
        self._filter = text.strip()
        self._seen_total = -1
        self.refresh()

    def refresh(self) -> None:
        """Bring the table (when entries were added) and the footer (always) up to date."""
        log = self.log
        if log is None:
            self.model.set_entries([], 0.0)
            self._set_footer("no segment", None)
            return
        if log.total != self._seen_total:
            self._seen_total = log.total
            entries = log.filtered(self._filter)
            t0 = log.entries[0].t if log.entries else 0.0
            self.model.set_entries(entries, t0)
            if self.follow_check.isChecked():
                self.table.scrollToBottom()
        parts = []
        problems = []
        for (pair, direction), st in log.stats.items():
            text = f"{pair} {direction}: {st.messages}"
            if st.missed_bytes:
                text += f" (missed {st.missed_bytes} B)"
            if st.corrupt:
                text += f" ({st.corrupt} corrupt)"
            if st.undecodable:
                text += f" ({st.undecodable} undecodable)"
            parts.append(text)
            if st.last_problem:
                problems.append(f"{pair} {direction}: {st.last_problem}")
        text = "   ".join(parts) + f"   shown {self.model.rowCount()} of {len(log.entries)}"
        self._set_footer(text, "\n".join(problems) or None)

    def _set_footer(self, text: str, tooltip: str | None) -> None:
        if self.stats_label.text() != text:
            self.stats_label.setText(text)
        tip = tooltip or ""
        if self.stats_label.toolTip() != tip:
            self.stats_label.setToolTip(tip)
