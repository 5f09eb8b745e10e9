"""The command line: list / info / check, exit codes, and one-line errors instead of tracebacks."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import time
import uuid

import pytest

from lucky_monitor.cli import main, run_check
from lucky_monitor.protocol.header import FIELDS, OFFSET
from lucky_monitor.transport.shm import platform_kind, shm_path
from tests.conftest import dead_pid

pytestmark = pytest.mark.skipif(platform_kind() != "dir", reason="segments are files under /dev/shm only on Linux")


def put(engine, field: str, value: int) -> None:
    code = dict((n, c) for n, _, c in FIELDS)[field]
    struct.pack_into("<" + code, engine.buf, OFFSET[field], value)


@pytest.fixture
def healthy(segment_factory):
    """A segment every rule passes on: live engine, trainer attached on its turn, fresh heartbeat."""
    eng = segment_factory(image=(8, 4, 3))
    eng.set("engine_state", 1)
    eng.set("client_pid", os.getpid())
    eng.set("frame_seq", 10)
    eng.set("action_seq", 9)
    eng.set("image_seq", 20)
    eng.set("heartbeat_ns", time.monotonic_ns())
    return eng


def statuses(name: str) -> dict[str, str]:
    results, _ = run_check(name, image_wait_s=0.0)
    return {r.rule: r.status for r in results}


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lucky-monitor: error: ")
    assert "Traceback" not in err
    return lines[0]


# ----------------------------------------------------------------------------- list


def test_list_table_and_json(segment_factory, capsys) -> None:
    prefix = f"LuckyEngine_c{uuid.uuid4().hex[:8]}_"
    live = segment_factory(prefix + "live")
    live.set("heartbeat_ns", time.monotonic_ns())
    stale = segment_factory(prefix + "stale", server_pid=dead_pid())
    # The engine died and its pid went to an unrelated live process; the heartbeat stopped 10 s ago.
    reused = segment_factory(prefix + "reused", server_pid=os.getppid())
    reused.set("heartbeat_ns", time.monotonic_ns() - 10 * 10**9)
    assert main(["list", "--prefix", prefix]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["NAME", "SERVER", "CLIENT"]
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert rows[live.name].endswith("  live")
    assert rows[stale.name].endswith("stale (engine gone)")
    assert f"{os.getppid()} alive" in rows[reused.name] and rows[reused.name].endswith("stale (heartbeat 10 s old)")
    assert main(["list", "--prefix", prefix, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_name = {d["name"]: d for d in data}
    assert by_name[live.name]["server_alive"] is True and by_name[live.name]["error"] is None
    assert by_name[live.name]["engine_live"] is True and 0 <= by_name[live.name]["heartbeat_age_s"] < 2
    assert by_name[stale.name]["server_alive"] is False and by_name[stale.name]["engine_live"] is False
    assert by_name[reused.name]["server_alive"] is True and by_name[reused.name]["engine_live"] is False
    assert abs(by_name[reused.name]["heartbeat_age_s"] - 10) < 1
    assert by_name[live.name]["owner_uid"] == os.geteuid()
    assert set(data[0]) == {
        "name",
        "path",
        "size",
        "mtime",
        "server_pid",
        "server_alive",
        "client_pid",
        "client_alive",
        "num_envs",
        "session_id",
        "error",
        "started",
        "owner_uid",
        "heartbeat_age_s",
        "engine_live",
    }
    assert main(["list", "--prefix", prefix + "nothing"]) == 0
    assert "no " in capsys.readouterr().out


# ----------------------------------------------------------------------------- info


def test_info_json_has_every_spec_field_then_derived(healthy, capsys) -> None:
    handle = bytes(range(0xA0, 0xE0))
    healthy.buf[OFFSET["gpu_obs_handle"] : OFFSET["gpu_obs_handle"] + 64] = handle
    assert main(["info", healthy.name, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == [n for n, _, _ in FIELDS] + ["derived"]
    assert data["magic"] == 0x4C524243 and data["version"] == 1
    assert data["gpu_obs_handle"] == handle.hex() and data["gpu_obs_handle"].islower()
    assert data["segment_size"] == healthy.header.segment_size
    d = data["derived"]
    assert d["server_alive"] is True and d["client_alive"] is True
    assert d["turn"] == "trainer" and d["frame_gap"] == 1
    assert d["pixel_format"] == "rgb" and d["bottom_up"] is False
    assert d["services_enabled_names"][0] == "Agent" and len(d["services_available_names"]) == 8
    assert d["path"] == shm_path(healthy.name) and d["file_size"] == healthy.header.segment_size
    assert 0 <= d["heartbeat_age_s"] < 3600
    assert d["tools_owner_pid"] == 0 and d["reserved_nonzero"] == []
    assert {r["name"] for r in d["regions"]} >= {"obs", "act", "rewards", "dones", "resets", "image", "tools"}
    assert set(d["rings"]) == {"cmd_s2c", "cmd_c2s", "tools_c2s", "tools_s2c"}


@pytest.mark.parametrize(
    ("client", "frame", "action", "turn"),
    [
        (True, 5, 5, "engine"),
        (True, 5, 4, "trainer"),
        (True, 7, 4, "violation"),
        (True, 4, 5, "violation"),
        (False, 99, 0, "free-run"),
    ],
)
def test_info_turn(segment_factory, capsys, client: bool, frame: int, action: int, turn: str) -> None:
    eng = segment_factory()
    eng.set("client_pid", os.getpid() if client else 0)
    eng.set("frame_seq", frame)
    eng.set("action_seq", action)
    assert main(["info", eng.name, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["derived"]
    assert d["turn"] == turn and d["frame_gap"] == frame - action


def test_info_human_table(healthy, capsys) -> None:
    assert main(["info", healthy.name]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("  ")]
    header_rows = rows[: len(FIELDS)]
    assert [r.split()[0] for r in header_rows] == [n for n, _, _ in FIELDS]
    value_columns = {len(r) - len(r[2:].split(None, 1)[1]) for r in header_rows if len(r[2:].split(None, 1)) == 2}
    assert len(value_columns) == 1  # aligned
    assert "0x4C524243 ('LRBC')" in out
    assert "trainer" in out and "pid" in out


def test_info_defaults_to_the_newest_live_segment(segment_factory, capsys, monkeypatch) -> None:
    import lucky_monitor.transport.discovery as disc

    monkeypatch.delenv("LUCKY_SHM_NAME", raising=False)
    eng = segment_factory()
    info = disc.SegmentInfo(eng.name, eng.path, 0, 0.0, os.getpid(), True, 0, False, 4, 1, None)
    monkeypatch.setattr(disc, "newest_live", lambda prefix=disc.DEFAULT_PREFIX, **kw: info)
    assert main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["session_id"] == eng.header.session_id
    monkeypatch.setattr(disc, "newest_live", lambda prefix=disc.DEFAULT_PREFIX, **kw: None)
    assert main(["info"]) == 5
    assert "no live" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("command", ["info", "check"])
def test_a_name_from_the_environment_or_a_leading_shm_comes_before_the_newest_live_segment(
    segment_factory, capsys, monkeypatch, command
) -> None:
    """Seen: `info`, `check`, `snapshot` and `record` used the newest live segment with $LUCKY_SHM_NAME set (the
    window, `watch` and `sim` honoured it), and `lucky-monitor --shm NAME info` dropped the --shm."""
    import lucky_monitor.transport.discovery as disc

    wanted, newest = segment_factory(), segment_factory()
    for seg in (wanted, newest):
        seg.set("heartbeat_ns", time.monotonic_ns())
    info = disc.SegmentInfo(newest.name, newest.path, 0, 0.0, os.getpid(), True, 0, False, 4, 1, None)
    monkeypatch.setattr(disc, "newest_live", lambda prefix=disc.DEFAULT_PREFIX, **kw: info)
    monkeypatch.delenv("LUCKY_SHM_NAME", raising=False)

    def chosen(argv: list[str]) -> str:
        capsys.readouterr()
        main([*argv, "--json"])
        out = json.loads(capsys.readouterr().out)
        if command == "check":
            return str(out["name"])
        return next(s.name for s in (wanted, newest) if s.header.session_id == out["session_id"])

    assert chosen([command]) == newest.name
    assert chosen(["--shm", wanted.name, command]) == wanted.name
    monkeypatch.setenv("LUCKY_SHM_NAME", wanted.name)
    assert chosen([command]) == wanted.name
    assert chosen([command, newest.name]) == newest.name  # NAME given: NAME
    monkeypatch.setenv("LUCKY_SHM_NAME", "../x")
    assert main([command]) == 2
    assert "$LUCKY_SHM_NAME: invalid segment name '../x'" in one_error_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------- check


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_check_fails_a_segment_file_not_created_0600(healthy, capsys) -> None:
    """Seen: an independent engine that made its segment 0644 (readable by every user) passed every rule."""
    healthy.set("heartbeat_ns", time.monotonic_ns())
    assert main(["check", healthy.name, "--json"]) == 0
    rows = {r["rule"]: r for r in json.loads(capsys.readouterr().out)["rules"]}
    assert rows["file mode 0600"]["status"] == "pass" and rows["file mode 0600"]["ids"] == ["C5"]
    os.chmod(shm_path(healthy.name), 0o644)
    healthy.set("heartbeat_ns", time.monotonic_ns())
    assert main(["check", healthy.name, "--json"]) == 1
    rows = {r["rule"]: r for r in json.loads(capsys.readouterr().out)["rules"]}
    assert rows["file mode 0600"]["status"] == "fail"
    assert rows["file mode 0600"]["detail"] == "mode 0644, expected 0600"


def test_check_all_pass(healthy, capsys) -> None:
    healthy.set("heartbeat_ns", time.monotonic_ns())
    assert main(["check", healthy.name]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "SKIPPED" not in out
    assert out.strip().splitlines()[-1].startswith(f"{out.count('PASS')} passed, 0 failed")
    healthy.set("heartbeat_ns", time.monotonic_ns())
    assert main(["check", healthy.name, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["error"] is None
    names = [r["rule"] for r in data["rules"]]
    assert all(r["ids"] and all(re.fullmatch(r"C\d+", i) for i in r["ids"]) for r in data["rules"])
    assert all(r["id"] == ",".join(r["ids"]) for r in data["rules"])  # the --live report's key too
    for rule in (
        "magic",
        "version",
        "layout signature",
        "bound num_envs",
        "region obs",
        "regions do not overlap",
        "reserved bytes zero",
        "segment_size matches the file",
        "server pid alive",
        "client pid alive or 0",
        "lock-step gap",
        "heartbeat fresh",
        "image_seq even",
        "image_frame_seq at most frame_seq + 1",
        "ring cmd_s2c positions",
        "ring cmd_c2s positions",
        "ring tools_c2s positions",
        "ring tools_s2c positions",
        "tools owner 0 or alive",
    ):
        assert rule in names


def test_check_without_optional_parts_passes_with_na(segment_factory, capsys) -> None:
    eng = segment_factory(tools_ring_size=None)  # no images, no tools, no heartbeat, free-run
    assert main(["check", eng.name, "--json"]) == 0
    rules = {r["rule"]: r["status"] for r in json.loads(capsys.readouterr().out)["rules"]}
    assert rules["image_seq even"] == rules["tools owner 0 or alive"] == rules["heartbeat fresh"] == "n/a"
    assert rules["image_frame_seq at most frame_seq + 1"] == "n/a"
    assert rules["bound image_width"] == "n/a" and rules["lock-step gap"] == "pass"


@pytest.mark.parametrize(
    ("mutate", "rule"),
    [
        (lambda e: e.set("client_pid", dead_pid()), "client pid alive or 0"),
        (lambda e: e.set("action_seq", 3), "lock-step gap"),
        (lambda e: e.set("heartbeat_ns", 1), "heartbeat fresh"),
        (lambda e: e.set("image_seq", 21), "image_seq even"),
        (lambda e: e.set("image_frame_seq", 12), "image_frame_seq at most frame_seq + 1"),  # frame_seq 10
        (lambda e: put(e, "server_pid", dead_pid()), "server pid alive"),
        (lambda e: e.buf.__setitem__(slice(2000, 2001), b"\x01"), "reserved bytes zero"),
        (
            lambda e: e.buf.__setitem__(
                slice(e.header.cmd_s2c_offset, e.header.cmd_s2c_offset + 4), (12).to_bytes(4, "little")
            ),
            "ring cmd_s2c positions",
        ),
        (
            lambda e: e.buf.__setitem__(
                slice(e.header.tools_c2s_offset + 4, e.header.tools_c2s_offset + 8), (2**31).to_bytes(4, "little")
            ),
            "ring tools_c2s positions",
        ),
        (lambda e: os.truncate(e.path, e.header.segment_size + 4096), "segment_size matches the file"),
        (
            lambda e: e.buf.__setitem__(
                slice(e.header.tools_offset, e.header.tools_offset + 4), dead_pid().to_bytes(4, "little")
            ),
            "tools owner 0 or alive",
        ),
    ],
)
def test_check_live_rule_failures(healthy, capsys, mutate, rule: str) -> None:
    mutate(healthy)
    healthy.set("heartbeat_ns", 1 if rule == "heartbeat fresh" else time.monotonic_ns())
    assert main(["check", healthy.name, "--image-wait", "0"]) == 1
    out = capsys.readouterr().out
    failed = [ln.split(None, 1)[1] for ln in out.splitlines() if ln.strip().startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith(rule), out


def test_check_takes_images_of_the_frame_being_published(healthy, capsys) -> None:
    # LAYOUT 8.1: the images of frame N + 1 may be written before frame_seq says N + 1, never earlier.
    healthy.set("image_frame_seq", 11)  # frame_seq 10
    assert main(["check", healthy.name, "--image-wait", "0", "--json"]) == 0
    rules = {r["rule"]: r for r in json.loads(capsys.readouterr().out)["rules"]}
    rule = rules["image_frame_seq at most frame_seq + 1"]
    assert rule["status"] == "pass" and rule["detail"] == "image_frame_seq 11, frame_seq 10" and rule["ids"] == ["C23"]


@pytest.mark.parametrize(
    ("field", "value", "rule", "text"),
    [
        ("magic", 0x12345678, "magic", "magic:"),
        ("version", 9, "version", "version:"),
        ("mode", 7, "layout signature", "prototype"),
        ("num_envs", 0, "bound num_envs", "num_envs:"),
        ("sim_mode", 5, "bound sim_mode", "sim_mode:"),
        ("tools_offset", 65536 + 64, "tools_offset alignment", "tools_offset:"),
        ("segment_size", 1 << 40, "segment_size within the file", "segment_size:"),
        ("obs_offset", 4096 + 8, "region obs", "obs_offset:"),
        ("act_offset", 4096, "regions do not overlap", "overlaps"),
    ],
)
def test_check_header_rule_failure_skips_the_rest(segment_factory, capsys, field, value, rule, text) -> None:
    eng = segment_factory()
    put(eng, field, value)
    code = main(["check", eng.name, "--json"])
    captured = capsys.readouterr()
    assert code == 3
    assert text in one_error_line(captured.err)
    data = json.loads(captured.out)
    assert data["ok"] is False and text in data["error"]
    seen_fail = False
    for r in data["rules"]:
        if r["rule"] == rule:
            assert r["status"] == "fail" and text in r["detail"]
            seen_fail = True
        elif seen_fail:
            assert r["status"] == "skipped", r
        else:
            assert r["status"] in ("pass", "n/a"), r
    assert seen_fail


def test_check_prototype_layout(shm_name: str, capsys) -> None:
    buf = bytearray(8192)
    struct.pack_into("<IIIIIII", buf, 0, 0x4C524243, 1, os.getpid(), 0, 64, 48, 12)
    struct.pack_into("<QQQQQ", buf, 48, 256, 512, 768, 1024, 1280)
    with open(shm_path(shm_name), "wb") as f:
        f.write(buf)
    assert main(["check", shm_name]) == 3
    captured = capsys.readouterr()
    assert "prototype" in one_error_line(captured.err)
    assert [ln.split()[0] for ln in captured.out.splitlines() if "layout signature" in ln] == ["FAIL"]
    assert main(["info", shm_name]) == 3
    assert "prototype" in one_error_line(capsys.readouterr().err)


def test_check_truncated_file(shm_name: str, capsys) -> None:
    with open(shm_path(shm_name), "wb") as f:
        f.write(b"LRBC" * 10)
    assert main(["check", shm_name, "--json"]) == 3
    captured = capsys.readouterr()
    one_error_line(captured.err)
    rules = json.loads(captured.out)["rules"]
    assert rules[0]["rule"] == "file holds a header" and rules[0]["status"] == "fail"
    assert all(r["status"] == "skipped" for r in rules[1:])


# ----------------------------------------------------------------------------- errors


def test_list_escapes_a_file_name_with_control_characters(capsys) -> None:
    """Seen: a file named `LuckyEngine_x<ESC>[31mRED<BEL>` in /dev/shm put its escape sequence on the terminal."""
    prefix = f"LuckyEngine_c{uuid.uuid4().hex[:8]}"
    path = os.path.join("/dev/shm", prefix + "\x1b[31mRED\x07")
    with open(path, "wb") as f:
        f.write(b"\0" * 4096)
    try:
        assert main(["list", "--prefix", prefix]) == 0
    finally:
        os.unlink(path)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert f"{prefix}\\x1b[31mRED\\x07" in out and "name has characters outside" in out


@pytest.mark.parametrize("argv", [["info"], ["check"]])
def test_bad_names_and_missing_segments(argv: list[str], shm_name: str, capsys) -> None:
    assert main([*argv, shm_name]) == 5
    assert "no segment named" in one_error_line(capsys.readouterr().err)
    assert main([*argv, "../../etc/passwd"]) == 2
    assert "invalid segment name" in one_error_line(capsys.readouterr().err)


def test_corrupt_header(shm_name: str, capsys) -> None:
    with open(shm_path(shm_name), "wb") as f:
        f.write(bytes(range(256)) * 32)
    assert main(["info", shm_name]) == 3
    assert "magic" in one_error_line(capsys.readouterr().err)


def test_window_options_are_checked_before_any_window(capsys) -> None:
    # Without a subcommand lucky-monitor opens the window; wrong options never get that far.
    assert main(["--shm", "bad/name"]) == 2
    one_error_line(capsys.readouterr().err)
    assert main(["--screenshot", "x.png"]) == 2
    assert "--quit-after" in one_error_line(capsys.readouterr().err)
    assert main(["--quit-after", "-1"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_argparse_errors_exit_2(capsys) -> None:
    assert main(["info", "--bogus"]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["check", "--image-wait", "soon", "x"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert main(["--help"]) == 0
    assert "usage" in capsys.readouterr().out


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lucky_monitor", *argv], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_subprocess_exit_codes_without_traceback(shm_name: str, subprocess_env) -> None:
    missing = _run(["info", shm_name], subprocess_env)
    assert missing.returncode == 5
    one_error_line(missing.stderr)
    bad = _run(["check", "bad/name"], subprocess_env)
    assert bad.returncode == 2
    one_error_line(bad.stderr)
    usage = _run(["info", "--bogus"], subprocess_env)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    assert one_error_line(usage.stderr) == (
        "lucky-monitor: error: info: unrecognized arguments: --bogus (usage: lucky-monitor info --help)"
    )
    unknown = _run(["bogus"], subprocess_env)
    assert unknown.returncode == 2
    assert "invalid choice: 'bogus'" in one_error_line(unknown.stderr)
    with open(shm_path(shm_name), "wb") as f:
        f.write(b"\xff" * 8192)
    corrupt = _run(["info", shm_name], subprocess_env)
    assert corrupt.returncode == 3
    one_error_line(corrupt.stderr)
    no_display = {k: v for k, v in subprocess_env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    bare = _run([], no_display)
    assert bare.returncode == 2
    assert "no display" in one_error_line(bare.stderr)


def test_subprocess_check_pass(healthy, subprocess_env) -> None:
    healthy.set("heartbeat_ns", time.monotonic_ns())
    res = _run(["check", healthy.name], subprocess_env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stderr == ""


# ----------------------------------------------------------------------------- draw input


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["line", "--from", "1e308,0,0", "--to", "0,0,0"], "--from: 1e+308 is outside the float32 range"),
        (
            ["line", "--from", "0,0,0", "--to", "0,0,0", "--color", "1,0"],
            "--color: expected 3 or 4 numbers (r,g,b[,a]), got '1,0'",
        ),
        (["line", "--from", "0,0,0", "--to", "0,0,0", "--color", "1.5,0,0"], "--color.r: 1.5 is outside 0..1"),
        (["arrow", "--origin", "0,0,0", "--direction", "1,0,0", "--scale", "0"], "--scale: 0 is not greater than 0"),
        (["velocity", "--vel", "1,0,nan"], "--vel: nan is not a finite number"),
    ],
)
def test_draw_input_is_refused_before_any_segment_is_opened(argv: list[str], message: str, capsys) -> None:
    assert main(["draw", "no_such_segment_for_draw", *argv]) == 2
    assert message in one_error_line(capsys.readouterr().err)
