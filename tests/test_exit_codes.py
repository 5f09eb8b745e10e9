"""One table of exit codes (``protocol.errors.EXIT_CODES``, README "Exit codes"), and every command follows it.

One test per row, in-process where that is enough; each bad-input case also
checks for the single ``lucky-monitor: error:`` line and no traceback.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import struct
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

import lucky_monitor
from lucky_monitor.cli import main
from lucky_monitor.protocol import errors
from lucky_monitor.protocol.errors import (
    EXIT_BUSY,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_HEADER,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    LuckyMonitorError,
    SegmentTooLarge,
)
from lucky_monitor.protocol.header import OFFSET
from lucky_monitor.sim.engine import EngineConfig, ReferenceEngine
from lucky_monitor.transport import shm
from lucky_monitor.transport.shm import MAX_SEGMENT_BYTES, platform_kind, shm_path

pytestmark = pytest.mark.skipif(platform_kind() != "dir", reason="segments are files under /dev/shm only on Linux")

README = Path(__file__).resolve().parents[1] / "README.md"


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lucky-monitor: error: ")
    assert "Traceback" not in err and lines[0].count("lucky-monitor: error:") == 1
    return lines[0]


def shm_files() -> set[str]:
    return set(os.listdir(shm.SHM_DIR))


@pytest.fixture
def other_live_pid() -> Iterator[int]:
    """The pid of a live process that is not this one."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


# ----------------------------------------------------------------------------- the table itself


def _all_error_classes() -> list[type[LuckyMonitorError]]:
    for mod in pkgutil.walk_packages(lucky_monitor.__path__, "lucky_monitor."):
        if (
            mod.name == "lucky_monitor.__main__"
            or mod.name.startswith("lucky_monitor._generated")
            or (mod.name.startswith("lucky_monitor.ui.") and mod.name != "lucky_monitor.ui.app")
        ):
            continue  # __main__ runs the CLI; the generated code raises none; the rest of ui/ needs Qt
        importlib.import_module(mod.name)
    out: list[type[LuckyMonitorError]] = []
    todo: list[type[LuckyMonitorError]] = [LuckyMonitorError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def test_every_error_class_exits_with_a_code_of_the_table() -> None:
    classes = _all_error_classes()
    assert len(classes) > 20
    for cls in classes:
        assert cls.exit_code in EXIT_CODES, cls
    assert errors.InvalidSegmentName.exit_code == EXIT_USAGE  # a usage error, though a SegmentNotFound
    assert errors.SegmentNotFound.exit_code == errors.EngineDied.exit_code == EXIT_UNAVAILABLE
    assert errors.CommandTimeout.exit_code == errors.ToolsChannelUnavailable.exit_code == EXIT_UNAVAILABLE
    assert errors.ToolsChannelBusy.exit_code == errors.SegmentExists.exit_code == EXIT_BUSY
    assert errors.RemoteError.exit_code == EXIT_FAILED
    assert errors.BadMagic.exit_code == EXIT_HEADER


def test_the_readme_table_is_the_table() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Exit codes", 1)[1].split("\n#", 1)[0]
    rows = dict(re.findall(r"^\| `?(\d+)`? \| (.+?) \|$", section, re.MULTILINE))
    assert sorted(int(k) for k in rows) == sorted(EXIT_CODES)
    assert "2 usage/transport" not in text


# ----------------------------------------------------------------------------- 0 ok


def test_0_ok(capsys) -> None:
    assert main(["list", "--prefix", "LuckyEngine_nothing_here_"]) == EXIT_OK
    assert main(["--version"]) == EXIT_OK
    capsys.readouterr()


# ----------------------------------------------------------------------------- 1 failed


def test_1_a_check_rule_fails(segment_factory, capsys) -> None:
    eng = segment_factory()
    struct.pack_into("<I", eng.buf, OFFSET["server_pid"], 0x7FFFFFF0)  # no such process
    assert main(["check", eng.name]) == EXIT_FAILED
    assert "FAIL" in capsys.readouterr().out


# ----------------------------------------------------------------------------- 2 usage


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["sim", "--obs", "0"], "--obs 0: floats per observation must be"),
        (["sim", "--act", "0"], "--act 0: floats per action must be 1.."),
        (["sim", "--envs", "0"], "--envs 0: the number of envs must be 1..4096"),
        (["sim", "--image", "0x4"], "--image '0x4'"),
        (["sim", "--seed", "-1"], "--seed -1"),
        (["draw", "LuckyEngine_not_needed", "line", "--from", "1e308,0,0", "--to", "0,0,0"], "float32"),
        (["--screenshot", "/no/such/dir/shot.png", "--quit-after", "1"], "does not exist"),
        (["demo", "--screenshot", "/no/such/dir/shot.png", "--quit-after", "1"], "does not exist"),
        (["info", ".."], "'..' names a directory, not a segment"),
        (["info", "a/b"], "'/' is not allowed"),
        (["info", "--bogus"], "info: unrecognized arguments: --bogus (usage: lucky-monitor info --help)"),
        (
            ["info", "LuckyEngine_x", "--json", "extra"],
            "info: unrecognized arguments: extra (usage: lucky-monitor info",
        ),
        (
            ["draw", "LuckyEngine_x", "line", "--from", "0,0", "--to", "1,0,0"],
            "draw NAME line: --from: expected 3 comma-separated numbers, got '0,0' (usage: lucky-monitor draw",
        ),
        (
            ["draw", "LuckyEngine_x", "arrow", "--origin", "0,0,0", "--direction", "1,0,0", "--scale", "-5"],
            "draw NAME arrow: --scale: -5 is not greater than 0 (usage: lucky-monitor draw NAME arrow --help)",
        ),
        (["bogus"], "invalid choice: 'bogus'"),
        (["list", "--prefix", "../"], "list: argument --prefix: '../': '/' is not allowed"),
        (  # accepted and dropped before: a VelocityCommand has no colour
            ["draw", "LuckyEngine_x", "velocity", "--vel", "1,0,0", "--color", "0,1,0"],
            "draw NAME velocity: unrecognized arguments: --color 0,1,0",
        ),
        (["export", "--prefix", "a b"], "export: argument --prefix: 'a b': ' ' is not allowed"),
        (["check", "LuckyEngine_not_needed", "--image-wait", "-1"], "check: argument --image-wait: '-1' must be"),
        (["check", "LuckyEngine_not_needed", "--image-wait", "nan"], "'nan' must be seconds"),
        (["train", "--shm", "LuckyEngine_not_needed", "--steps", "-5"], "train: argument --steps: '-5' must be"),
        (["--columns", "0"], "argument --columns: '0' must be a whole number of columns from 1 to 4096"),
        (["demo", "--columns", "-1"], "demo: argument --columns: '-1'"),
        (["demo", "--policy", "foo"], "demo: argument --policy: invalid choice: 'foo'"),
        (["demo", "--headless", "--stats-json", "stats.json"], "--stats-json describes the window"),
        (["--quit-after", "3e6"], "'3e6' must be at most 2000000 seconds"),
        (["demo", "--quit-after", "1e300"], "must be at most 2000000 seconds"),
        (["--shm", ""], "invalid segment name '' (--shm): it is empty"),
        (["watch", ""], "invalid segment name '' (NAME): it is empty"),
        (["sim", "--name", ""], "invalid segment name '' (--name): it is empty"),
        # a name given that no segment can have is a usage error like the others: the subcommand, then where help is
        (["info", "bad/name"], "info: invalid segment name 'bad/name': '/' is not allowed"),
        (["draw", "bad/name", "clear"], "(usage: lucky-monitor draw"),
        (["watch", "bad/name"], "watch: invalid segment name 'bad/name'"),
        (["export", "--listen", "127.0.0.1:0", "--poll-hz", "1e-300"], "--poll-hz 1e-300: must be 0.1 to 240"),
        (["demo", "--headless", "--screenshot", "shot.png", "--quit-after", "1"], "--screenshot describes the window"),
        (
            ["sim", "--hz", "1e-300"],
            "sim: --hz 1e-300: steps per second must be 0.1 to 100000 (usage: lucky-monitor sim",
        ),
        (
            ["record", "LuckyEngine_none", "-o", "r.xyz"],
            "record: -o r.xyz: the video's format comes from its extension",
        ),
        (["record", "LuckyEngine_none", "-o", "r.mp4", "--env", "-1"], "argument --env: '-1' must be an env index"),
        (["record", "LuckyEngine_none", "-o", "r.mp4", "--fps", "nan"], "argument --fps: 'nan' must be frames per"),
        (["snapshot", "LuckyEngine_none", "-o", "s.png", "--timeout", "inf"], "'inf' must be seconds, 0.01 to 3600"),
        (
            ["snapshot", "LuckyEngine_none", "-o", "s.jpg"],
            "snapshot: -o s.jpg: snapshot writes a PNG; name the file .png",
        ),
        (["demo", "--headless", "--hz", "0"], "--hz 0: steps per second must be 0.1 to 100000"),
        (["check", "--live", "--seconds", "1e-300"], "argument --seconds: '1e-300' must be seconds, 0.5 to 3600"),
        # options that would be dropped are refused (they were accepted and ignored)
        (["check", "LuckyEngine_not_needed", "--seconds", "1"], "check: --seconds set the live probe: add --live"),
        (["snapshot", "LuckyEngine_none", "-o", "s.png", "--env", "5", "--cols", "3"], "--cols lays out the grid"),
        (["snapshot", "LuckyEngine_none", "-o", "s.png", "--env", "5", "--labels"], "--labels lays out the grid"),
        (["record", "LuckyEngine_none", "-o", "r.mp4", "--env", "5", "--cols", "3"], "record: --cols lays out"),
        (["record", "LuckyEngine_none", "-o", "r.mp4", "--seconds", "1", "--fps", "0.1"], "is less than one frame"),
        (["check", "--live", "--deadline", "1e300"], "'1e300' must be seconds, 0.01 to 600"),
        (["train", "--shm", "LuckyEngine_not_needed", "--timeout", "inf"], "'inf' must be seconds, 0.01 to 86400"),
        # numbers are written the plain way: int() and float() read "1_0" as 10, and fullwidth digits as digits
        (["sim", "--envs", "1_0"], "sim: argument --envs: '1_0' is not a whole number"),
        (["sim", "--steps", "1_0"], "sim: argument --steps: '1_0' is not a whole number"),
        (["sim", "--hz", "\uff11\uff10"], "sim: argument --hz: '\uff11\uff10' is not a number"),
        (["sim", "--image", "\uff11\uff10x8"], "--image '\uff11\uff10x8': expected WxH"),
        (["sim", "--camera-fps", "inf"], "--camera-fps inf: must be 0 (every step) or a positive number"),
        (["sim", "--camera-fps", "-1"], "--camera-fps -1: must be 0 (every step) or a positive number"),  # not -1.0
        (["train", "--shm", "LuckyEngine_not_needed", "--seed", "1_0"], "argument --seed: '1_0' is not a whole number"),
        (
            ["draw", "LuckyEngine_x", "arrow", "--origin", "0,0,0", "--direction", "1,0,0", "--scale", "1_0"],
            "draw NAME arrow: argument --scale: '1_0' is not a number",
        ),
        (["export", "--listen", "1_0000"], "--listen '1_0000': '1_0000' is not a port number"),
        (["export", "--listen", "+5"], "--listen '+5': '+5' is not a port number"),
        (["export", "--listen", "0", "--poll-hz", "-0"], "--poll-hz -0: must be 0.1 to 240"),
    ],
)
def test_2_usage(argv: list[str], text: str | None, capsys) -> None:
    before = shm_files()
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    if text is not None:
        line = one_error_line(err)
        assert text in line, line
        assert "obs_size" not in line and "act_size" not in line and "num_envs" not in line  # options, not fields
    assert shm_files() == before


def test_2_screenshot_into_a_directory_or_an_unwritable_one(tmp_path, capsys) -> None:
    assert main(["--screenshot", str(tmp_path), "--quit-after", "1"]) == EXIT_USAGE
    assert "is a directory" in one_error_line(capsys.readouterr().err)
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert main(["--screenshot", str(locked / "x.png"), "--quit-after", "1"]) == EXIT_USAGE
        assert "not writable" in one_error_line(capsys.readouterr().err)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
@pytest.mark.parametrize(
    "argv",
    [
        ["--screenshot", "/proc/lucky_shot.png", "--quit-after", "1"],
        ["snapshot", "LuckyEngine_not_needed", "-o", "/proc/lucky_shot.png"],
        ["sim", "--name", "LuckyEngine_statsproc", "--steps", "1", "--stats-json", "/proc/lucky_stats.json"],
    ],
)
def test_2_an_output_file_the_system_refuses_is_named_before_any_work(argv: list[str], capsys) -> None:
    """/proc passes the permission bits for root but refuses a new file: the file is tried, not the bits."""
    before = shm_files()
    assert main(argv) == EXIT_USAGE
    line = one_error_line(capsys.readouterr().err)
    assert "/proc/lucky_" in line and ("cannot be written" in line or "not writable" in line), line
    assert shm_files() == before  # sim refused it before its segment existed


def test_2_an_output_path_that_cannot_be_says_why_in_its_own_words(tmp_path, capsys) -> None:
    """Seen: `-o run.log/x.png` said "directory … does not exist" (run.log is a file); `-o ''` and `/proc/x.png`
    said "No such file or directory"."""
    log = tmp_path / "run.log"
    log.write_text("a log")
    for out, want in (
        (str(log / "x.png"), f"{str(log)!r} is not a directory"),
        ("", "-o: the file name is empty; give one, e.g. snapshot.png"),
    ):
        assert main(["snapshot", "LuckyEngine_not_needed", "-o", out]) == EXIT_USAGE
        line = one_error_line(capsys.readouterr().err)
        assert want in line and "No such file" not in line, line
    if os.path.isdir("/proc/self") and os.geteuid() == 0:  # /proc passes root's permission bits, not the open
        assert main(["snapshot", "LuckyEngine_not_needed", "-o", "/proc/x.png"]) == EXIT_USAGE
        line = one_error_line(capsys.readouterr().err)
        assert "the directory takes no new files" in line, line


def test_2_an_output_file_is_tried_without_changing_or_leaving_anything(tmp_path) -> None:
    from lucky_monitor.core.outputs import check_output_path

    new = tmp_path / "new.json"
    check_output_path(str(new), "--stats-json")
    assert not new.exists()
    kept = tmp_path / "kept.json"
    kept.write_bytes(b"old")
    check_output_path(str(kept), "--stats-json")
    assert kept.read_bytes() == b"old"


def test_2_segment_over_the_size_limit_is_refused_before_anything_exists(capsys) -> None:
    before = shm_files()
    assert main(["sim", "--envs", "4096", "--image", "4096x4096"]) == EXIT_USAGE
    line = one_error_line(capsys.readouterr().err)
    assert "192.0 GiB" in line and "4.0 GiB limit" in line and "--envs" in line and "--image" in line
    assert shm_files() == before


def test_2_the_engine_checks_the_size_before_allocating_its_buffers() -> None:
    before = shm_files()
    tracemalloc.start()
    try:
        with pytest.raises(SegmentTooLarge, match="limit"):
            ReferenceEngine(EngineConfig(name="LuckyEngine_too_big_test", num_envs=4096, image=(4096, 4096)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak} bytes allocated before the refusal"
    assert shm_files() == before


def test_2_segment_over_the_free_shared_memory(monkeypatch, capsys) -> None:
    monkeypatch.setattr(shm, "shm_free_bytes", lambda: 1 << 20)
    before = shm_files()
    assert main(["sim", "--envs", "64", "--image", "64x64"]) == EXIT_USAGE
    line = one_error_line(capsys.readouterr().err)
    assert "1.0 MiB free in /dev/shm" in line and "--envs" in line
    assert shm_files() == before
    assert MAX_SEGMENT_BYTES >= 1 << 30


# ----------------------------------------------------------------------------- 3 header


@pytest.mark.parametrize("command", ["info", "check", "snapshot"])
def test_3_header_invalid(shm_name: str, capsys, tmp_path, command: str) -> None:
    with open(shm_path(shm_name), "wb") as f:
        f.write(b"\xff" * 8192)
    extra = ["-o", str(tmp_path / "x.png")] if command == "snapshot" else []
    assert main([command, shm_name, *extra]) == EXIT_HEADER
    line = one_error_line(capsys.readouterr().err)
    # which segment, then its rule (seen: `check` alone said only "magic: 0x…")
    assert line.startswith(f"lucky-monitor: error: {shm_name}: magic: "), line


# ----------------------------------------------------------------------------- 4 busy


def test_4_draw_with_the_tools_channel_held(segment_factory, other_live_pid: int, capsys) -> None:
    eng = segment_factory()
    eng.set("engine_state", 1)
    eng.buf[eng.header.tools_offset : eng.header.tools_offset + 4] = other_live_pid.to_bytes(4, "little")
    assert main(["draw", eng.name, "--timeout", "0.5", "clear"]) == EXIT_BUSY
    assert f"held by pid {other_live_pid}" in one_error_line(capsys.readouterr().err)


def test_4_train_with_another_trainer_attached(segment_factory, other_live_pid: int, capsys) -> None:
    eng = segment_factory()
    eng.set("engine_state", 1)
    eng.set("client_pid", other_live_pid)
    assert main(["train", "--shm", eng.name, "--timeout", "0.5"]) == EXIT_BUSY
    assert f"trainer pid {other_live_pid} is already attached" in one_error_line(capsys.readouterr().err)
    assert eng.counter("client_pid") == other_live_pid


# ----------------------------------------------------------------------------- 5 unavailable


def test_5_unavailable(segment_factory, shm_name: str, capsys) -> None:
    assert main(["info", shm_name]) == EXIT_UNAVAILABLE
    assert "no segment named" in one_error_line(capsys.readouterr().err)
    assert main(["train", "--shm", shm_name]) == EXIT_UNAVAILABLE
    one_error_line(capsys.readouterr().err)
    no_tools = segment_factory(tools_ring_size=None)
    assert main(["draw", no_tools.name, "clear"]) == EXIT_UNAVAILABLE
    assert "no tools channel" in one_error_line(capsys.readouterr().err)
    silent = segment_factory()  # a tools channel, but no engine serving it
    assert main(["draw", silent.name, "--timeout", "0.2", "clear"]) == EXIT_UNAVAILABLE
    assert "no reply" in one_error_line(capsys.readouterr().err)


def test_5_a_dead_engines_segment_is_refused_at_once_by_draw_and_check_live(segment_factory, capsys) -> None:
    """Nobody will answer on the tools channel of an engine that died: one line at once, not "no reply"
    after the timeout (draw) or "no segment attached" after the claim's wait (check --live)."""
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    eng = segment_factory(server_pid=child.pid)
    eng.set("engine_state", 1)
    eng.set("heartbeat_ns", time.monotonic_ns())
    for argv in (["draw", eng.name, "--timeout", "30", "clear"], ["check", eng.name, "--live", "--deadline", "30"]):
        assert main(argv) == EXIT_UNAVAILABLE
        line = one_error_line(capsys.readouterr().err)
        assert line.endswith(f"{eng.name}: engine exited (engine pid {child.pid} is gone)"), line


def test_5_the_file_an_engine_died_of_is_its_exit_not_a_bad_header(segment_factory, capsys, tmp_path) -> None:
    """Truncated under a stopped engine that then died: the window said *engine exited*, commands said exit 3."""
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    eng = segment_factory(server_pid=child.pid)
    os.truncate(shm_path(eng.name), 5000)  # the header whole, the rest gone
    shot = str(tmp_path / "s.png")
    for argv in (
        ["info", eng.name],
        ["draw", eng.name, "clear"],
        ["snapshot", eng.name, "-o", shot, "--timeout", "0.5"],
        ["train", "--shm", eng.name, "--steps", "1"],
    ):
        assert main(argv) == EXIT_UNAVAILABLE, argv
        line = one_error_line(capsys.readouterr().err)
        assert f"{eng.name}: engine exited (engine pid {child.pid} is gone; the segment it left fails" in line, line
        assert "segment_size" in line, line
    for argv in (["check", eng.name], ["check", eng.name, "--live"]):
        assert main(argv) == 3  # the checker reports the header as it finds it: its rules, the header's code
    capsys.readouterr()
    with open(shm_path(eng.name), "r+b") as f:
        f.write(b"garbage!")  # no magic: nothing in the file can be trusted, a pid neither
    assert main(["info", eng.name]) == 3
    assert "magic" in one_error_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------- 130 interrupted


def test_130_interrupted(monkeypatch, capsys) -> None:
    import lucky_monitor.transport.discovery as disc

    def interrupted(prefix: str = "") -> list[object]:
        raise KeyboardInterrupt

    monkeypatch.setattr(disc, "list_segments", interrupted)
    assert main(["list"]) == EXIT_INTERRUPTED
    assert "Traceback" not in capsys.readouterr().err
