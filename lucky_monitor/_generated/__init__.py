"""FlatBuffers code generated from schema/hazel_rpc.fbs by scripts/gen_flatbuffers.py.

Produced by flatc 25.12.19; do not edit. Only lucky_monitor.protocol.envelope
imports it; everything else uses lucky_monitor.protocol.messages."""
