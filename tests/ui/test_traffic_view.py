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
    assert model.data(exact) == "0.250 ms"
    assert model.data(request) == "" and model.data(request, Qt.ItemDataRole.ToolTipRole) is None


def test_footer_shows_corruption_when_no_valid_message_arrives(view, segment_factory) -> None:
    seg = segment_factory()
    base = seg.header.tools_s2c_offset
    log = TrafficLog(seg)
    assert "corrupt" not in view.stats_label.text()
    struct.pack_into("<I", seg.buf, base + 8, 0)  # a zero-length entry ...
    struct.pack_into("<I", seg.buf, base, 16)  # ... published
    feed(view, log)
    assert "tools s2c: 0 (missed 16 B) (1 corrupt)" in view.stats_label.text()
    assert "length 0" in view.stats_label.toolTip()
    struct.pack_into("<II", seg.buf, base, 16 + 8 * seg.header.tools_ring_size, 16)  # lapped: bytes missed
    feed(view, log)
    assert f"(missed {16 + 8 * seg.header.tools_ring_size} B)" in view.stats_label.text()
