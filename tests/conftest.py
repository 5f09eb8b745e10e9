"""Shared, Qt-free fixtures: uniquely named segments that are always unlinked.

``segment_factory(**plan_kwargs)`` creates an engine segment laid out by
:func:`lucky_monitor.protocol.header.plan` and returns the
:class:`~lucky_monitor.transport.shm.EngineSegment`; every segment it made is
unlinked after the test. ``shm_name`` is a fresh name whose file, if a test
creates one by hand, is removed afterwards. ``subprocess_env`` lets a
``sys.executable`` child import this checkout. Nothing here touches Qt.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lucky_monitor.protocol.header import plan
from lucky_monitor.transport.shm import EngineSegment, platform_kind, shm_path

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Defaults of ``segment_factory``: small, with a tools channel, server = this process.
SEGMENT_DEFAULTS: dict[str, object] = {
    "num_envs": 4,
    "obs_size": 6,
    "act_size": 2,
    "cmd_ring_size": 4096,
    "tools_ring_size": 4096,
}


def dead_pid() -> int:
    """The pid of a child that has exited and been reaped (no process has it, for now)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def unique_segment_name(tag: str = "test") -> str:
    """A segment name no other test (or test run) uses."""
    return f"LuckyEngine_{tag[:5]}_{uuid.uuid4().hex[:12]}"  # at most 30 characters (LAYOUT C2)


@pytest.fixture
def shm_name() -> Iterator[str]:
    """A fresh segment name; a file of that name left behind by the test is unlinked."""
    name = unique_segment_name()
    yield name
    if platform_kind() == "dir":
        with contextlib.suppress(FileNotFoundError):
            os.unlink(shm_path(name))


@pytest.fixture
def segment_factory() -> Iterator[Callable[..., EngineSegment]]:
    """Factory ``make(name=None, *, exist_ok=False, **plan_kwargs) -> EngineSegment``.

    ``plan_kwargs`` go to :func:`~lucky_monitor.protocol.header.plan` on top
    of :data:`SEGMENT_DEFAULTS`, ``server_pid=os.getpid()`` and a random
    non-zero ``session_id``. Every segment made is unlinked at teardown.
    """
    made: list[EngineSegment] = []

    def make(name: str | None = None, *, exist_ok: bool = False, **plan_kwargs: object) -> EngineSegment:
        kw: dict[str, object] = {**SEGMENT_DEFAULTS, "server_pid": os.getpid(), "session_id": secrets.randbits(63) | 1}
        kw.update(plan_kwargs)
        seg = EngineSegment.create(name or unique_segment_name(), plan(**kw), exist_ok=exist_ok)  # type: ignore[arg-type]
        made.append(seg)
        return seg

    yield make
    for seg in reversed(made):
        seg.unlink()


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for ``sys.executable`` children that must import this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTHONSTARTUP", None)
    return env
