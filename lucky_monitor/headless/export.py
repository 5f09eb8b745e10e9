"""``lucky-monitor export``: Prometheus metrics of every live segment on this host.

Theory of operation
-------------------
A :class:`~lucky_monitor.core.fleet.Fleet` follows the segments read-only
(those named with ``--shm``, else every live one, picked up within a second
of appearing) and is stepped at ``--poll-hz`` on the main thread. A
prometheus-client HTTP server on another thread answers ``/metrics``: its one
collector turns the fleet's latest tuple of
:class:`~lucky_monitor.core.fleet.SegmentStats` into metric families at
scrape time, so a scrape reads one consistent set and never touches a
segment. The server listens on 127.0.0.1 unless told otherwise.

Every metric is defined in :data:`METRICS`, the one place to add one: its
name, help, type, and a function from a segment's stats to its samples (a
value, or labelled values for a metric with labels of its own). Every sample
carries ``segment`` and ``host``. A value not known now (a rate before it can
be measured, a turn share without a trainer) is left out, never shown as 0.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import ipaddress
import math
import re
import socket
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.argtypes import name_prefix, plain_float
from ..core.fleet import Fleet, SegmentStats
from ..core.pacing import paced
from ..core.session import validate_name
from ..protocol.errors import BusyError, UsageError
from ._common import require

__all__ = ["METRICS", "MetricDef", "add_export_arguments", "parse_listen", "run_export", "samples"]

#: A metric's samples for one segment: ``(extra labels, value)`` pairs (no extra labels: ``{}``).
Samples = list[tuple[dict[str, str], float]]


@dataclass(frozen=True)
class MetricDef:
    """One exported metric.

    ``kind`` is ``"gauge"`` or ``"counter"`` (a counter's name ends in
    ``_total``); ``labels`` are its labels beyond ``segment`` and ``host``;
    ``read`` gives its samples for one segment's stats (an empty list: not
    known now).
    """

    name: str
    help: str
    kind: str
    read: Callable[[SegmentStats], Samples]
    labels: tuple[str, ...] = ()


def _value(get: Callable[[SegmentStats], float | int | bool | None]) -> Callable[[SegmentStats], Samples]:
    def read(s: SegmentStats) -> Samples:
        v = get(s)
        return [] if v is None or (isinstance(v, float) and not math.isfinite(v)) else [({}, float(v))]

    return read


#: Every metric ``export`` serves: the one place they are defined.
METRICS: tuple[MetricDef, ...] = (
    MetricDef("lucky_frame_seq", "frame_seq: frames the engine has published", "gauge", _value(lambda s: s.frame_seq)),
    MetricDef(
        "lucky_frames_per_second", "frames published per second, over the last second", "gauge",
        _value(lambda s: s.frames_per_s),
    ),
    MetricDef(
        "lucky_images_per_second", "image batches published per second (image_seq / 2), over the last second",
        "gauge", _value(lambda s: s.images_per_s),
    ),
    MetricDef("lucky_reward_mean", "mean reward over envs, newest frame", "gauge", _value(lambda s: s.reward_mean)),
    MetricDef("lucky_reward_min", "lowest reward over envs, newest frame", "gauge", _value(lambda s: s.reward_min)),
    MetricDef("lucky_reward_max", "highest reward over envs, newest frame", "gauge", _value(lambda s: s.reward_max)),
    MetricDef(
        "lucky_done_fraction", "dones per env per frame seen, over the last second", "gauge",
        _value(lambda s: s.done_fraction),
    ),
    MetricDef(
        "lucky_engine_alive", "1 while the engine process lives (server_pid), else 0", "gauge",
        _value(lambda s: s.engine_alive),
    ),
    MetricDef(
        "lucky_trainer_alive", "1 while a trainer is attached and its process lives (client_pid), else 0", "gauge",
        _value(lambda s: s.trainer_alive if s.attached else None),
    ),
    MetricDef(
        "lucky_stalled_seconds", "seconds since the engine's heartbeat last moved, while stalled (over 2 s); else 0",
        "gauge", _value(lambda s: s.stalled_s if s.attached else None),
    ),
    MetricDef(
        "lucky_torn_images_total", "image copies torn by the engine writing (seqlock retries), this attach", "counter",
        _value(lambda s: s.torn_images if s.attached else None),
    ),
    MetricDef(
        "lucky_frames_skipped_total",
        "frames published that the exporter did not read, this attach (lucky_done_fraction is over those it read)",
        "counter", _value(lambda s: s.frames_skipped if s.attached else None),
    ),
    MetricDef(
        "lucky_turn_engine_share", "share of lock-step polls in the engine's turn (no trainer: absent)", "gauge",
        _value(lambda s: s.engine_turn_share),
    ),
)  # fmt: skip


def samples(stats: Iterable[SegmentStats], host: str) -> Iterator[tuple[MetricDef, dict[str, str], float]]:
    """Every sample of :data:`METRICS` for ``stats``, labelled with ``segment`` and ``host``."""
    stats = tuple(stats)
    for m in METRICS:
        for s in stats:
            for extra, v in m.read(s):
                yield m, {"segment": s.segment, "host": host, **extra}, v


class _Collector:
    """A prometheus-client collector over the fleet's latest stats (read at scrape time)."""

    def __init__(self, fleet: Fleet, host: str) -> None:
        self.fleet = fleet
        self.host = host

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = self.fleet.stats  # one tuple, replaced whole by the stepping thread
        families: dict[str, Any] = {}
        for m in METRICS:
            name = m.name.removesuffix("_total") if m.kind == "counter" else m.name
            cls = CounterMetricFamily if m.kind == "counter" else GaugeMetricFamily
            families[m.name] = cls(name, m.help, labels=["segment", "host", *m.labels])
        for m, values, v in samples(stats, self.host):
            families[m.name].add_metric([values[k] for k in ("segment", "host", *m.labels)], v)
        yield from families.values()

    def describe(self) -> Iterator[Any]:
        return iter(())


def parse_listen(text: str) -> tuple[str, int]:
    """``[HOST:]PORT`` (``[::1]:9100`` for IPv6) to ``(host, port)``; the host defaults to 127.0.0.1.

    Raises
    ------
    UsageError
        Not a port 0..65535, or an empty host.
    """
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise UsageError(f"--listen {text!r}: the host before ':' is empty (give HOST:PORT or PORT)")
    if not re.fullmatch(r"[0-9]{1,5}", port.strip()):  # int() also took "1_0000", "+5" and fullwidth digits
        raise UsageError(f"--listen {text!r}: {port!r} is not a port number")
    p = int(port)
    if not 0 <= p <= 65535:
        raise UsageError(f"--listen {text!r}: port {p} is not in 0..65535")
    return host, p


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    """The ``export`` subcommand's options."""
    p.add_argument(
        "--shm",
        metavar="NAME",
        action="append",
        default=None,
        help="follow this segment (repeat for more; default: every live segment, found as they appear)",
    )
    p.add_argument(
        "--listen",
        metavar="[HOST:]PORT",
        required=True,
        help="where to serve /metrics (host default 127.0.0.1; 0.0.0.0 exposes it to the network)",
    )
    p.add_argument("--prefix", type=name_prefix, default="LuckyEngine_", help="name prefix of discovered segments")
    p.add_argument("--host-label", default=None, help="value of the host label (default: this machine's name)")
    p.add_argument("--poll-hz", type=plain_float, default=30.0, help="polls of each segment per second (default 30)")
    p.add_argument(
        "--allow-other-user", action="store_true", help="follow segments owned by another user (skipped by default)"
    )
    p.add_argument("--seconds", type=plain_float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")


def _serve(addr: tuple[str, int], registry: Any) -> tuple[Any, int]:
    from prometheus_client import start_http_server

    host, port = addr
    try:
        ipaddress.ip_address(host)
    except ValueError:
        try:
            socket.getaddrinfo(host, None)
        except OSError:
            raise UsageError(f"--listen: cannot resolve host {host!r}") from None
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise BusyError(f"--listen {host}:{port}: the address is in use") from None
        raise UsageError(f"--listen {host}:{port}: {exc.strerror or exc}") from None
    return server, int(server.server_address[1])


def run_export(args: argparse.Namespace) -> int:
    """``export``: serve /metrics until Ctrl-C, SIGTERM or ``--seconds``; exit 0."""
    host, port = parse_listen(args.listen)
    names: Sequence[str] = args.shm or ()
    for n in names:
        validate_name(n)
    if not (0.1 <= args.poll_hz <= 240):  # also refuses NaN
        raise UsageError(f"--poll-hz {args.poll_hz:g}: must be 0.1 to 240")
    if args.seconds is not None and not (args.seconds > 0 and math.isfinite(args.seconds)):
        raise UsageError(f"--seconds {args.seconds:g}: must be a positive number of seconds")
    require("prometheus_client", "export")
    from prometheus_client import CollectorRegistry

    fleet = Fleet(names, prefix=args.prefix, allow_other_user=args.allow_other_user, poll_hz=args.poll_hz)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(fleet, args.host_label or socket.gethostname()))
    server, bound = _serve((host, port), registry)
    shown = f"[{host}]" if ":" in host else host
    if not args.quiet:
        what = ", ".join(names) if names else f"every live {args.prefix}* segment"
        print(f"serving http://{shown}:{bound}/metrics for {what}", flush=True)
    said: dict[str, tuple[str, str | None]] = {}
    try:
        for _ in paced(args.poll_hz, args.seconds):
            stats = fleet.step()
            if not args.quiet:  # each segment's state as it changes (a named one not there yet: "searching")
                for st in stats:
                    if said.get(st.segment) != (st.state, st.reason):
                        said[st.segment] = (st.state, st.reason)
                        print(f"{st.segment}: {st.state}{f' ({st.reason})' if st.reason else ''}", file=sys.stderr)
    finally:
        with contextlib.suppress(Exception):
            server.shutdown()
            server.server_close()
        fleet.close()
    if not args.quiet:
        print("stopped", file=sys.stderr)
    return 0
