"""``lucky-monitor export``: Prometheus text whose values are the segment's, found as segments appear.

The text is parsed with prometheus-client's own parser (what a Prometheus
server accepts); expected values are written into, or read from, the segment
by the test.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from lucky_monitor.cli import main
from lucky_monitor.core.fleet import Fleet
from lucky_monitor.headless.export import METRICS, _Collector, parse_listen
from lucky_monitor.protocol.errors import UsageError
from lucky_monitor.transport.shm import Segment, platform_kind
from tests.conftest import unique_segment_name

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(platform_kind() != "dir", reason="segments are exercised on Linux"),
]

ISSUE_NAMES = {
    "lucky_frame_seq",
    "lucky_frames_per_second",
    "lucky_images_per_second",
    "lucky_reward_mean",
    "lucky_reward_min",
    "lucky_reward_max",
    "lucky_done_fraction",
    "lucky_engine_alive",
    "lucky_trainer_alive",
    "lucky_stalled_seconds",
    "lucky_torn_images_total",
    "lucky_frames_skipped_total",
    "lucky_turn_engine_share",
}


def scrape_text(fleet: Fleet, host: str = "node-7") -> dict[tuple[str, str], float]:
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(_Collector(fleet, host))
    text = prometheus_client.generate_latest(registry).decode()
    return parse(text)


def parse(text: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            out[(s.name, s.labels["segment"])] = s.value
            assert set(s.labels) == {"segment", "host"}
    return out


def test_every_metric_of_the_issue_is_defined_once() -> None:
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names)) and set(names) == ISSUE_NAMES
    assert all(m.kind == "counter" for m in METRICS if m.name.endswith("_total"))


@pytest.mark.parametrize(
    ("text", "want"),
    [("9187", ("127.0.0.1", 9187)), ("0.0.0.0:80", ("0.0.0.0", 80)), ("[::1]:9", ("::1", 9)), ("h:0", ("h", 0))],
)
def test_listen_address(text, want) -> None:
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["", "x", ":80", "1.2.3.4:70000", "h:-1"])
def test_bad_listen_address_is_a_usage_error(text) -> None:
    with pytest.raises(UsageError, match="--listen"):
        parse_listen(text)


def test_values_are_the_segments(segment_factory, monkeypatch) -> None:
    seg = segment_factory(num_envs=4, image=(8, 6, 3))
    real_counter = Segment.read_counter  # the monitor reads live fields through the fd
    writes = {"n": 0}

    def counter(self, field):
        if field != "image_seq":
            return real_counter(self, field)
        writes["n"] += 1  # the engine completes a write between any two reads: every copy overlaps one
        return 2 * writes["n"]

    monkeypatch.setattr(Segment, "read_counter", counter)
    seg.set("heartbeat_ns", time.monotonic_ns())
    seg.set("client_pid", os.getpid())  # a live trainer: this process
    seg.rewards[:] = [0.5, -2.0, np.nan, 3.5]
    seg.dones[:] = [1, 0, 0, 1]
    seg.set("frame_seq", 41)
    seg.set("action_seq", 40)
    clock = {"t": 100.0}
    fleet = Fleet([seg.name], clock=lambda: clock["t"])
    try:
        fleet.step()
        got = scrape_text(fleet)
        n = seg.name
        assert got[("lucky_frame_seq", n)] == 41
        assert got[("lucky_reward_mean", n)] == pytest.approx((0.5 - 2.0 + 3.5) / 3)
        assert got[("lucky_reward_min", n)] == -2.0 and got[("lucky_reward_max", n)] == 3.5
        assert got[("lucky_engine_alive", n)] == 1 and got[("lucky_trainer_alive", n)] == 1
        assert got[("lucky_stalled_seconds", n)] == 0
        assert got[("lucky_torn_images_total", n)] > 0
        assert got[("lucky_turn_engine_share", n)] == 0  # frame_seq - action_seq = 1: the trainer's turn
        # not measurable yet: left out, never 0
        for name in ("lucky_frames_per_second", "lucky_images_per_second", "lucky_done_fraction"):
            assert (name, n) not in got
        # over the next second, 8 more frames with one done each (4 envs)
        for k in range(8):
            clock["t"] += 0.125
            seg.dones[:] = [0, 0, 1, 0]
            seg.set("frame_seq", 42 + k)
            seg.set("action_seq", 41 + k)
            seg.set("heartbeat_ns", time.monotonic_ns())
            fleet.step()
        got = scrape_text(fleet)
        assert got[("lucky_frame_seq", n)] == 49
        assert got[("lucky_done_fraction", n)] == pytest.approx((2 + 8) / (4 * 9))
        assert got[("lucky_frames_skipped_total", n)] == 0  # every frame read: the fraction is exact
        assert got[("lucky_frames_per_second", n)] == pytest.approx(8.0, rel=0.15)
        # the heartbeat stops: five seconds later the link reads stalled for 5 s
        clock["t"] += 5.0
        fleet.step()
        got = scrape_text(fleet)
        assert got[("lucky_stalled_seconds", n)] == pytest.approx(5.0)
        # the trainer goes: trainer_alive 0, no turn share
        seg.set("client_pid", 0)
        seg.set("heartbeat_ns", time.monotonic_ns())
        clock["t"] += 0.1
        fleet.step()
        got = scrape_text(fleet)
        assert got[("lucky_trainer_alive", n)] == 0 and ("lucky_turn_engine_share", n) not in got
        assert got[("lucky_stalled_seconds", n)] == 0
        # ten frames published between two reads: the done fraction becomes a sample, and the counter says so
        seg.set("frame_seq", 60)
        clock["t"] += 0.1
        fleet.step()
        assert scrape_text(fleet)[("lucky_frames_skipped_total", n)] == 10
    finally:
        fleet.close()


def _scrape(port: int) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        return parse(r.read().decode())


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for s in (p.stdout, p.stderr):
        if s is not None:
            s.close()


def test_each_segments_state_is_told_as_it_changes(capsys) -> None:
    """Seen: `export --shm NAME` for a segment not there served only lucky_engine_alive 0 and said nothing."""
    missing = unique_segment_name("exp_missing")
    assert main(["export", "--listen", "127.0.0.1:0", "--shm", missing, "--seconds", "0.3"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if line.startswith(missing)] == [
        f"{missing}: searching (no segment named '{missing}')"
    ], err
    assert main(["export", "--listen", "127.0.0.1:0", "--shm", missing, "--seconds", "0.3", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_http_scrape_picks_up_new_segments_and_drops_gone_ones(subprocess_env) -> None:
    prefix = unique_segment_name("exp") + "_"
    py = [sys.executable, "-m", "lucky_monitor"]
    exporter = subprocess.Popen(
        [*py, "export", "--listen", "127.0.0.1:0", "--prefix", prefix, "--host-label", "node-7"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env,
    )
    sims: list[subprocess.Popen] = []
    try:
        assert exporter.stdout is not None
        line = exporter.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert m, line
        port = int(m.group(1))
        assert _scrape(port) == {}  # nothing of that prefix yet
        names = [prefix + "a", prefix + "b"]
        for name in names:  # they appear after the exporter started
            sims.append(
                subprocess.Popen(
                    [*py, "sim", "--name", name, "--envs", "3", "--image", "8x8", "--hz", "40"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=subprocess_env,
                )
            )
        deadline = time.monotonic() + 20
        while True:
            got = _scrape(port)
            if all(("lucky_frames_per_second", n) in got for n in names):
                break
            assert time.monotonic() < deadline, got
            time.sleep(0.3)
        with Segment.attach(names[0]) as seg:
            before = seg.counter("frame_seq")
            got = _scrape(port)
            after = seg.counter("frame_seq")
        # the exporter's value is one it read from the segment shortly before the scrape
        assert before - 40 <= got[("lucky_frame_seq", names[0])] <= after
        assert got[("lucky_frames_per_second", names[0])] == pytest.approx(40, rel=0.3)
        assert got[("lucky_engine_alive", names[0])] == 1 and got[("lucky_trainer_alive", names[0])] == 0
        # one engine ends (and unlinks its segment): its series go, the other's stay
        _stop(sims[0])
        deadline = time.monotonic() + 10
        while ("lucky_frame_seq", names[0]) in (got := _scrape(port)):
            assert time.monotonic() < deadline
            time.sleep(0.3)
        assert ("lucky_frame_seq", names[1]) in got
    finally:
        for p in sims:
            _stop(p)
        _stop(exporter)
    assert exporter.returncode == 0


def test_shipped_dashboard_and_scrape_config_name_only_exported_metrics() -> None:
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "assets"
    dash = json.loads((root / "grafana" / "lucky-monitor-fleet.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    used = {name for e in exprs for name in re.findall(r"\blucky_[a-z_]+", e)}
    defined = {m.name for m in METRICS}
    assert used <= defined, used - defined
    assert defined <= used, f"not on the dashboard: {defined - used}"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    config = (root / "prometheus.yml").read_text()
    assert "job_name: lucky" in config and "127.0.0.1:9187" in config
