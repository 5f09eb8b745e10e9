"""Sans-IO LRBC v1 protocol: header layout and validation, command rings,
FlatBuffers envelopes. No mmap, no sockets, no Qt: functions over buffers."""
