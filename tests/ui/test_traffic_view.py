"""TrafficView over a TrafficLog on a hand-made segment: unknown latency, a footer that follows problems."""

from __future__ import annotations

import struct

import pytest
from PySide6.QtCore import Qt

from lucky_monitor.core.session import TrafficStats
from lucky_monitor.core.traffic import TrafficLog
from lucky_monitor.protocol import messages as m
from lucky_monitor.protocol.envelope import Envelope, encode
from lucky_monitor.protocol.ring import RingWriter
from lucky_monitor.ui.traffic_view import UNKNOWN_LATENCY, TrafficView

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def view(qtbot):
    v = TrafficView()
    qtbot.addWidget(v)
    return v


def feed(view: TrafficView, log: TrafficLog) -> None:
    """What the window does each tick: the log's new entries and counts, then a refresh."""
    view.add(log.poll(), TrafficStats.of(log))
    view.refresh()


def test_latency_column_says_unknown_for_unstamped_traffic(view, segment_factory) -> None:
    seg = segment_factory()
    h = seg.header
    c2s = RingWriter(seg.buf, h.cmd_c2s_offset, h.cmd_ring_size)
    s2c = RingWriter(seg.buf, h.cmd_s2c_offset, h.cmd_ring_size)
    log = TrafficLog(seg)
    c2s.push(encode(Envelope(m.MethodId.GetSceneInfoReq, 1, m.GetSceneInfoReq())))  # not stamped
    c2s.push(encode(Envelope(m.MethodId.GetSceneInfoReq, 2, m.GetSceneInfoReq(), sent_ns=1_000_000)))
    s2c.push(encode(Envelope(m.MethodId.GetSceneInfoResp, 1, None, "", 9_000_000)))
    s2c.push(encode(Envelope(m.MethodId.GetSceneInfoResp, 2, None, "", 1_250_000)))
    feed(view, log)
    model = view.model
    rows = {(model.entry(r).method, model.entry(r).correlation_id): r for r in range(model.rowCount())}
    unknown = model.index(rows["GetSceneInfoResp", 1], 5)
    exact = model.index(rows["GetSceneInfoResp", 2], 5)
    request = model.index(rows["GetSceneInfoReq", 1], 5)
    assert model.data(unknown) == UNKNOWN_LATENCY
    assert "request not stamped" in model.data(unknown, Qt.ItemDataRole.ToolTipRole)
    assert model.data(exact) == "0.250"  # milliseconds, as the header says
    assert model.data(exact, Qt.ItemDataRole.ToolTipRole) == "0.250 ms"
    assert model.data(request) == "" and model.data(request, Qt.ItemDataRole.ToolTipRole) is None


def test_footer_shows_corruption_when_no_valid_message_arrives(view, segment_factory) -> None:
    seg = segment_factory()
    base = seg.header.tools_s2c_offset
    log = TrafficLog(seg)
    assert "corrupt" not in view.stats_label.text()
    struct.pack_into("<I", seg.buf, base + 8, 0)  # a zero-length entry ...
    struct.pack_into("<I", seg.buf, base, 16)  # ... published
    feed(view, log)
    assert "tools c2s 0 s2c 0 (missed 16 B) (1 corrupt)" in view.stats_label.text()
    assert view.problem_label.text().startswith("last problem:") and "length 0" in view.problem_label.text()
    assert not view.problem_label.isHidden() and view.problem_label.toolTip() == view.problem_label.text()
    struct.pack_into("<II", seg.buf, base, 16 + 8 * seg.header.tools_ring_size, 16)  # lapped: bytes missed
    feed(view, log)
    assert f"(missed {16 + 8 * seg.header.tools_ring_size} B)" in view.stats_label.text()


def test_all_columns_fit_the_default_dock_width(view, qtbot) -> None:
    from lucky_monitor.core.traffic import TrafficEntry
    from lucky_monitor.ui.traffic_view import COLUMNS

    entries = [
        TrafficEntry(100.0, "main", "c2s", "GetJointStateReq", (13_649 << 32) | 0x12, 48, None, None, sent_ns=1),
        TrafficEntry(100.5, "main", "s2c", "GetJointStateResp", (13_649 << 32) | 0x12, 1234, None, 0.0125, sent_ns=2),
        TrafficEntry(1234.5, "tools", "s2c", "SetServiceEnabledResp", 0xFFFF, 88888, "service Camera is unknown", 0.25),
    ]
    entries += [TrafficEntry(101.0 + k, "main", "c2s", "GetJointStateReq", k, 48, None, None) for k in range(40)]
    view.add(entries, TrafficStats())
    view.resize(376, 400)  # the right dock's width (the debug-draw form's 380 px) less the dock's frame
    view.show()
    qtbot.waitExposed(view)
    view.refresh()
    table, model = view.table, view.model
    header = table.horizontalHeader()
    assert table.horizontalScrollBar().maximum() == 0
    assert header.length() <= table.viewport().width()
    metrics = table.fontMetrics()
    for col in range(len(COLUMNS)):
        assert (
            header.sectionSize(col)
            >= metrics.horizontalAdvance(str(model.headerData(col, Qt.Orientation.Horizontal))) + 6
        )
        assert not table.isColumnHidden(col)
        for row in range(model.rowCount()):
            text = model.data(model.index(row, col))
            if col in (2, 6):  # method and error elide; the whole text is the tooltip
                assert model.data(model.index(row, col), Qt.ItemDataRole.ToolTipRole) == (text or None)
                continue
            assert metrics.horizontalAdvance(text) + 6 <= header.sectionSize(col), (col, text)
    assert table.verticalScrollBar().isVisible()  # 43 rows: the vertical bar takes its room, still no horizontal one
    assert header.sectionSize(2) >= metrics.horizontalAdvance("GetJo…Resp")  # the method column keeps some room
    assert model.data(model.index(0, 1)) == "T→E"
    assert model.data(model.index(0, 3)) == "3551:12"  # a trainer's id: pid in the high half, a count in the low
    assert "58622008623122" in model.data(model.index(0, 3), Qt.ItemDataRole.ToolTipRole)
    assert model.data(model.index(0, 1), Qt.ItemDataRole.ToolTipRole) == "trainer → engine (main ring)"


def test_new_entries_are_appended_and_the_oldest_trimmed_in_batches(view, segment_factory, monkeypatch) -> None:
    """Each refresh inserts only the new rows (no model reset); past MAX_ROWS a batch of the oldest goes."""
    monkeypatch.setattr(type(view.model), "MAX_ROWS", 50)
    monkeypatch.setattr(type(view.model), "TRIM_BATCH", 20)
    seg = segment_factory(cmd_ring_size=65536)
    h = seg.header
    c2s = RingWriter(seg.buf, h.cmd_c2s_offset, h.cmd_ring_size)
    log = TrafficLog(seg)
    view.clear()  # as the window does at each attach: an empty table first
    resets: list[int] = []
    cid = 0
    for batch in (10, 10, 35, 3):
        for _ in range(batch):
            cid += 1
            c2s.push(encode(Envelope(m.MethodId.GetSceneInfoReq, cid, m.GetSceneInfoReq(), sent_ns=cid)))
        feed(view, log)
        if cid == 10:  # the first fill builds the table; from then on rows are appended
            view.model.modelReset.connect(lambda: resets.append(1))
            # the time column counts from the first entry, not from the clock's zero
            assert float(view.model.data(view.model.index(0, 0))) < 5.0
    ids = [view.model.entry(r).correlation_id for r in range(view.model.rowCount())]
    assert ids == list(range(cid - len(ids) + 1, cid + 1))  # newest last, in order, none twice
    assert 30 <= len(ids) <= 50  # trimmed by a batch, never over MAX_ROWS
    assert resets == []  # appends only: a reset repaints every visible row
    view.filter_edit.setText("Resp")  # a new filter rebuilds from what the view keeps
    assert view.model.rowCount() == 0 and resets == [1]
    view.filter_edit.setText("")
    assert view.model.rowCount() == min(50, cid)


def test_a_paint_of_the_table_offers_the_core_once_per_row(view, segment_factory, qtbot) -> None:
    """The window's offer (core.pacing.Yielder) runs between the rows of a paint, not once per paint."""
    seg = segment_factory(cmd_ring_size=65536)
    h = seg.header
    c2s = RingWriter(seg.buf, h.cmd_c2s_offset, h.cmd_ring_size)
    log = TrafficLog(seg)
    for cid in range(1, 41):
        c2s.push(encode(Envelope(m.MethodId.GetSceneInfoReq, cid, m.GetSceneInfoReq(), sent_ns=cid)))
    feed(view, log)
    view.resize(500, 400)
    view.show()
    qtbot.waitExposed(view)
    table = view.table
    first, last = table.rowAt(0), table.rowAt(table.viewport().height() - 1)
    visible = (last if last >= 0 else view.model.rowCount() - 1) - first + 1
    assert 5 <= visible < 40  # the test needs a partly shown table
    offers: list[int] = []
    view.model.offer = lambda: offers.append(1)
    table.viewport().grab()  # a paint into a pixmap: the same paintEvent, whatever the window system shows
    assert visible <= len(offers) <= visible + 2  # each painted row once (a partly shown row counts too)


def test_latency_text_is_at_most_five_characters() -> None:
    from lucky_monitor.ui.traffic_view import latency_text

    cases = {
        0.0: "0.000",
        0.002743: "2.743",
        0.0125: "12.50",
        0.25: "250.0",
        1.2345: "1234",
        99.0: "99000",
        1e3: ">100s",
    }
    for seconds, text in cases.items():
        assert latency_text(seconds) == text
    assert all(len(latency_text(10.0**k)) <= 5 for k in range(-7, 6))


def test_a_trainers_correlation_ids_show_whole_and_the_footer_starts_with_the_rows_shown(view, segment_factory):
    """Seen at 1280x800: '…9:100' for 7369:100 once the count passed 0xff, and 'shown 288/2…' cut at the end."""
    from lucky_monitor.ui.traffic_view import correlation_text

    metrics = view.table.fontMetrics()
    assert view.table.columnWidth(3) >= metrics.horizontalAdvance(correlation_text((0x7369 << 32) | 0xFFF)) + 6
    seg = segment_factory()
    c2s = RingWriter(seg.buf, seg.header.cmd_c2s_offset, seg.header.cmd_ring_size)
    log = TrafficLog(seg)
    c2s.push(encode(Envelope(m.MethodId.GetSceneInfoReq, 1, m.GetSceneInfoReq(), sent_ns=1)))
    feed(view, log)
    assert view.stats_label.text().startswith("shown 1/1 · main c2s 1")


def test_a_narrow_footer_shows_every_rings_counts_in_fewer_words(view, segment_factory):
    """Seen at the default 1600x1000: "shown 206/206 · main c2s 102 s2c 102 · tools c2s 1 s2…"."""
    seg = segment_factory()
    c2s = RingWriter(seg.buf, seg.header.cmd_c2s_offset, seg.header.cmd_ring_size)
    log = TrafficLog(seg)
    for i in range(25):
        c2s.push(encode(Envelope(m.MethodId.GetSceneInfoReq, i + 1, m.GetSceneInfoReq(), sent_ns=1)))
    feed(view, log)
    whole = view.stats_label.text()
    assert whole.startswith("shown 25/25 · main c2s 25 s2c 0 · tools c2s 0 s2c 0"), whole
    view.stats_label.setFixedWidth(view.stats_label.fontMetrics().horizontalAdvance(whole) * 2 // 3)
    shown = view.stats_label.shown_text()
    assert shown in ("shown 25/25 · main 25/0 · tools 0/0", "25/25 rows · main 25/0 · tools 0/0"), shown
    assert view.stats_label.toolTip() == whole


def test_a_detached_segments_traffic_is_held_and_said_so_until_the_next_attach(view, segment_factory):
    seg = segment_factory()
    c2s = RingWriter(seg.buf, seg.header.cmd_c2s_offset, seg.header.cmd_ring_size)
    log = TrafficLog(seg)
    c2s.push(encode(Envelope(m.MethodId.GetSceneInfoReq, 1, m.GetSceneInfoReq(), sent_ns=1)))
    feed(view, log)
    view.set_held(True)  # the segment went: the rows and counts stay, marked as the last attach's
    assert view.model.rowCount() == 1
    assert view.stats_label.text().startswith("last attach: shown 1/1 · main c2s 1")
    view.clear()  # a new attach
    assert view.model.rowCount() == 0 and view.stats_label.text() == "no segment"
