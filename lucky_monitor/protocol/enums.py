"""The protocol's small closed vocabularies as IntEnums.

Theory of operation
-------------------
Several header fields (``mode``, ``gpu_obs_mode``, ``sim_mode``,
``engine_state``, ``image_format``) and the ``services_*`` bitmasks hold a
number from a short list that ``schema/LAYOUT.md`` defines. Each list lives
here once, as an :class:`~enum.IntEnum` whose values are the wire values and
whose :attr:`~_Vocabulary.label` is the name people see ("rgb", "realtime",
"closing", "Camera"). Everything else (header validation, the CLI, the
simulator, the tiler, the window) uses these enums instead of restating the
numbers or the names.

A reader can meet a value outside the list (a newer engine, a corrupt
header). :meth:`~_Vocabulary.name_of` turns any integer into a label
without raising, ``"unknown (7)"`` for a value the list does not hold.

``SimMode`` is also the schema's ``SimulationMode`` enum (``uint``): its
member names are the schema's names in upper case.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Self

__all__ = [
    "EngineState",
    "GpuObsMode",
    "ImageFormat",
    "Mode",
    "Service",
    "SimMode",
]


class _Vocabulary(IntEnum):
    """An IntEnum whose members have a user-facing label (lowercase name by default)."""

    @property
    def label(self) -> str:
        """The name shown to people and printed by the CLI."""
        return self.name.lower()

    @classmethod
    def get(cls, value: object) -> Self | None:
        """The member whose value is ``value``, or ``None`` (never raises).

        Parameters
        ----------
        value
            Any object; only an ``int`` (not a ``bool``) equal to a member's
            value finds that member.
        """
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        try:
            return cls(value)
        except ValueError:
            return None

    @classmethod
    def name_of(cls, value: int) -> str:
        """Label of ``value``, or ``"unknown (N)"`` for a value outside the list.

        Examples
        --------
        >>> EngineState.name_of(3)
        'closing'
        >>> EngineState.name_of(7)
        'unknown (7)'
        """
        member = cls.get(value)
        return member.label if member is not None else f"unknown ({value})"

    @classmethod
    def from_label(cls, label: str) -> Self:
        """The member whose :attr:`label` is ``label``.

        Raises
        ------
        ValueError
            ``label`` is not one of :meth:`labels`; the message lists them.
        """
        for member in cls:
            if member.label == label:
                return member
        raise ValueError(f"{cls.__name__}: {label!r}, expected one of {', '.join(cls.labels())}")

    @classmethod
    def labels(cls) -> tuple[str, ...]:
        """Every label, in value order."""
        return tuple(m.label for m in sorted(cls))

    @classmethod
    def describe(cls) -> str:
        """``"0 realtime, 1 deterministic, 2 fast"``: values and labels, for messages."""
        return ", ".join(f"{int(m)} {m.label}" for m in sorted(cls))

    @classmethod
    def max_value(cls) -> int:
        """The largest value in the list (for "must be 0..N" messages)."""
        return max(int(m) for m in cls)


class Mode(_Vocabulary):
    """Header ``mode`` (u8): what the trainer side is doing."""

    TRAINING = 0
    INFERENCE = 1


class GpuObsMode(_Vocabulary):
    """Header ``gpu_obs_mode`` (u8): how GPU observations are shared."""

    CPU = 0
    CUDA_IPC = 1
    VULKAN_EXTERNAL = 2


class SimMode(_Vocabulary):
    """Header ``sim_mode`` (u32) and the schema's ``SimulationMode`` enum."""

    REALTIME = 0
    DETERMINISTIC = 1
    FAST = 2


class EngineState(_Vocabulary):
    """Header ``engine_state`` (u32): the engine's lifecycle."""

    INITIALISING = 0
    RUNNING = 1
    PAUSED = 2
    CLOSING = 3


_SERVICE_LABELS = ("Agent", "MuJoCo", "MujocoScene", "Telemetry", "Scene", "Camera", "Viewport", "Debug")


class Service(_Vocabulary):
    """Bit index of each service in the ``services_available``/``services_enabled`` masks."""

    AGENT = 0
    MUJOCO = 1
    MUJOCO_SCENE = 2
    TELEMETRY = 3
    SCENE = 4
    CAMERA = 5
    VIEWPORT = 6
    DEBUG = 7

    @property
    def label(self) -> str:
        """The service's name as the spec writes it (``"MuJoCo"``, ``"MujocoScene"``)."""
        return _SERVICE_LABELS[self.value]

    @property
    def bit(self) -> int:
        """The service's bit in a ``services_*`` mask (``1 << value``)."""
        return 1 << self.value

    @classmethod
    def all_mask(cls) -> int:
        """The mask with every known service's bit set."""
        mask = 0
        for s in cls:
            mask |= s.bit
        return mask

    @classmethod
    def in_mask(cls, mask: int) -> list[Service]:
        """The services whose bits are set in ``mask``, by bit order (unknown bits ignored)."""
        return [s for s in cls if mask & s.bit]

    @classmethod
    def names_in(cls, mask: int) -> list[str]:
        """Labels of the services whose bits are set in ``mask``, by bit order."""
        return [s.label for s in cls.in_mask(mask)]


class ImageFormat(_Vocabulary):
    """Header ``image_format`` (u32): the channel order of the image region.

    ``AUTO`` means "by channel count": 1 gray, 3 rgb, 4 rgba.
    """

    AUTO = 0
    RGB = 1
    BGR = 2
    RGBA = 3
    BGRA = 4
    GRAY = 5

    @property
    def channels(self) -> int | None:
        """Channels per pixel this format needs; ``None`` for ``AUTO`` (any of 1, 3, 4)."""
        return _FORMAT_CHANNELS[self.value]

    @property
    def has_alpha(self) -> bool:
        """The format carries an alpha channel (``rgba``, ``bgra``)."""
        return self in (ImageFormat.RGBA, ImageFormat.BGRA)

    @property
    def blue_first(self) -> bool:
        """The colour channels are stored blue first (``bgr``, ``bgra``)."""
        return self in (ImageFormat.BGR, ImageFormat.BGRA)

    @classmethod
    def for_channels(cls, channels: int) -> ImageFormat | None:
        """What ``AUTO`` means for ``channels``: gray, rgb or rgba; ``None`` for another count."""
        return _AUTO.get(channels)

    @classmethod
    def resolve(cls, fmt: int, channels: int) -> ImageFormat | None:
        """The concrete format of images with ``channels`` channels declared as ``fmt``.

        Parameters
        ----------
        fmt
            A raw ``image_format`` value or an :class:`ImageFormat`.
        channels
            ``image_channels``.

        Returns
        -------
        ImageFormat or None
            Never ``AUTO``. ``None`` when ``fmt`` is not a known format, when
            ``AUTO`` meets a channel count other than 1, 3 or 4, or when a
            concrete format needs another channel count than ``channels``.
        """
        member = cls.get(fmt)
        if member is None:
            return None
        if member is ImageFormat.AUTO:
            return cls.for_channels(channels)
        return member if member.channels == channels else None


_FORMAT_CHANNELS: dict[int, int | None] = {0: None, 1: 3, 2: 3, 3: 4, 4: 4, 5: 1}
_AUTO: dict[int, ImageFormat] = {1: ImageFormat.GRAY, 3: ImageFormat.RGB, 4: ImageFormat.RGBA}
