"""The command-traffic table: every envelope seen on the four rings, newest last.

Latency is the exact difference of the two ``sent_ns`` stamps; a response whose
latency is unknown (a stamp missing, its request not seen) reads "unknown",
with the reason as a tooltip, never "0.0 ms".

A view of Ticks: the window hands each tick's new entries and tap counts to
:meth:`TrafficView.add`; :meth:`TrafficView.refresh` (at the panels' rate)
appends the new rows only when something changed (a reset would repaint every
visible row; an append to a table that follows the bottom paints the new ones). The footer's per-ring counts
of messages, missed bytes and corrupt entries change as soon as the taps
count them, whether or not a valid message arrived.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable

from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt

from ..core.pacing import no_offer
from ..core.session import TrafficStats
from ..core.text import ms_text
from ..core.traffic import TrafficEntry
from . import palette as pal
from .text_line import TextLine

COLUMNS = ("time", "direction", "method", "correlation", "bytes", "latency", "error")
#: Header texts, compact so that all columns fit the dock's default width (the full names are tooltips).
HEADERS = ("time", "dir", "method", "corr", "bytes", "ms", "err")
_HEADER_TIPS = (
    "time: seconds since the first entry",
    "direction: T trainer, E engine, M this monitor (T→E: trainer to engine)",
    "method",
    "correlation id in hex (a 64-bit id as high:low halves)",
    "payload bytes",
    "latency: request → response, in milliseconds, from the producers' sent_ns stamps",
    "error",
)
#: A latency that cannot be known (a producer without ``sent_ns``): the reason is the cell's tooltip.
UNKNOWN_LATENCY = "?"
#: Compact direction texts (the full one, e.g. "engine → monitor", is the cell's tooltip).
SHORT_DIRECTIONS = {
    ("main", "c2s"): "T→E",
    ("main", "s2c"): "E→T",
    ("tools", "c2s"): "M→E",
    ("tools", "s2c"): "E→M",
}
#: The widest text each fixed column must show whole: its width comes from the font.
# 3: a trainer's ids (pid:count) whole up to count 0xfff; longer ones keep their low digits (elided at the left)
_WIDEST = {0: "8888.8", 1: "M→E", 3: "8888:888", 4: "88888", 5: "888.88", 6: "err"}  # 5: a digit spare


def latency_text(latency_s: float) -> str:
    """A latency in milliseconds in at most five characters: ``2.743``, ``12.50``, ``250.0``, ``1234``.

    Four significant digits up to a second, whole milliseconds above, ``>100s`` past 100 s (the cell's
    tooltip has the exact value).
    """
    ms = latency_s * 1e3
    if ms < 9.9995:
        return f"{ms:.3f}"
    if ms < 99.995:
        return f"{ms:.2f}"
    if ms < 999.95:
        return f"{ms:.1f}"
    return f"{ms:.0f}" if ms < 99_999.5 else ">100s"


def correlation_text(cid: int) -> str:
    """A correlation id, compact: hex, and a 64-bit id as ``high:low`` (32 bits each, hex).

    Producers often put a prefix (the reference trainer: its pid) in the high
    half and count in the low half, so ``3039:1a`` reads as "client 0x3039,
    request 0x1a" where the decimal would be 13 digits.
    """
    high, low = cid >> 32, cid & 0xFFFFFFFF
    return f"{high:x}:{low:x}" if high else f"{low:x}"


class _ElideLeft(QtWidgets.QStyledItemDelegate):
    """Elides at the left: a long correlation id keeps its low digits, the ones that differ."""

    def initStyleOption(self, option: QtWidgets.QStyleOptionViewItem, index) -> None:  # type: ignore[override]
        super().initStyleOption(option, index)
        option.textElideMode = Qt.TextElideMode.ElideLeft  # type: ignore[attr-defined]


_DISPLAY = Qt.ItemDataRole.DisplayRole
_TOOLTIP = Qt.ItemDataRole.ToolTipRole
_FOREGROUND = Qt.ItemDataRole.ForegroundRole
_ALIGNMENT = Qt.ItemDataRole.TextAlignmentRole
#: Per column: the text alignment (numbers right-aligned), ``None`` for the style's default.
_ALIGN = tuple(
    int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter) if col in (0, 3, 4, 5) else None
    for col in range(len(COLUMNS))
)


class TrafficModel(QtCore.QAbstractTableModel):
    """A read-only table over a snapshot of :class:`TrafficLog` entries.

    A paint asks :meth:`data` for seven roles of every visible cell (about
    2,000 calls for a dock-high table): each row's texts are formatted once,
    the first time the row is shown, and a call is a lookup. Once per row
    (its first column's text) it calls :attr:`offer`: the window offers the
    core there, so a paint of the table (a few milliseconds) runs in short
    bursts (see ``core.pacing.Yielder``).
    """

    MAX_ROWS = 2000

    def __init__(self, parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[TrafficEntry] = []
        self._texts: list[tuple[str, ...] | None] = []  # each row's column texts, once shown
        self._t0 = 0.0
        self._error_brush = QtGui.QBrush(QtGui.QColor(pal.BAD))
        #: Called once per row a paint asks for (see the class notes); the window sets it.
        self.offer: Callable[[], None] = no_offer

    #: Rows dropped from the top at once when appending passes :attr:`MAX_ROWS` (each drop shifts every
    #: row, which repaints the whole table: in batches, that happens once per this many new rows).
    TRIM_BATCH = 200

    def set_entries(self, entries: list[TrafficEntry], t0: float) -> None:
        self.beginResetModel()
        self._rows = entries[-self.MAX_ROWS :]
        self._texts = [None] * len(self._rows)
        self._t0 = t0
        self.endResetModel()

    @property
    def t0(self) -> float:
        """The time the time column counts from."""
        return self._t0

    def append_entries(self, entries: list[TrafficEntry]) -> None:
        """Add rows at the bottom, keeping at most :attr:`MAX_ROWS` (the oldest go, a batch at a time).

        Only the new rows are inserted, so a view following the bottom scrolls
        and paints just them, not every visible row as a reset would.
        """
        if not entries:
            return
        if len(entries) >= self.MAX_ROWS:
            self.set_entries(self._rows + entries, self._t0)
            return
        over = len(self._rows) + len(entries) - self.MAX_ROWS
        if over > 0:
            drop = min(len(self._rows), max(over, self.TRIM_BATCH))
            self.beginRemoveRows(QtCore.QModelIndex(), 0, drop - 1)
            del self._rows[:drop]
            del self._texts[:drop]
            self.endRemoveRows()
        n = len(self._rows)
        self.beginInsertRows(QtCore.QModelIndex(), n, n + len(entries) - 1)
        self._rows.extend(entries)
        self._texts.extend([None] * len(entries))
        self.endInsertRows()

    def rowCount(self, parent: QtCore.QModelIndex | QtCore.QPersistentModelIndex = QtCore.QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QtCore.QModelIndex | QtCore.QPersistentModelIndex = QtCore.QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal:
            if role == Qt.ItemDataRole.DisplayRole:
                return HEADERS[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return _HEADER_TIPS[section]
        return None

    def entry(self, row: int) -> TrafficEntry:
        return self._rows[row]

    def _row_texts(self, row: int) -> tuple[str, ...]:
        e = self._rows[row]
        if e.latency_s is not None:
            latency = latency_text(e.latency_s)
        else:
            latency = UNKNOWN_LATENCY if e.unknown_latency else ""
        texts = (
            f"{e.t - self._t0:.1f}",
            SHORT_DIRECTIONS[(e.pair, e.direction)],
            e.method,
            correlation_text(e.correlation_id),
            str(e.size),
            latency,
            e.error or "",
        )
        self._texts[row] = texts
        return texts

    def data(self, index: QtCore.QModelIndex | QtCore.QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        row = index.row()
        if not 0 <= row < len(self._rows):
            return None
        if role == _DISPLAY:
            col = index.column()
            if col == 0:
                self.offer()
            texts = self._texts[row]
            return (texts or self._row_texts(row))[col]
        if role == _ALIGNMENT:
            return _ALIGN[index.column()]
        if role == _FOREGROUND:
            return self._error_brush if self._rows[row].error else None
        if role == _TOOLTIP:
            return self._tooltip(self._rows[row], index.column())
        return None

    def _tooltip(self, e: TrafficEntry, col: int) -> str | None:
        if col == 5 and e.latency_s is None and e.unknown_latency:
            return f"latency unknown: {e.unknown_latency}"
        if col == 0:
            return f"{e.t - self._t0:.3f} s after the first entry"
        if col == 1:
            return f"{e.arrow} ({e.pair} ring)"
        if col == 5 and e.latency_s is not None:
            return ms_text(e.latency_s, 3)
        if col == 2:
            return e.method
        if col == 3:
            return f"correlation id {e.correlation_id} ({e.correlation_id:#x}; shown as high:low 32-bit halves in hex)"
        if col == 6 and e.error:
            return e.error
        return None


class TrafficView(QtWidgets.QWidget):
    """Filterable table of command traffic plus per-ring tap statistics.

    Parameters
    ----------
    capacity
        Entries kept (the newest).
    """

    def __init__(self, parent: QtWidgets.QWidget | None = None, *, capacity: int = 5000) -> None:
        super().__init__(parent)
        self.entries: collections.deque[TrafficEntry] = collections.deque(maxlen=capacity)
        self.stats = TrafficStats()
        self.total = 0
        self._t0: float | None = None
        self._shown: tuple[int, TrafficStats] | None = None
        self._new: list[TrafficEntry] = []  # entries added since the table last took them
        self._rebuild = True
        self._filter = ""
        self._held = False  # the last attach's traffic, kept after its segment went
        self.model = TrafficModel(self)
        self.table = QtWidgets.QTableView()
        self.table.setModel(self.model)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setAlternatingRowColors(True)
        # Every column visible at the dock's default width: compact texts, widths from the font,
        # the method column takes what is left and elides at the right: the name's start says which
        # method it is, the direction column whether it is a request (→E) or what came back (E→).
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setWordWrap(False)
        font = QtGui.QFont(self.table.font())
        font.setPointSizeF(max(font.pointSizeF() * 0.9, 8.0))  # a dense table: one step below the window's text
        self.table.setFont(font)
        metrics = self.table.fontMetrics()
        self.table.verticalHeader().setDefaultSectionSize(metrics.height() + 6)
        hh = self.table.horizontalHeader()
        hh.setMinimumSectionSize(metrics.horizontalAdvance("888") + 6)
        hh.setHighlightSections(False)
        for col in range(len(COLUMNS)):
            if col == 2:
                hh.setSectionResizeMode(col, QtWidgets.QHeaderView.ResizeMode.Stretch)
                continue
            hh.setSectionResizeMode(col, QtWidgets.QHeaderView.ResizeMode.Interactive)
            text = max(_WIDEST[col], HEADERS[col], key=metrics.horizontalAdvance)
            self.table.setColumnWidth(col, metrics.horizontalAdvance(text) + 7)
        hh.setStretchLastSection(False)
        self._elide_left = _ElideLeft(self.table)
        self.table.setItemDelegateForColumn(3, self._elide_left)
        self.filter_edit = QtWidgets.QLineEdit()
        self.filter_edit.setPlaceholderText("filter by method, e.g. Draw")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self._on_filter)
        self.follow_check = QtWidgets.QCheckBox("follow")
        self.follow_check.setChecked(True)
        # Two lines of their own (a new count repaints its line, never the window's layout), each elided
        # when the dock is narrower, its whole text in its tooltip: the counts, and the last problem if any.
        self.stats_label = TextLine("no segment", tooltip_is_text=True)
        self.problem_label = TextLine(tooltip_is_text=True)
        self.problem_label.setStyleSheet(f"color: {pal.WARN};")
        self.problem_label.setVisible(False)
        top = QtWidgets.QHBoxLayout()
        top.addWidget(QtWidgets.QLabel("method"))
        top.addWidget(self.filter_edit, 1)
        top.addWidget(self.follow_check)
        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(2, 4, 2, 4)
        lay.addLayout(top)
        lay.addWidget(self.table, 1)
        lay.addWidget(self.stats_label)
        lay.addWidget(self.problem_label)

    def set_held(self, held: bool) -> None:
        """Say the table holds the last attach's traffic (the segment was detached), or follows the attach's."""
        if held != self._held:
            self._held = held
            self._shown = None
            self.refresh()

    def clear(self) -> None:
        """Forget every entry and count (a new attach starts afresh)."""
        self._held = False
        self.entries.clear()
        self.stats = TrafficStats()
        self.total = 0
        self._t0 = None
        self._shown = None
        self._new, self._rebuild = [], True
        self.refresh()

    def add(self, entries: Iterable[TrafficEntry], stats: TrafficStats, t: float | None = None) -> None:
        """Take one tick's new entries and the taps' counts (cheap; the table updates in :meth:`refresh`)."""
        new = list(entries)
        if new and self._t0 is None:
            self._t0 = new[0].t
        self.entries.extend(new)
        self.total += len(new)
        self.stats = stats
        if not self._rebuild:
            self._new.extend(new)
            if len(self._new) > self.model.MAX_ROWS:  # more than the table holds: rebuild it from the newest
                self._new, self._rebuild = [], True

    def filtered(self, entries: Iterable[TrafficEntry] | None = None) -> list[TrafficEntry]:
        """Entries (default: all kept) whose method name contains the filter text (case-insensitive)."""
        src = self.entries if entries is None else entries
        if not self._filter:
            return list(src)
        needle = self._filter.lower()
        return [e for e in src if needle in e.method.lower()]

    def _on_filter(self, text: str) -> None:
        self._filter = text.strip()
        self._shown = None
        self._new, self._rebuild = [], True
        self.refresh()

    def refresh(self) -> None:
        """Rebuild the table and footer if anything changed since the last refresh."""
        key = (self.total, self.stats)
        if key == self._shown:
            return
        self._shown = key
        if self._rebuild or (self._t0 or 0.0) != self.model.t0:  # the time column counts from the first entry
            self.model.set_entries(self.filtered(), self._t0 or 0.0)
            self._rebuild = False
        else:
            self.model.append_entries(self.filtered(self._new))
        self._new = []
        if self.follow_check.isChecked():
            self.table.scrollToBottom()
        st = self.stats
        if not st.messages:
            self.stats_label.setText("no segment")
            self.problem_label.setVisible(False)
            return
        # Compact, so that it fits the dock's default width: "shown 54/54 · main c2s 27 s2c 27 · tools c2s 1 s2c 1"
        # (the rows shown first, a ring's problems after its count; the whole line is the tooltip when cut).
        pairs: dict[str, list[tuple[str, str]]] = {}
        for ring, count in st.messages.items():
            pair, _, direction = ring.rpartition(" ")
            problems = ""
            if st.missed_bytes.get(ring):
                problems += f" (missed {st.missed_bytes[ring]} B)"
            if st.corrupt.get(ring):
                problems += f" ({st.corrupt[ring]} corrupt)"
            if st.undecodable.get(ring):
                problems += f" ({st.undecodable[ring]} undecodable)"
            pairs.setdefault(pair, []).append((direction, f"{count}{problems}"))
        parts = [f"{pair} {' '.join(f'{d} {t}' for d, t in texts)}".strip() for pair, texts in pairs.items()]
        # Narrower: the directions as a pair of counts, "main 102/102" (c2s/s2c), problems kept (the whole is the
        # tooltip): at the default 1600x1000 the footer read "… tools c2s 1 s2…" once the counts had three digits.
        brief = [f"{pair} {'/'.join(t for _, t in texts)}".strip() for pair, texts in pairs.items()]
        rows = f"{self.model.rowCount()}/{len(self.entries)}"
        held = "last attach: " if self._held else ""  # the segment is gone: nothing more comes
        self.stats_label.setText(
            held + " · ".join([f"shown {rows}", *parts]),
            held + " · ".join([f"shown {rows}", *brief]),
            held + " · ".join([f"{rows} rows", *brief]),
        )
        if st.last_problem:
            self.problem_label.setText(f"last problem: {st.last_problem}")
        self.problem_label.setVisible(bool(st.last_problem))
