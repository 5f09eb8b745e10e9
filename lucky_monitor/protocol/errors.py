"""Typed errors of lucky-monitor, and the exit codes of its commands.

Every failure that bad input can cause is one of these. The CLI prints
``str(error)`` on one line and exits with the error's ``exit_code``, one of
:data:`EXIT_CODES` (the README's "Exit codes" table); the GUI shows it as the
connection state. Nothing here imports Qt.
"""

from __future__ import annotations

#: the command did what it was asked
EXIT_OK = 0
#: it ran but did not succeed: ``check`` found a failing rule, the engine refused or answered an error
EXIT_FAILED = 1
#: the command cannot run as given: bad arguments or values (argparse's own code, too)
EXIT_USAGE = 2
#: the segment's header is invalid or incompatible
EXIT_HEADER = 3
#: what the command needs is held by someone else: the tools channel, the trainer slot, the name
EXIT_BUSY = 4
#: what the command needs is not there: no such segment, the engine exited, no reply in time
EXIT_UNAVAILABLE = 5
#: stopped by Ctrl-C before it finished (``sim``, ``train``, ``demo`` and the window end with 0 on it)
EXIT_INTERRUPTED = 130

#: Every exit code a ``lucky-monitor`` command uses, with its meaning (one row each in the README).
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "ok; also sim, train, demo, the window, record, export, watch and --remote stopped by Ctrl-C or SIGTERM",
    EXIT_FAILED: "failed: a check rule fails, the engine refused a command or answered with an error",
    EXIT_USAGE: "usage: bad arguments or values, a segment over the size limit, no display for the window",
    EXIT_HEADER: "header: the segment header is invalid or incompatible",
    EXIT_BUSY: (
        "busy: tools channel held by another monitor, trainer already attached, name in use, "
        "a port in use (export --listen, --remote)"
    ),
    EXIT_UNAVAILABLE: (
        "unavailable: no such segment, engine gone, no reply in time, no tools channel, "
        "a segment that cannot be opened (permission, a symbolic link, another user's); "
        "snapshot/record: no image region or no consistent copy in time; a missing optional package "
        "or VNC server (the message names what to install)"
    ),
    EXIT_INTERRUPTED: "interrupted by Ctrl-C",
}


class LuckyMonitorError(Exception):
    """Root of every error lucky-monitor raises on purpose."""

    #: process exit status the CLI uses for this error class (a key of :data:`EXIT_CODES`)
    exit_code = EXIT_FAILED


class UsageError(LuckyMonitorError):
    """A command-line option or value the command cannot run with."""

    exit_code = EXIT_USAGE


class SegmentTooLarge(UsageError):
    """The segment a configuration asks for is over the size limit or the free shared memory."""


class BusyError(LuckyMonitorError):
    """What the command needs is held by another live process."""

    exit_code = EXIT_BUSY


class UnavailableError(LuckyMonitorError):
    """What the command needs is not there (any more)."""

    exit_code = EXIT_UNAVAILABLE


class HeaderError(LuckyMonitorError):
    """The segment header fails a validation rule.

    Attributes
    ----------
    field : str
        The header field (spec name) the rule is about, e.g. ``"obs_offset"``.
    """

    exit_code = EXIT_HEADER

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class BadMagic(HeaderError):
    """The first four bytes are not ``LRBC``."""


class UnsupportedVersion(HeaderError):
    """The header has the right magic but a version this reader does not know."""


class TruncatedSegment(HeaderError):
    """The mapping is smaller than the header (or the header's own claim)."""


class IncompatibleLayout(HeaderError):
    """Magic and version match, but the bytes are laid out differently.

    The public prototype of the trainer side uses the same magic and version
    with other offsets; its fields must never be shown as if they were ours.
    """


class RegionError(HeaderError):
    """A region offset/size is misaligned, out of bounds or overlaps another."""


class RingError(LuckyMonitorError):
    """Base of command-ring errors."""


class RingCorrupt(RingError):
    """The ring's positions or an entry's length cannot be right."""


class RingFull(RingError):
    """The producer has no room for the entry; nothing was written."""


class MessageTooLarge(RingError):
    """The payload is larger than the ring will ever accept (capacity/2 - 8)."""


class EnvelopeError(LuckyMonitorError):
    """A FlatBuffers envelope is malformed (out-of-bounds offset, bad union...)."""


class TransportError(UnavailableError):
    """The segment cannot be opened, mapped or kept mapped."""


class SegmentNotFound(TransportError):
    """No segment with that name exists."""


class ForeignSegment(TransportError):
    """The segment belongs to another user and ``--allow-other-user`` was not given.

    Attributes
    ----------
    owner_uid : int
        The segment's owner (``st_uid``).
    """

    def __init__(self, name: str, owner_uid: int, my_uid: int) -> None:
        super().__init__(
            f"segment {name!r} is owned by uid {owner_uid}, not by this user (uid {my_uid}); "
            "pass --allow-other-user to attach to it anyway"
        )
        self.owner_uid = owner_uid


class SegmentGone(TransportError):
    """The segment was unlinked, shrunk or replaced while attached."""


class InvalidSegmentName(SegmentNotFound, ValueError):
    """A segment name outside ``[A-Za-z0-9_.-]{1,200}`` (no segment can have it)."""

    exit_code = EXIT_USAGE


class SegmentExists(TransportError):
    """A segment of that name is already there (creating one)."""

    exit_code = EXIT_BUSY


class ToolsChannelBusy(BusyError):
    """Another live monitor holds the tools channel."""

    def __init__(self, pid: int) -> None:
        super().__init__(f"tools channel held by pid {pid}")
        self.pid = pid


class ToolsChannelUnavailable(UnavailableError):
    """The engine exports no tools channel (``tools_offset == 0``)."""


class EngineDied(UnavailableError):
    """The engine process exited or stopped refreshing its heartbeat."""


class CommandTimeout(UnavailableError):
    """No response arrived for a command within its timeout."""


class RemoteError(LuckyMonitorError):
    """The engine answered a command with an error envelope."""


class GpuUnavailable(UnavailableError):
    """GPU observations cannot be used here: cupy is not installed, no CUDA device, or the handle does not open."""
