"""What the headless views share: follow a segment through a session until it is attached."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from ..core.argtypes import ranged, seconds_between
from ..core.monitor import FULL_IMAGE_COPY_MAX_BYTES, LinkState
from ..core.session import MonitorSession, Tick
from ..core.text import bytes_text
from ..core.tiler import Tiler, TilerError
from ..protocol.errors import UnavailableError, UsageError
from ..protocol.header import MAX_ENVS

__all__ = ["attach", "grid_columns", "require", "wait_for"]


def require(module: str, command: str) -> None:
    """Fail with one line naming the extra to install when ``module`` (of the ``headless`` extra) is missing.

    Raises
    ------
    UnavailableError
        ``module`` cannot be imported.
    """
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise UnavailableError(
            f"{command} needs the Python package {module!r}: pip install 'lucky-monitor[headless]' "
            "(in a checkout: pip install '.[headless]')"
        )


def grid_columns(num_envs: int) -> int:
    """The default grid columns of ``snapshot`` and ``record``: ``ceil(sqrt(num_envs))``."""
    return max(1, math.isqrt(num_envs - 1) + 1) if num_envs > 0 else 1


#: A hopeless state (:func:`hopeless`) ends a wait only this long after the wait began: the first polls
#: of an attach may read a moment's state.
HOPELESS_GRACE_S = 1.0


def wait_for(
    session: MonitorSession,
    until: Callable[[Tick], bool],
    timeout_s: float,
    what: str,
    *,
    period_s: float = 1.0 / 60.0,
    clock: Callable[[], float] | None = None,
    hopeless: Callable[[Tick], bool] | None = None,
    grace_s: float = HOPELESS_GRACE_S,
) -> Tick:
    """Step ``session`` at ``period_s`` until ``until(tick)``; after ``timeout_s`` raise, saying ``what`` was missing.

    ``clock``: the session's own by default, so that every step it is given reads one clock.

    ``hopeless``: a state that waiting will not change (checked once ``grace_s`` has passed, or the timeout if
    sooner) ends the wait early with the same message.

    Raises
    ------
    UnavailableError
        The condition did not hold in time; the message carries the link's state and reason.
    """
    if clock is None:
        clock = session.clock
    start = clock()
    deadline = start + timeout_s
    while True:
        now = clock()
        tick = session.step(now)
        if until(tick):
            return tick
        why = f" ({tick.reason})" if tick.reason else ""
        if now >= deadline:
            raise UnavailableError(f"{what} within {timeout_s:g} s: {tick.text}{why}")
        if hopeless is not None and now - start >= grace_s and hopeless(tick):
            raise UnavailableError(f"{what}: {tick.text}{why}")
        time.sleep(period_s)


#: ``--env``, ``--cols`` and ``--timeout`` of ``snapshot`` and ``record`` (the segment bounds env and columns further).
ENV_ARG = ranged(int, 0, MAX_ENVS - 1, f"an env index from 0 to {MAX_ENVS - 1}")
COLS_ARG = ranged(int, 1, MAX_ENVS, f"a whole number of columns from 1 to {MAX_ENVS}")
TIMEOUT_ARG = seconds_between(0.01, 3600)


_HOPELESS = (LinkState.ENGINE_EXITED, LinkState.INCOMPATIBLE)


def hopeless(tick: Tick) -> bool:
    """Whether waiting will not change ``tick``'s state: a dead engine's segment, or one failing the header check."""
    return tick.state in _HOPELESS


def attach(session: MonitorSession, timeout_s: float) -> Tick:
    """Step until the session is attached to its segment; the first attached Tick."""
    name = session.name or "a live segment"
    return wait_for(
        session,
        lambda t: t.header is not None,
        timeout_s,
        f"could not attach to {name}",
        hopeless=hopeless,
    )


def image_target(
    session: MonitorSession, timeout_s: float, env: int | None, columns: int | None, gap: int = 0
) -> tuple[Tick, int]:
    """Attach and check ``--env`` / ``--cols`` against the segment: the first Tick and the grid's columns.

    Raises
    ------
    UnavailableError
        Not attached within ``timeout_s``, or the segment has no image region.
    UsageError
        ``env`` or ``columns`` out of range for this segment, or ``columns`` (with ``gap`` between the
        tiles) makes a grid too large to hold.
    """
    tick = attach(session, timeout_s)
    h = tick.header
    assert h is not None
    if not h.has_images:
        raise UnavailableError(f"{tick.name}: the segment has no image region (image_offset 0)")
    n = h.num_envs
    region = n * h.image_bytes_per_env
    if region > FULL_IMAGE_COPY_MAX_BYTES:
        raise UnavailableError(
            f"{tick.name}: the image region is {bytes_text(region)}, over the {bytes_text(FULL_IMAGE_COPY_MAX_BYTES)} "
            "this command copies at once"
        )
    if env is not None and not 0 <= env < n:
        raise UsageError(f"--env {env}: the segment has {n} envs (0..{n - 1})")
    if columns is not None and not 1 <= columns <= n:
        raise UsageError(f"--cols {columns}: must be 1..{n} for {n} envs")
    cols = grid_columns(n) if columns is None else columns
    if env is None:
        try:  # the grid's size is checked before anything is copied: a layout only, nothing allocated
            Tiler(n, h.image_height, h.image_width, h.image_channels, columns=cols, gap=gap, allocate=False)
        except TilerError as exc:
            if columns is not None:
                raise UsageError(str(exc).replace(f"columns: {columns}", f"--cols {columns}", 1)) from None
            raise UnavailableError(f"{tick.name}: {exc} (choose the layout with --cols)") from None
    return tick, cols
