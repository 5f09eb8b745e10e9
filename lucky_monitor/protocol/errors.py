"""Typed errors of lucky-monitor.

Every failure that bad input can cause is one of these. The CLI prints
``str(error)`` on one line and exits non-zero; the GUI shows it as the
connection state. Nothing here imports Qt.
"""

from __future__ import annotations


class LuckyMonitorError(Exception):
    """Root of every error lucky-monitor raises on purpose."""

    #: process exit status the CLI uses for this error class
    exit_code = 1


class HeaderError(LuckyMonitorError):
    """The segment header fails a validation rule.

    Attributes
    ----------
    field : str
        The header field (spec name) the rule is about, e.g. ``"obs_offset"``.
    """

    exit_code = 3

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


class TransportError(LuckyMonitorError):
    """The segment cannot be opened, mapped or kept mapped."""

    exit_code = 2


class SegmentNotFound(TransportError):
    """No segment with that name exists."""


class SegmentGone(TransportError):
    """The segment was unlinked, shrunk or replaced while attached."""


class ToolsChannelBusy(LuckyMonitorError):
    """Another live monitor holds the tools channel."""

    def __init__(self, pid: int) -> None:
        super().__init__(f"tools channel held by pid {pid}")
        self.pid = pid


class ToolsChannelUnavailable(LuckyMonitorError):
    """The engine exports no tools channel (``tools_offset == 0``)."""


class EngineDied(LuckyMonitorError):
    """The engine process exited or stopped refreshing its heartbeat."""


class CommandTimeout(LuckyMonitorError):
    """No response arrived for a command within its timeout."""


class RemoteError(LuckyMonitorError):
    """The engine answered a command with an error envelope."""
