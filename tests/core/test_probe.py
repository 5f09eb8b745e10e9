"""``lucky-monitor check --live``: the reference engine passes; each misbehaviour fails exactly its rule.

The engine (and, where a rule needs one, the reference trainer) runs as a
child process (``python -m lucky_monitor sim --misbehave KIND``); the probe
runs in this process through ``main``. Deadlines are generous (the machine
may be loaded): a conforming engine answers in milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lucky_monitor.cli import main
from lucky_monitor.core.conformance import FAIL, PASS
from lucky_monitor.core.probe import DETAIL_MAX, LIVE_RULES, LiveProbe, _Talker, budget_s
from lucky_monitor.core.session import MonitorSession
from lucky_monitor.protocol.enums import Service
from lucky_monitor.protocol.envelope import Envelope, decode, encode
from lucky_monitor.protocol.errors import (
    EXIT_BUSY,
    EXIT_FAILED,
    EXIT_HEADER,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
)
from lucky_monitor.protocol.header import OFFSET, plan
from lucky_monitor.protocol.messages import RESPONSE_OF, GetServicesReq, MethodId
from lucky_monitor.sim.engine import MISBEHAVIOURS, EngineConfig, ReferenceEngine
from lucky_monitor.transport.shm import Segment, platform_kind, shm_path
from lucky_monitor.transport.tools import ToolsChannel, tools_owner

pytestmark = pytest.mark.skipif(platform_kind() != "dir", reason="segments are files under /dev/shm only on Linux")

SECONDS = "2"  # the timed window; C43's turn limit is 1 s, so a stall shows within it
DEADLINE = "3"  # generous: the reference engine answers in a few ms


def _name() -> str:
    return f"LuckyEngine_probe_{uuid.uuid4().hex[:12]}"


def _readline(proc: subprocess.Popen, timeout: float = 60.0) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "child printed nothing"
    return proc.stdout.readline().strip()


@contextlib.contextmanager
def _child(args: list[str], env: dict[str, str], *, quiet: bool = False) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.DEVNULL if quiet else subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def engine(env: dict[str, str], *misbehave: str, trainer: bool = False, extra: tuple[str, ...] = ()) -> Iterator[str]:
    """A reference engine (8 envs, 32x32 images) acting out ``misbehave``; optionally a trainer stepping it."""
    name = _name()
    args = ["-m", "lucky_monitor", "sim", "--name", name, "--envs", "8", "--image", "32x32", *extra]
    for kind in misbehave:
        args += ["--misbehave", kind]
    try:
        with _child(args, env) as eng:
            assert _readline(eng) == name
            if not trainer:
                yield name
                return
            train = ["-m", "lucky_monitor", "train", "--shm", name, "--quiet", "--timeout", "120"]
            with _child(train, env, quiet=True), Segment.attach(name) as seg:
                t_end = time.monotonic() + 60
                while not (seg.counter("client_pid") and seg.counter("action_seq") >= 3):
                    assert time.monotonic() < t_end, "the trainer never stepped"
                    time.sleep(0.02)
                yield name
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(shm_path(name))


def probe(capsys, name: str, *extra: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["check", name, "--live", "--seconds", SECONDS, "--deadline", DEADLINE, "--json", *extra])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert out.strip(), f"exit {code}, no report; stderr: {err}"
    return code, json.loads(out)


def failing(report: dict) -> dict[str, str]:
    return {r["id"]: r["detail"] for r in report["rules"] if r["status"] == "fail"}


def live_rows(report: dict) -> dict[str, dict]:
    ids = {rid for rid, _ in LIVE_RULES}
    return {r["id"]: r for r in report["rules"] if r["id"] in ids and r["rule"] in dict(LIVE_RULES).values()}


# --------------------------------------------------------------------------- a conforming engine


@pytest.mark.timeout(120)
def test_reference_engine_free_running_passes_every_rule(subprocess_env, capsys) -> None:
    with engine(subprocess_env) as name:
        code, report = probe(capsys, name)
        with Segment.attach(name) as seg:
            assert tools_owner(seg) == 0  # released
        # the text report's first line gives the bound as well (it had been in the JSON only)
        assert main(["check", name, "--live", "--seconds", SECONDS, "--deadline", DEADLINE]) == EXIT_OK
        first = capsys.readouterr().out.splitlines()[0]
        bound = budget_s(float(SECONDS), float(DEADLINE))
        assert re.fullmatch(rf"check {name} --live \(\d+\.\d s of a {bound:.1f} s bound\)", first), first
    assert code == EXIT_OK, failing(report)
    assert report["ok"] and report["live"]
    rows = live_rows(report)
    assert [r["id"] for r in rows.values()] == [rid for rid, _ in LIVE_RULES]
    assert all(set(r) == {"id", "ids", "rule", "status", "detail"} for r in report["rules"])
    assert {r["status"] for r in report["rules"]} <= {"pass", "na"}
    # free-run: no turn to judge, and the report says why
    assert rows["C20"]["status"] == rows["C43"]["status"] == "na"
    assert "no trainer" in rows["C20"]["detail"]
    assert rows["C35"]["status"] == "pass" and "moved to" in rows["C35"]["detail"]
    assert report["elapsed_s"] < report["budget_s"] == round(budget_s(float(SECONDS), float(DEADLINE)), 1)


@pytest.mark.timeout(120)
def test_reference_engine_with_the_reference_trainer_passes_every_rule(subprocess_env, capsys) -> None:
    with engine(subprocess_env, trainer=True) as name:
        code, report = probe(capsys, name)
    assert code == EXIT_OK, failing(report)
    rows = live_rows(report)
    assert all(r["status"] == "pass" for r in rows.values()), rows
    assert "samples with a trainer attached" in rows["C20"]["detail"]


def test_without_live_check_stays_read_only(subprocess_env, capsys) -> None:
    with engine(subprocess_env) as name, Segment.attach(name) as seg:
        before = seg.ring_positions()["tools_c2s"].write_pos
        capsys.readouterr()
        assert main(["check", name, "--json"]) == EXIT_OK
        report = json.loads(capsys.readouterr().out)
        assert seg.ring_positions()["tools_c2s"].write_pos == before == 0
    assert "live" not in report and not any(r["rule"] in dict(LIVE_RULES).values() for r in report["rules"])


# --------------------------------------------------------------------------- one misbehaviour, one rule

#: misbehaviour -> (the rule that must fail, words its detail must hold, needs a trainer)
CASES: dict[str, tuple[str, str, bool]] = {
    "wrong-correlation-id": ("C32", "answered with correlation_id", False),
    "drop-response": ("C37", "GetSceneInfo: no response within", False),
    "wrong-response-method": ("C39", "GetMujocoInfo: answered as GetSceneInfoResp", False),
    "unstamped": ("C40", "sent_ns 0 (not stamped)", False),
    "unknown-silent": ("C41", "no response within", False),
    "malformed-reply": ("C42", "answered with a success envelope GetServicesResp", False),
    "ignore-disabled": ("C34", "with Scene disabled was served", False),
    "images-ignore-disabled": ("C35", "image_seq moved from", False),
    "heartbeat-stops": ("C25", "", False),
    "image-frame-ahead": ("C23", "image_frame_seq", False),
    "image-seqlock-inverted": ("C23", "stayed odd", False),
    "ring-unaligned": ("C26", "cmd_s2c", False),
    "ignore-trainer": ("C20", "frame_seq", True),
    "stall-step": ("C43", "the engine's turn at frame_seq", True),
    "sticky-disable": ("C44", "SetServiceEnabled(Scene, on): engine says", False),
    "format-flip": ("C7", "header field image_format changed while probed", False),
}


def test_every_live_rule_is_a_checklist_item_of_layout_md_and_explained_in_conformance_md() -> None:
    schema = Path(__file__).resolve().parents[2] / "schema"
    layout = (schema / "LAYOUT.md").read_text()
    checklist = layout[layout.index("## 14. Conformance checklist") :]
    guide = (schema / "CONFORMANCE.md").read_text()
    for rid, _ in LIVE_RULES:
        assert re.search(rf"^\| {rid} \|", checklist, flags=re.MULTILINE), rid
        assert re.search(rf"^\| {rid} \|", guide, flags=re.MULTILINE), rid
        assert f"[{rid}]" in layout[: layout.index("## 14. Conformance checklist")], rid  # marked where it is stated


def test_every_misbehaviour_has_a_case_and_every_live_rule_a_misbehaviour() -> None:
    assert set(CASES) == set(MISBEHAVIOURS)
    assert {rid for rid, _, _ in CASES.values()} == {rid for rid, _ in LIVE_RULES}
    for kind, (rid, _, _) in CASES.items():
        assert f"[{rid}]" in MISBEHAVIOURS[kind]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("kind", list(CASES))
def test_each_misbehaviour_fails_exactly_its_rule(subprocess_env, capsys, kind: str) -> None:
    rid, words, trainer = CASES[kind]
    with engine(subprocess_env, kind, trainer=trainer) as name:
        code, report = probe(capsys, name)
        with Segment.attach(name) as seg:
            assert tools_owner(seg) == 0  # released, whatever the engine did
    fails = failing(report)
    assert code == EXIT_FAILED
    assert set(fails) == {rid}, fails
    # the live rule itself fails with a reason (a read-only rule of the same id may fail too)
    live = next(r for r in report["rules"] if r["id"] == rid and r["rule"] == dict(LIVE_RULES)[rid])
    assert live["status"] == "fail" and words in live["detail"], live


# --------------------------------------------------------------------------- engines that do not answer


_SILENT = """
import sys, time
from lucky_monitor.protocol.header import OFFSET, plan
from lucky_monitor.transport.shm import EngineSegment
import os
h = plan(num_envs=4, obs_size=6, act_size=2, cmd_ring_size=4096, tools_ring_size=4096,
         server_pid=os.getpid(), session_id=12345)
seg = EngineSegment.create(sys.argv[1], h)
seg.set("heartbeat_ns", time.monotonic_ns())
seg.set("engine_state", 1)
seg.set("frame_seq", 1)
print(sys.argv[1], flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(120)
def test_a_segment_whose_engine_never_answers_fails_the_response_rules_within_the_deadline(
    subprocess_env, capsys
) -> None:
    """A valid header written by another process that serves nothing: bounded, one report, no traceback."""
    name = _name()
    try:
        with _child(["-c", _SILENT, name], subprocess_env) as writer:
            assert _readline(writer) == name
            t0 = time.monotonic()
            capsys.readouterr()
            code = main(["check", name, "--live", "--seconds", "1", "--deadline", "1", "--json"])
            wall = time.monotonic() - t0
            out, err = capsys.readouterr()
            with Segment.attach(name) as seg:
                assert tools_owner(seg) == 0
                c2s = seg.ring_positions()["tools_c2s"]
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(shm_path(name))
    assert "Traceback" not in err
    report = json.loads(out)
    assert code == EXIT_FAILED
    rows = live_rows(report)
    assert rows["C37"]["status"] == "fail"
    assert "GetServices: no response within 1 s" in rows["C37"]["detail"]
    assert "not sent: the engine answered none of the last 2 requests" in rows["C37"]["detail"]
    assert rows["C25"]["status"] == "fail"  # the heartbeat was written once
    # the rules about an answer's content have nothing to judge
    for rid in ("C32", "C39", "C40", "C41", "C42", "C34", "C35"):
        assert rows[rid]["status"] == "na", rows[rid]
    assert rows["C44"]["status"] == "pass"  # nothing was changed, the channel is free again
    # exactly two requests went out, then the probe stopped sending
    assert c2s.write_pos > 0 and c2s.read_pos == 0
    assert report["elapsed_s"] <= wall < budget_s(1.0, 1.0)


@pytest.mark.timeout(120)
def test_tools_channel_held_by_another_monitor_exits_busy_and_sends_nothing(subprocess_env, capsys) -> None:
    with engine(subprocess_env) as name, Segment.attach(name) as seg:
        holder = seg.header.server_pid  # a live pid that is not this process
        chan = ToolsChannel.claim(name, pid=holder)
        try:
            capsys.readouterr()
            code = main(["check", name, "--live", "--seconds", "1", "--deadline", DEADLINE, "--json"])
            out, err = capsys.readouterr()
            assert seg.ring_positions()["tools_c2s"].write_pos == 0
            assert tools_owner(seg) == holder
        finally:
            chan.release()
    assert code == EXIT_BUSY
    assert out == ""
    assert err.strip() == f"lucky-monitor: error: tools channel held by pid {holder}"


@pytest.mark.timeout(120)
def test_engine_without_a_tools_channel_exits_unavailable(subprocess_env, capsys) -> None:
    with engine(subprocess_env, extra=("--no-tools",)) as name:
        capsys.readouterr()
        code = main(["check", name, "--live", "--seconds", "1", "--deadline", DEADLINE])
        err = capsys.readouterr().err
    assert code == EXIT_UNAVAILABLE
    assert len(err.strip().splitlines()) == 1 and "tools channel" in err and "Traceback" not in err


def test_live_options_are_checked_before_anything_is_attached(capsys) -> None:
    for bad in (["--seconds", "0"], ["--deadline", "-1"], ["--seconds", "soon"]):
        assert main(["check", "LuckyEngine_nothing_here", "--live", *bad]) == 2
        assert f"argument {bad[0]}" in capsys.readouterr().err


def test_misbehave_is_refused_unless_known(capsys) -> None:
    code = main(["sim", "--name", _name(), "--misbehave", "sing", "--steps", "0"])
    assert code == 2
    assert "--misbehave sing: unknown" in capsys.readouterr().err


# --------------------------------------------------------------------------- attribution, without an engine


class ScriptedClient:
    """A command client whose tools s2c ring delivers what ``answer(cid, sends)`` returns, one poll later."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.next = 0x100
        self.queue: list[bytes] = []
        self.sends = 0

    def next_id(self) -> int:
        self.next += 1
        return self.next

    def push_raw(self, data: bytes) -> None:
        self.sends += 1
        self.queue += self.answer(decode(data), self.sends)

    def drain_raw(self) -> list[bytes]:
        out, self.queue = self.queue, []
        return out


def _resp(req, cid: int | None = None, sent_ns: int | None = None) -> bytes:
    env = Envelope(
        RESPONSE_OF[req.method], req.correlation_id if cid is None else cid, None, "refused", sent_ns or req.sent_ns + 1
    )
    return encode(env)


def test_a_reply_after_the_deadline_does_not_count_as_an_answer() -> None:
    held: list[bytes] = []

    def answer(req, n: int) -> list[bytes]:
        if n == 1:
            held.append(_resp(req))  # answered only once the next request is sent: too late
            return []
        return [*held, _resp(req)]

    talker = _Talker(ScriptedClient(answer), 0.05, time.monotonic)
    first = talker.send("GetServices", MethodId.GetServicesReq, GetServicesReq())
    second = talker.send("GetServices again", MethodId.GetServicesReq, GetServicesReq())
    assert first.timed_out and not first.answered and first.late == 1
    assert second.answered and second.reply is not None and second.reply.correlation_id == second.cid


def test_duplicates_and_wrong_ids_are_told_apart() -> None:
    def answer(req, n: int) -> list[bytes]:
        if n == 1:
            return [_resp(req), _resp(req)]  # twice
        return [_resp(req, cid=0xBAD)]  # someone else's id

    talker = _Talker(ScriptedClient(answer), 0.5, time.monotonic)
    one = talker.send("GetServices", MethodId.GetServicesReq, GetServicesReq())
    two = talker.send("GetServices again", MethodId.GetServicesReq, GetServicesReq())
    assert one.duplicates == 1 and not one.wrong_ids
    assert two.wrong_ids == [0xBAD] and two.answered


def test_two_silent_requests_in_a_row_stop_the_sending() -> None:
    client = ScriptedClient(lambda req, n: [])
    talker = _Talker(client, 0.02, time.monotonic)
    exs = [talker.send(f"r{i}", MethodId.GetServicesReq, GetServicesReq()) for i in range(5)]
    assert client.sends == 2
    assert [e.sent for e in exs] == [True, True, False, False, False]
    assert talker.gone is not None and "none of the last 2" in talker.gone


class FakeSegment:
    """What the probe reads of a segment: a header and live fields (services all on)."""

    def __init__(self) -> None:
        self.header = plan(num_envs=2, obs_size=1, act_size=1, tools_ring_size=4096, session_id=1)

    def read_counter(self, field: str) -> int:  # the probe reads live fields through the fd (never a mapping)
        return 0xFF if field == "services_enabled" else 0


def test_the_engines_words_reach_the_report_bounded_and_escaped() -> None:
    hostile = "\x1b[31mred\nline\u202e" + "x" * 20000

    def answer(req, n: int) -> list[bytes]:
        return [encode(Envelope(RESPONSE_OF[req.method], req.correlation_id, None, hostile, req.sent_ns + 1))]

    probe = LiveProbe(FakeSegment(), ScriptedClient(answer), seconds=0.0, deadline_s=0.5)
    probe.probe_disabled_service()  # SetServiceEnabled(Scene, off) refused with the hostile text
    row = {r.ids[0]: r for r in probe.results((PASS, "restored"))}["C34"]
    assert row.status == FAIL and "refused: engine says:" in row.detail
    assert "\x1b" not in row.detail and "\n" not in row.detail and "\u202e" not in row.detail
    assert "\\x1b" in row.detail and len(row.detail) <= DETAIL_MAX


class SlowEngine:
    """A segment and a client in one: SetServiceEnabled is applied in ring order, and only while not held."""

    def __init__(self) -> None:
        self.header = plan(num_envs=2, obs_size=1, act_size=1, tools_ring_size=4096, session_id=1)
        self.services = 0xFF
        self.held = False
        self.ring: list = []
        self.queue: list[bytes] = []
        self.next = 0x100

    def read_counter(self, field: str) -> int:
        return self.services if field == "services_enabled" else 0

    def fixed_fields_changed(self) -> None:  # the probe looks at the header while it waits (C7): never rewritten
        return None

    def next_id(self) -> int:
        self.next += 1
        return self.next

    def push_raw(self, data: bytes) -> None:
        self.ring.append(decode(data))
        if not self.held:
            self.serve()

    def serve(self) -> None:
        for req in self.ring:
            if req.method == MethodId.SetServiceEnabledReq:
                bit = 1 << req.payload.service
                self.services = self.services | bit if req.payload.enabled else self.services & ~bit
            self.queue.append(encode(Envelope(RESPONSE_OF[req.method], req.correlation_id, None, "", req.sent_ns + 1)))
        self.ring = []

    def drain_raw(self) -> list[bytes]:
        out, self.queue = self.queue, []
        return out


def test_restore_resends_a_service_whose_last_request_the_engine_had_not_applied() -> None:
    """Ctrl-C after SetServiceEnabled(Viewport, off) was pushed but before the engine applied it."""
    eng = SlowEngine()
    probe = LiveProbe(eng, eng, seconds=0.0, deadline_s=0.02)
    eng.held = True
    off = probe._set_service(Service.VIEWPORT, False)
    assert not off.answered and eng.services == 0xFF  # still on when restore() reads the mask
    eng.held = False
    probe.restore()
    eng.serve()  # anything still queued
    assert eng.services == 0xFF


def test_restore_sends_nothing_for_services_already_as_found() -> None:
    eng = SlowEngine()
    probe = LiveProbe(eng, eng, seconds=0.0, deadline_s=0.5)
    probe._set_service(Service.CAMERA, False)
    probe._set_service(Service.CAMERA, True)
    sent = len(probe.requests)
    probe.restore()
    assert len(probe.requests) == sent and eng.services == 0xFF


@pytest.mark.timeout(120)
@pytest.mark.parametrize("to", ["process", "group"])
def test_ctrl_c_in_the_middle_still_restores_the_engine_and_releases_the_channel(subprocess_env, to: str) -> None:
    """SIGINT while Camera and Viewport are disabled: they are enabled again, the channel is free, exit 130.

    ``group``: as a terminal's Ctrl-C sends it, to the whole process group, the tools helper included
    (which outlives the interrupt to carry the restoring requests).
    """
    with engine(subprocess_env) as name, Segment.attach(name) as seg:
        found = seg.counter("services_enabled")
        cmd = [
            sys.executable,
            "-m",
            "lucky_monitor",
            "check",
            name,
            "--live",
            "--seconds",
            "30",
            "--deadline",
            DEADLINE,
        ]
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env,
            start_new_session=to == "group",
        )
        try:
            t_end = time.monotonic() + 60
            camera = 1 << Service.CAMERA
            while seg.counter("services_enabled") & camera:
                assert proc.poll() is None and time.monotonic() < t_end, "the probe never disabled Camera"
                time.sleep(0.001)
            if to == "group":
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(signal.SIGINT)
            code = proc.wait(60)
            err = proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stderr.close()
        assert code == EXIT_INTERRUPTED, err
        assert "Traceback" not in err and "error" not in err, err
        assert seg.counter("services_enabled") == found
        assert tools_owner(seg) == 0


@pytest.mark.timeout(120)
def test_an_engine_killed_during_the_live_check_is_said_so_not_failed(subprocess_env) -> None:
    """Seen: SIGKILL to the engine 3 s into `check --live` gave exit 1 and 'FAIL C25 heartbeat …' beside
    'PASS C44 engine left as found'. A dead engine's answers say nothing of its conformance: exit 5."""
    with engine(subprocess_env, trainer=True) as name, Segment.attach(name) as seg:
        pid = seg.header.server_pid
        cmd = [sys.executable, "-m", "lucky_monitor", "check", name, "--live", "--seconds", "4"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env)
        try:
            t_end = time.monotonic() + 60
            while not tools_owner(seg):  # the probe has claimed the channel: it is under way
                assert proc.poll() is None and time.monotonic() < t_end, "the probe never claimed the channel"
                time.sleep(0.01)
            time.sleep(1.5)
            os.kill(pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == EXIT_UNAVAILABLE, (out, err)
        assert (
            err.strip()
            == f"lucky-monitor: error: {name}: engine exited (engine pid {pid} is gone) during the live check"
        )
        assert "PASS" not in out and "FAIL" not in out


def test_live_check_of_an_invalid_header_stops_at_the_header(segment_factory, capsys) -> None:
    eng = segment_factory()
    struct.pack_into("<I", eng.buf, OFFSET["num_envs"], 0)
    capsys.readouterr()
    code = main(["check", eng.name, "--live", "--seconds", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == EXIT_HEADER
    assert not any(r["rule"] in dict(LIVE_RULES).values() for r in report["rules"])
    assert struct.unpack_from("<I", eng.buf, eng.header.tools_offset)[0] == 0  # never claimed


def test_a_lent_command_client_gets_every_reply_and_the_session_none() -> None:
    """After ``lend_commands`` the session's step leaves the tools s2c ring to the borrower; close releases."""
    eng = ReferenceEngine(EngineConfig(name=_name(), num_envs=2, image=None, sim_mode=2, tools_ring_size=4096))
    session = MonitorSession(eng.name, images=False, discover=False, traffic=False)
    try:
        t_end = time.monotonic() + 20
        while not session.step().tools.ours:
            assert time.monotonic() < t_end, "the session never claimed the tools channel"
            eng.tick()
        client = session.lend_commands()
        assert client is not None
        cid = client.next_id()
        client.push_raw(encode(Envelope(MethodId.GetServicesReq, cid, GetServicesReq(), "", time.monotonic_ns())))
        eng.serve_commands()
        tick = session.step()  # must not take the reply
        assert tick.results == ()
        (raw,) = client.drain_raw()
        assert decode(raw).correlation_id == cid
        session.close()
        assert eng.seg.counter("services_enabled") == eng.header.services_available
        assert struct.unpack_from("<I", eng.seg.buf, eng.header.tools_offset)[0] == 0
    finally:
        session.close()
        eng.close()


def _bump_num_envs(fd: int, hold_s: float) -> None:
    """num_envs one more for ``hold_s`` seconds, then as it was: a header rewritten under a live engine."""
    (n,) = struct.unpack("<I", os.pread(fd, 4, OFFSET["num_envs"]))
    os.pwrite(fd, struct.pack("<I", n + 1), OFFSET["num_envs"])
    time.sleep(hold_s)
    os.pwrite(fd, struct.pack("<I", n), OFFSET["num_envs"])


def _probe_while(capsys, name: str, rewrite: Callable[[int], None]) -> tuple[int, dict]:
    """:func:`probe` with ``rewrite(fd)`` running beside it on the segment's file."""
    import threading

    fd = os.open(shm_path(name), os.O_RDWR)
    thread = threading.Thread(target=rewrite, args=(fd,))
    thread.start()
    try:
        return probe(capsys, name)
    finally:
        thread.join()
        os.close(fd)


def _assert_c7_saw_num_envs(code: int, report: dict) -> None:
    rows = live_rows(report)
    assert code == 1 and rows["C7"]["status"] == "fail", rows["C7"]
    assert rows["C7"]["detail"] == "header field num_envs changed while probed (8 -> 9)"


@pytest.mark.timeout(120)
def test_a_header_field_changed_while_probed_fails_c7(subprocess_env, capsys) -> None:
    """Seen: num_envs 30 -> 31 for 2.5 s during `check --live`, and every rule passed (a `watch` beside it said so)."""

    def rewrite(fd: int) -> None:
        time.sleep(1.0)
        _bump_num_envs(fd, 1.0)

    with engine(subprocess_env) as name:
        code, report = _probe_while(capsys, name, rewrite)
    _assert_c7_saw_num_envs(code, report)
    assert failing(report).keys() == {"C7"}


@pytest.mark.timeout(120)
def test_the_read_only_check_catches_an_image_frame_stored_ahead_of_a_fast_engine(subprocess_env, capsys) -> None:
    # A --fast engine catches up with an image_frame_seq stored 3 ahead within a millisecond of each image:
    # one look at the two counters passed 12 runs of 12. The rule looks over the image wait.
    with engine(subprocess_env, "image-frame-ahead", trainer=True, extra=("--fast",)) as name:
        for _ in range(3):
            capsys.readouterr()
            assert main(["check", name, "--json"]) == 1
            rules = {r["rule"]: r for r in json.loads(capsys.readouterr().out)["rules"]}
            rule = rules["image_frame_seq at most frame_seq + 1"]
            assert rule["status"] == "fail" and "frames ahead of frame_seq" in rule["detail"], rule
    with engine(subprocess_env, trainer=True, extra=("--fast",)) as name:  # a healthy one passes
        for _ in range(3):
            capsys.readouterr()
            main(["check", name, "--json"])
            rules = {r["rule"]: r for r in json.loads(capsys.readouterr().out)["rules"]}
            assert rules["image_frame_seq at most frame_seq + 1"]["status"] == "pass"


@pytest.mark.timeout(120)
def test_a_header_field_changed_while_the_probe_holds_the_camera_off_fails_c7(subprocess_env, capsys) -> None:
    # The probe waits a second with Camera and Viewport off (C35); a field rewritten only then had been
    # compared by no look (they came after each step and while sampling).
    seen = []

    def rewrite(fd: int) -> None:
        t_end = time.monotonic() + 60
        while time.monotonic() < t_end:  # until the probe switches the camera off
            (enabled,) = struct.unpack("<I", os.pread(fd, 4, OFFSET["services_enabled"]))
            if not enabled >> Service.CAMERA & 1:
                seen.append(True)
                _bump_num_envs(fd, 0.3)
                return
            time.sleep(0.001)

    with engine(subprocess_env) as name:
        code, report = _probe_while(capsys, name, rewrite)
    assert seen
    _assert_c7_saw_num_envs(code, report)
