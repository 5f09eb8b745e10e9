"""Who may be attached: segments created 0600, no symbolic links, no other user's segment unless asked."""

from __future__ import annotations

import os

import pytest

from lucky_monitor.cli import main
from lucky_monitor.core.conformance import run_check
from lucky_monitor.protocol.errors import EXIT_OK, EXIT_UNAVAILABLE, ForeignSegment, TransportError
from lucky_monitor.transport.shm import Segment, TrainerSegment, platform_kind, shm_path
from lucky_monitor.transport.tools import ToolsChannel
from tests.conftest import unique_segment_name

pytestmark = pytest.mark.skipif(platform_kind() != "dir", reason="segments are files under /dev/shm on Linux")

OTHER_UID = 12345
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lucky-monitor: error: ") and "Traceback" not in err
    return lines[0]


def test_a_segment_is_created_0600_whatever_the_umask(segment_factory) -> None:
    old = os.umask(0)
    try:
        seg = segment_factory()
    finally:
        os.umask(old)
    assert os.stat(seg.path).st_mode & 0o777 == 0o600
    old = os.umask(0o277)  # a umask that would take the owner's write bit
    try:
        seg = segment_factory()
    finally:
        os.umask(old)
    assert os.stat(seg.path).st_mode & 0o777 == 0o600


@pytest.mark.parametrize("target", ["segment", "file"])
def test_a_symbolic_link_under_the_name_is_refused_with_one_message(segment_factory, tmp_path, capsys, target) -> None:
    real = segment_factory()
    if target == "segment":
        dest = real.path
    else:
        dest = str(tmp_path / "elsewhere")
        with open(dest, "wb") as f, open(real.path, "rb") as src:
            f.write(src.read())  # a valid segment's bytes, outside /dev/shm
    name = unique_segment_name("link")
    os.symlink(dest, shm_path(name))
    try:
        with pytest.raises(TransportError, match="symbolic link"):
            Segment.attach(name)
        with pytest.raises(TransportError, match="symbolic link"):
            TrainerSegment.attach(name)
        with pytest.raises(TransportError, match="symbolic link"):
            ToolsChannel.claim(name)
        for argv in (["info", name], ["check", name], ["draw", name, "clear"]):
            assert main(argv) == EXIT_UNAVAILABLE
            assert "is a symbolic link" in one_error_line(capsys.readouterr().err)
    finally:
        os.unlink(shm_path(name))


def test_a_name_replaced_by_a_link_to_the_same_file_reads_as_recreated(segment_factory) -> None:
    real = segment_factory()
    with Segment.attach(real.name) as seg:
        assert seg.still_valid() is None
        keep = shm_path(unique_segment_name("keep"))
        os.link(real.path, keep)
        try:
            os.unlink(real.path)
            os.symlink(keep, real.path)
            assert "recreated" in (seg.still_valid() or "")
        finally:
            os.unlink(real.path)
            os.rename(keep, real.path)


@pytest.fixture
def theirs(segment_factory):
    seg = segment_factory()
    os.chown(seg.path, OTHER_UID, OTHER_UID)
    return seg


@needs_root
def test_another_users_segment_is_refused_unless_allowed(theirs) -> None:
    with pytest.raises(ForeignSegment, match=f"owned by uid {OTHER_UID}.*--allow-other-user") as exc:
        Segment.attach(theirs.name)
    assert exc.value.owner_uid == OTHER_UID
    with pytest.raises(ForeignSegment):
        TrainerSegment.attach(theirs.name)
    with pytest.raises(ForeignSegment):
        ToolsChannel.claim(theirs.name)  # the tools channel writes into that user's engine
    with pytest.raises(ForeignSegment):
        run_check(theirs.name)
    with Segment.attach(theirs.name, allow_other_user=True) as seg:
        assert seg.owner_uid == OTHER_UID and seg.allow_other_user
        with ToolsChannel.claim(seg) as chan:  # inherits the segment's permission
            assert chan.owner_pid == os.getpid()
        with pytest.raises(ForeignSegment):
            ToolsChannel.claim(seg, allow_other_user=False)
    with ToolsChannel.claim(theirs.name, allow_other_user=True):
        pass
    results, err = run_check(theirs.name, allow_other_user=True)
    assert err is None and results


@needs_root
@pytest.mark.parametrize("command", ["info", "check", "draw"])
def test_cli_refuses_another_users_segment_and_names_the_owner_and_the_flag(theirs, capsys, command) -> None:
    tail = ["--timeout", "0.05", "clear"] if command == "draw" else []
    assert main([command, theirs.name, *tail]) == EXIT_UNAVAILABLE
    line = one_error_line(capsys.readouterr().err)
    assert f"uid {OTHER_UID}" in line and "--allow-other-user" in line
    code = main([command, theirs.name, "--allow-other-user", *tail])
    capsys.readouterr()
    if command == "draw":
        assert code == EXIT_UNAVAILABLE  # attached and claimed; no engine answers this hand-made segment
    else:
        assert code in (EXIT_OK, 1)  # info prints; check runs its rules


@needs_root
def test_train_refuses_another_users_segment_unless_allowed(theirs, capsys) -> None:
    argv = ["train", "--shm", theirs.name, "--timeout", "0.05", "--steps", "1", "--quiet"]
    assert main(argv) == EXIT_UNAVAILABLE
    line = one_error_line(capsys.readouterr().err)
    assert f"uid {OTHER_UID}" in line and "--allow-other-user" in line
    code = main([*argv, "--allow-other-user"])
    err = capsys.readouterr().err
    # Attached this time: what stops it now is that no engine answers this hand-made segment.
    assert code != EXIT_OK and f"uid {OTHER_UID}" not in err and "Traceback" not in err, err


@needs_root
def test_watch_refuses_another_users_segment_with_the_reason(theirs) -> None:
    import argparse
    import io
    import json

    from lucky_monitor.watch import run_watch

    out = io.StringIO()
    args = argparse.Namespace(name=theirs.name, json=True, seconds=0.3, interval=10.0, allow_other_user=False)
    assert run_watch(args, out=out) == 0
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    refused = [r for r in lines if r["state"] == "incompatible"]
    assert refused and f"uid {OTHER_UID}" in refused[0]["reason"] and "--allow-other-user" in refused[0]["reason"]
    assert all(r["session_id"] is None for r in lines)  # never attached
