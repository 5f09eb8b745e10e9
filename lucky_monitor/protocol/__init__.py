"""Sans-IO LRBC v1 protocol: header layout and validation, command rings,
FlatBuffers envelopes. No mmap, no sockets, no Qt: functions over buffers."""

from .enums import EngineState, GpuObsMode, ImageFormat, Mode, Service, SimMode

__all__ = ["EngineState", "GpuObsMode", "ImageFormat", "Mode", "Service", "SimMode"]
