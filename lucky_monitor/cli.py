"""The ``lucky-monitor`` command line.

Every subcommand is one function decorated with :func:`subcommand`; the
decorator registers it and (optionally) a function that adds its arguments.
Errors a user can cause (a missing segment, a bad name, a corrupt header, a
permission problem) print one line ``lucky-monitor: error: ...`` on stderr and
exit with the error's ``exit_code``; argparse usage errors exit 2. The codes
are :data:`lucky_monitor.protocol.errors.EXIT_CODES`, the README's "Exit
codes" table. No traceback is ever printed for bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import sys
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import __version__
from .core.argtypes import in_range, name_prefix, plain_float, plain_int, plain_number, seconds_between
from .core.conformance import FAIL, NA, PASS, SKIPPED, heartbeat_age, run_check
from .core.conformance import RuleResult as RuleResult  # re-exported: run_check's result type
from .core.pacing import DEFAULT_YIELD_US
from .core.text import ago_text, bytes_text, ms_text, safe_text
from .protocol import header as hdr
from .protocol.enums import EngineState, GpuObsMode, Mode, Service, SimMode
from .protocol.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    HeaderError,
    InvalidSegmentName,
    LuckyMonitorError,
    SegmentNotFound,
    UnavailableError,
    UsageError,
)
from .protocol.header import HEADER_SIZE, Header, Region

PROG = "lucky-monitor"

Runner = Callable[[argparse.Namespace], int]
Configure = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class _Command:
    name: str
    help: str
    configure: Configure | None
    run: Runner


_COMMANDS: list[_Command] = []


def subcommand(name: str, help: str, configure: Configure | None = None) -> Callable[[Runner], Runner]:
    """Register the decorated ``run(args) -> exit status`` as subcommand ``name``.

    Parameters
    ----------
    name
        The subcommand word.
    help
        One-line description shown by ``lucky-monitor --help``.
    configure
        Called with the subcommand's parser to add its arguments.
    """

    def deco(run: Runner) -> Runner:
        _COMMANDS.append(_Command(name, help, configure, run))
        return run

    return deco


class _Parser(argparse.ArgumentParser):
    """argparse with the command line's one-line errors: ``lucky-monitor: error: check: ...`` and exit 2.

    argparse's own error prints the whole usage block before the message; here the message
    names the subcommand and where its usage is (``--help``). Subcommand parsers are made
    of this class too (``add_subparsers`` uses the parent's class).
    """

    def error(self, message: str) -> typing.NoReturn:
        sub = self.prog[len(PROG) :].strip() if self.prog.startswith(PROG) else self.prog
        _error(f"{sub + ': ' if sub else ''}{message} (usage: {self.prog} --help)")
        raise SystemExit(EXIT_USAGE)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """As argparse's, with arguments left over blamed on the subcommand that was given them.

        argparse reports them from the top-level parser: ``info N --json extra``
        said ``unrecognized arguments: extra (usage: lucky-monitor --help)``.
        """
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            prog = _chosen_prog(self, ns)
            sub = prog[len(PROG) :].strip()
            _error(f"{sub + ': ' if sub else ''}unrecognized arguments: {' '.join(extras)} (usage: {prog} --help)")
            raise SystemExit(EXIT_USAGE)
        return ns


def _failed_segment(args: argparse.Namespace, exc: LuckyMonitorError) -> str:
    """``"NAME: "`` before a header failure of the segment a command was pointed at, else nothing.

    The header's rule alone (``magic: 0x06EC88FE, expected …``) did not say
    which segment failed it.
    """
    if not isinstance(exc, HeaderError) or getattr(args, "command", None) == "sim":
        return ""
    name = getattr(args, "name", None) or getattr(args, "shm", None)
    return f"{name}: " if isinstance(name, str) and name and not str(exc).startswith(f"{name}:") else ""


def _left_by_a_dead_engine(args: argparse.Namespace, exc: LuckyMonitorError) -> UnavailableError | None:
    """A header failure of a file a dead engine left, told as the engine's exit (as the window tells it).

    A command pointed at the file an engine died of (truncated under it, or
    its header overwritten after) said ``segment_size: header claims … mapped``
    and exited 3, where the window said *engine exited* and an intact dead
    engine's segment gives exit 5. The file is the dead engine's when its
    first bytes still hold the LRBC magic and a ``server_pid`` that is gone;
    with no magic nothing in it can be trusted, and the header's failure (3)
    stands. ``check`` reports the header as it finds it (its header rules, exit 3).
    """
    command = getattr(args, "command", None)
    if not isinstance(exc, HeaderError) or command in ("check", "sim"):
        return None
    name = getattr(args, "name", None) or getattr(args, "shm", None)
    if not isinstance(name, str) or not name:
        return None
    from .transport.discovery import pid_alive
    from .transport.shm import peek_header

    try:
        h = Header.unpack(peek_header(name)[0])  # unchecked: the check is what failed
    except LuckyMonitorError:
        return None  # gone, unreadable, or too short to hold a header
    if h.magic != hdr.MAGIC or h.server_pid <= 0 or pid_alive(h.server_pid):
        return None
    return UnavailableError(
        f"{name}: engine exited (engine pid {h.server_pid} is gone; the segment it left fails the header check: {exc})"
    )


def _chosen_prog(parser: argparse.ArgumentParser, ns: Any) -> str:
    """The ``prog`` of the innermost subcommand ``ns`` was parsed by (``lucky-monitor draw NAME line``)."""
    prog = parser.prog
    while True:
        action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(ns, action.dest, None) if action is not None else None
        if action is None or not isinstance(chosen, str) or chosen not in action.choices:
            return prog
        parser = action.choices[chosen]
        prog = parser.prog


def build_parser() -> argparse.ArgumentParser:
    """The full parser: global options plus every registered subcommand."""
    parser = _Parser(
        prog=PROG,
        description="Monitor LuckyEngine runs over the LRBC shared-memory transport.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    add_window_arguments(parser)
    add_allow_other_user_argument(parser)
    add_remote_argument(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in _COMMANDS:
        sp = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if cmd.configure is not None:
            cmd.configure(sp)
        sp.set_defaults(_run=cmd.run)
    return parser


def add_window_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the monitor window (``lucky-monitor`` with no subcommand, and ``demo``)."""
    p.add_argument(
        "--shm", metavar="NAME", help="segment to attach to (default: $LUCKY_SHM_NAME, else the newest live segment)"
    )
    p.add_argument("--screenshot", metavar="FILE", help="save a PNG of the whole window after --quit-after seconds")
    p.add_argument(
        "--quit-after",
        metavar="SECONDS",
        type=_window_seconds,
        help="close the window after this many seconds (exit 0)",
    )
    p.add_argument(
        "--columns",
        type=_columns,
        default=None,
        help="image grid columns (default: auto, the count that shows the tiles largest in the view)",
    )
    p.add_argument(
        "--cpu-budget",
        metavar="PCT",
        type=_budget_pct,
        default=10.0,
        help="share of one core the window may use; it paints images, plots and panels less often "
        "to stay under it, never reading less (default 10; 0: no limit)",
    )
    p.add_argument(
        "--nice",
        metavar="N",
        type=_nice_value,
        default=10,
        help="run the window at this Unix nice value, 0-19 (default 10): on a machine the engine and "
        "trainer keep busy, they get the CPU first and the window paints less; 0 leaves it as started",
    )
    p.add_argument(
        "--yield-us",
        metavar="US",
        type=_yield_us,
        default=DEFAULT_YIELD_US,
        help="offer the CPU core to other processes after every US microseconds of the window's work "
        "while the machine has no idle core (default %(default)g): an engine and trainer that spin "
        "for their turns never wait on a burst of the window's; 0: never",
    )
    p.add_argument(
        "--stats-json",
        metavar="FILE",
        help="at exit, write what the window did (ticks, frames and images published/seen/presented, "
        "tick time, CPU) to FILE as JSON",
    )


def add_allow_other_user_argument(p: argparse.ArgumentParser) -> None:
    """``--allow-other-user``: attach to a segment another user owns (refused by default)."""
    p.add_argument(
        "--allow-other-user",
        action="store_true",
        help="attach to a segment owned by another user (refused by default: its text and values "
        "come from that user, and a tools claim (the window, draw, check --live) writes into that user's engine)",
    )


def _budget_pct(text: str) -> float:
    return in_range(text, float, 0, 1600, "a percentage of one core, 0 (no limit) to 1600")


def _yield_us(text: str) -> float:
    return in_range(text, float, 0, 1_000_000, "microseconds, 0 (never) to 1000000")


def _nice_value(text: str) -> int:
    return int(in_range(text, int, 0, 19, "a nice value from 0 (as started) to 19 (lowest)"))


def _positive_float(text: str) -> float:
    try:
        v = plain_number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return v


def _seconds_or_zero(text: str) -> float:
    return in_range(text, float, 0, 3600, "seconds, 0 to 3600")


def _step_count(text: str) -> int:
    return int(in_range(text, int, 0, 2**63 - 1, "0 or more steps"))


def _columns(text: str) -> int:
    return int(in_range(text, int, 1, hdr.MAX_ENVS, f"a whole number of columns from 1 to {hdr.MAX_ENVS}"))


def _window_seconds(text: str) -> float:
    # Qt's timers count milliseconds in 32 bits: about 24.8 days at most.
    v = _positive_float(text)
    if v > 2_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} must be at most 2000000 seconds (about 23 days)")
    return v


def _no_subcommand(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``lucky-monitor`` without a subcommand opens the monitor window."""
    if args.screenshot and not args.quit_after:
        raise UsageError("--screenshot needs --quit-after SECONDS")
    if getattr(args, "remote", None) is not None:
        from .headless.remote import run_remote  # the window runs in a child, inside the VNC server

        return run_remote(args)
    from .ui.app import run_window  # Qt is imported only here

    return run_window(args)


_VECTOR_OPTIONS = {"--from", "--to", "--origin", "--direction", "--vel", "--color"}
_NUMBERS = re.compile(r"^-[0-9.][0-9.eE+-]*(,[-+]?[0-9.][0-9.eE+-]*)*$")


def _join_vector_values(argv: list[str]) -> list[str]:
    """Let ``--from -1,0,0`` mean ``--from=-1,0,0`` (argparse would take -1,0,0 for an option)."""
    out: list[str] = []
    it = iter(range(len(argv)))
    for i in it:
        tok = argv[i]
        if tok in _VECTOR_OPTIONS and i + 1 < len(argv) and _NUMBERS.match(argv[i + 1]):
            out.append(f"{tok}={argv[i + 1]}")
            next(it, None)
        else:
            out.append(tok)
    return out


#: The longest error line printed (an engine's error text can be any length).
_ERROR_LIMIT = 1000


def _error(message: str) -> None:
    text = safe_text(" ".join(str(message)[: _ERROR_LIMIT * 4].split()), _ERROR_LIMIT)
    print(f"{PROG}: error: {text}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the process exit status.

    Parameters
    ----------
    argv
        Arguments without the program name; ``None`` means ``sys.argv[1:]``.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(_join_vector_values(sys.argv[1:] if argv is None else list(argv)))
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_USAGE)
    run: Runner | None = getattr(args, "_run", None)
    try:
        for option in ("shm", "name"):  # an empty name given is a mistake, not "the default segment"
            if getattr(args, option, None) == "":
                given = "--shm" if option == "shm" else "--name" if getattr(args, "command", None) == "sim" else "NAME"
                raise UsageError(f"invalid segment name '' ({given}): it is empty")
        if run is None:
            return _no_subcommand(args, parser)
        if getattr(args, "command", None) in _NAMED_BY_SHM and args.name is None and args.shm:
            args.name = args.shm  # `lucky-monitor --shm NAME info`: the window's option, meant for the command
        return int(run(args) or 0)
    except LuckyMonitorError as exc:
        if isinstance(exc, UsageError | InvalidSegmentName):  # a name given that no segment can have: usage
            # As argparse's own: the subcommand, the message, where its usage is (a bad draw vector too:
            # "--from: expected 3 comma-separated numbers" had said neither).
            usage = _chosen_prog(parser, args)
            sub = usage[len(PROG) :].strip()
            _error(f"{sub + ': ' if sub else ''}{exc} (usage: {usage} --help)")
        else:
            left = _left_by_a_dead_engine(args, exc)
            if left is not None:
                _error(str(left))
                return left.exit_code
            _error(f"{_failed_segment(args, exc)}{exc}")
        return exc.exit_code
    except BrokenPipeError:
        # stdout closed early (e.g. piped into `head`): not an error worth a message.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # quiet flush at exit
        return EXIT_OK
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else None
        _error(f"{where}: {exc.strerror or exc}" if where else exc.strerror or str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        # Ctrl-C before the window (or sim, train, demo) installed its own handler, e.g. while
        # Qt loads: for those the documented end of a run (exit 0); for the others 130.
        if run is None or getattr(run, "__name__", "") in ("_cmd_sim", "_cmd_train", "_cmd_demo"):
            return EXIT_OK
        return EXIT_INTERRUPTED


# ----------------------------------------------------------------------------- helpers


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2))


def _table(rows: list[tuple[str, str]], indent: str = "") -> str:
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{indent}{k.ljust(width)}  {v}" for k, v in rows)


_NAME_HELP = "segment name, e.g. LuckyEngine_1234 (default: $LUCKY_SHM_NAME, else the newest live one)"


def _name_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", metavar="NAME", help=_NAME_HELP)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_allow_other_user_argument(p)


#: Subcommands whose optional NAME a ``--shm NAME`` given before them stands for.
_NAMED_BY_SHM = frozenset({"info", "check", "snapshot", "record", "watch"})


def _resolve(name: str | None, *, allow_other_user: bool = False) -> str:
    """The segment a command's NAME names; without one ``$LUCKY_SHM_NAME``, else the newest live segment."""
    if name is not None:
        return name
    from .transport.discovery import DEFAULT_PREFIX, newest_live
    from .transport.shm import validate_name

    from_env = os.environ.get("LUCKY_SHM_NAME")
    if from_env:
        try:
            validate_name(from_env)
        except InvalidSegmentName as exc:
            raise UsageError(f"$LUCKY_SHM_NAME: {exc}") from None
        return from_env

    info = newest_live(allow_other_user=allow_other_user)
    if info is None:
        raise SegmentNotFound(f"no live {DEFAULT_PREFIX}* segment; give a NAME")
    return info.name


def _turn(client_pid: int, gap: int) -> str:
    if client_pid == 0:
        return "free-run"
    return {0: "engine", 1: "trainer"}.get(gap, "violation")


def _region_dict(r: Region) -> dict[str, Any]:
    return {"name": r.name.removesuffix("_offset"), "field": r.name, "offset": r.offset, "size": r.size, "end": r.end}


# ----------------------------------------------------------------------------- list


def _list_args(p: argparse.ArgumentParser) -> None:
    from .transport.discovery import DEFAULT_PREFIX

    p.add_argument(
        "--prefix",
        type=name_prefix,
        default=DEFAULT_PREFIX,
        help=f"name prefix to look for (default {DEFAULT_PREFIX}; '' lists every segment)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


@subcommand("list", "list segments, newest first", _list_args)
def _cmd_list(args: argparse.Namespace) -> int:
    from .transport.discovery import list_segments

    infos = list_segments(args.prefix)
    if args.json:
        _print_json([dataclasses.asdict(i) for i in infos])
        return 0
    if not infos:
        print(f"no {args.prefix}* segments")
        return 0
    now = time.time()
    head = ("NAME", "SERVER", "CLIENT", "ENVS", "SIZE", "STARTED", "STATUS")  # the engine session's start
    rows = [head]
    for i in infos:
        if i.error is not None:
            # (a name that fails the check may hold anything a file name can: escaped, never sent to the terminal)
            rows.append(
                (
                    safe_text(i.name),
                    "-",
                    "-",
                    "-",
                    bytes_text(i.size),
                    ago_text(now, i.mtime),
                    f"invalid: {safe_text(i.error)}",
                )
            )
            continue
        server = f"{i.server_pid} {'alive' if i.server_alive else 'dead'}"
        client = "none" if i.client_pid == 0 else f"{i.client_pid} {'alive' if i.client_alive else 'dead'}"
        if i.engine_live:
            status = "live"
        elif not i.server_alive:
            status = "stale (engine gone)"
        elif i.heartbeat_age_s is None:
            status = "stale (no heartbeat)"
        else:
            status = f"stale (heartbeat {i.heartbeat_age_s:.0f} s old)"
        rows.append(
            (i.name, server, client, str(i.num_envs), bytes_text(i.size), ago_text(now, i.started or 0.0), status)
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(head) - 1)]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1])
    return 0


# ----------------------------------------------------------------------------- info


def _derived(seg: Any) -> dict[str, Any]:
    from .transport.discovery import pid_alive
    from .transport.tools import tools_owner

    h: Header = seg.header
    gap = h.frame_seq - h.action_seq
    owner = tools_owner(seg) if h.tools_offset else None
    rings = {
        k: {
            "offset": p.offset,
            "capacity": p.capacity,
            "write_pos": p.write_pos,
            "read_pos": p.read_pos,
            "used": p.used,
        }
        for k, p in seg.ring_positions().items()
    }
    return {
        "path": seg.path,
        "file_size": seg.size,
        "server_alive": pid_alive(h.server_pid),
        "client_alive": pid_alive(h.client_pid) if h.client_pid else None,
        "turn": _turn(h.client_pid, gap),
        "frame_gap": gap,
        "mode_name": _label(Mode, h.mode),
        "sim_mode_name": _label(SimMode, h.sim_mode),
        "engine_state_name": _label(EngineState, h.engine_state),
        "gpu_obs_mode_name": _label(GpuObsMode, h.gpu_obs_mode),
        "services_available_names": Service.names_in(h.services_available),
        "services_enabled_names": Service.names_in(h.services_enabled),
        "pixel_format": h.pixel_format if h.has_images else None,
        "bottom_up": h.bottom_up if h.has_images else None,
        "image_bytes_per_env": h.image_bytes_per_env if h.has_images else 0,
        "heartbeat_age_s": heartbeat_age(h.heartbeat_ns),
        "session_id_hex": f"{h.session_id:016x}",
        "reserved_nonzero": [list(r) for r in hdr.is_zero_reserved(seg.pread(0, HEADER_SIZE))],
        "tools_owner_pid": owner,
        "tools_owner_alive": (pid_alive(owner) if owner else None),
        "regions": [_region_dict(r) for r in sorted(h.regions(), key=lambda r: r.offset)],
        "rings": rings,
    }


#: Header fields whose value is one of a protocol vocabulary's members.
_VOCABULARY: dict[str, type[Mode | SimMode | EngineState | GpuObsMode]] = {
    "mode": Mode,
    "sim_mode": SimMode,
    "engine_state": EngineState,
    "gpu_obs_mode": GpuObsMode,
}


def _label(vocab: type[Mode | SimMode | EngineState | GpuObsMode], value: int) -> str | None:
    """The member's label, ``None`` for a value outside the vocabulary."""
    member = vocab.get(value)
    return None if member is None else member.label


def _fmt_field(name: str, value: Any) -> str:
    if name == "magic":
        return f"0x{value:08X} ('LRBC')" if value == hdr.MAGIC else f"0x{value:08X}"
    if name == "session_id":
        return f"0x{value:016x}"
    if name == "gpu_obs_handle":
        return "(all zero)" if set(value) <= {"0"} else value
    if name in ("services_available", "services_enabled"):
        return f"0x{value:02x} {','.join(Service.names_in(value)) or '-'}"
    vocab = _VOCABULARY.get(name)
    if vocab is not None:
        return f"{value} ({_label(vocab, value) or '?'})"
    if name == "segment_size":
        return f"{value} ({bytes_text(value)})"
    return str(value)


@subcommand("info", "show every header field of a segment and what follows from them", _name_arg)
def _cmd_info(args: argparse.Namespace) -> int:
    from .transport.shm import Segment

    name = _resolve(args.name, allow_other_user=args.allow_other_user)
    with Segment.attach(name, allow_other_user=args.allow_other_user) as seg:
        fields = seg.header.to_dict()
        derived = _derived(seg)
    if args.json:
        _print_json({**fields, "derived": derived})
        return 0
    print(f"{name}  ({derived['path']}, {bytes_text(derived['file_size'])})")
    print("header:")
    print(_table([(k, _fmt_field(k, v)) for k, v in fields.items()], "  "))
    age = derived["heartbeat_age_s"]
    drows = [
        ("server", f"pid {fields['server_pid']} {'alive' if derived['server_alive'] else 'dead'}"),
        (
            "client",
            "none"
            if not fields["client_pid"]
            else f"pid {fields['client_pid']} {'alive' if derived['client_alive'] else 'dead'}",
        ),
        ("turn", f"{derived['turn']} (frame_seq - action_seq = {derived['frame_gap']})"),
        (
            "heartbeat age",
            "not measurable"
            if age is None
            else f"{age:.3f} s"
            if age >= 0
            else f"{-age:.3f} s in the future (not this machine's CLOCK_MONOTONIC)",
        ),
        (
            "pixel format",
            "no images"
            if derived["pixel_format"] is None
            else f"{derived['pixel_format']}{' bottom-up' if derived['bottom_up'] else ''}",
        ),
        ("services enabled", ", ".join(derived["services_enabled_names"]) or "-"),
        ("services available", ", ".join(derived["services_available_names"]) or "-"),
        (
            "tools owner",
            "no tools channel"
            if derived["tools_owner_pid"] is None
            else "free"
            if derived["tools_owner_pid"] == 0
            else f"pid {derived['tools_owner_pid']} {'alive' if derived['tools_owner_alive'] else 'dead'}",
        ),
        (
            "reserved bytes",
            "zero"
            if not derived["reserved_nonzero"]
            else "non-zero in " + ", ".join(f"{a}-{b}" for a, b in derived["reserved_nonzero"]),
        ),
    ]
    drows += [
        (f"region {r['name']}", f"[{r['offset']}, {r['end']})  {bytes_text(r['size'])}") for r in derived["regions"]
    ]
    drows += [
        (f"ring {k}", f"write_pos {v['write_pos']}  read_pos {v['read_pos']}  used {v['used']}/{v['capacity']}")
        for k, v in derived["rings"].items()
    ]
    print("derived:")
    print(_table(drows, "  "))
    return 0


# ----------------------------------------------------------------------------- check


def _check_args(p: argparse.ArgumentParser) -> None:
    p.epilog = (
        "exit status: 0 every rule passes; 1 a rule fails; 2 bad arguments; 5 the segment cannot be opened; "
        "3 the header is invalid (the failing rule is shown, later rules are skipped)"
    )
    _name_arg(p)
    p.add_argument(
        "--image-wait",
        type=_seconds_or_zero,
        default=0.25,
        metavar="SECONDS",
        help="how long image_seq is watched (default 0.25): odd throughout, or at 90 %% of the looks "
        "(an inverted seqlock), fails C23",
    )
    _live_check_args(p)


def _live_check_args(p: argparse.ArgumentParser) -> None:
    """``check --live``: the conformance probe (``core/probe.py``, ``schema/CONFORMANCE.md``)."""
    p.epilog = (p.epilog or "") + (
        "; with --live, 4 the tools channel is held by another monitor, 5 the engine exports no tools channel "
        "or went away"
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="also probe the running engine over the tools channel: requests, errors, services, "
        "and the timed invariants (changes only what it restores; see schema/CONFORMANCE.md)",
    )
    p.add_argument(
        "--seconds",
        type=seconds_between(0.5, 3600),
        default=None,  # 5: None tells "not given" from given (a check without --live refuses it)
        metavar="S",
        help="with --live: how long the timed invariants are sampled (default 5)",
    )
    p.add_argument(
        "--deadline",
        type=seconds_between(0.01, 600),
        default=None,  # 1
        metavar="SECONDS",
        help="with --live: how long each request may take to be answered (default 1)",
    )


def _cmd_check_live(args: argparse.Namespace, name: str, results: list[RuleResult]) -> int:
    from .core.probe import NA as LIVE_NA
    from .core.probe import budget_s, run_live_probe

    t0 = time.monotonic()
    live = run_live_probe(name, seconds=args.seconds, deadline_s=args.deadline, allow_other_user=args.allow_other_user)
    elapsed = time.monotonic() - t0
    # One vocabulary in the live report: pass, fail, na ("skipped" cannot happen on a valid header).
    rows: list[dict[str, Any]] = [
        {
            "id": ",".join(r.ids),
            "ids": list(r.ids),
            "rule": r.rule,
            "status": LIVE_NA if r.status in (NA, SKIPPED) else r.status,
            "detail": r.detail,
        }
        for r in [*results, *live]
    ]
    counts = {s: sum(r["status"] == s for r in rows) for s in (PASS, FAIL, LIVE_NA)}
    ok = counts[FAIL] == 0
    if args.json:
        _print_json(
            {
                "name": name,
                "live": True,
                "ok": ok,
                "seconds": args.seconds,
                "deadline_s": args.deadline,
                "budget_s": round(budget_s(args.seconds, args.deadline), 1),
                "elapsed_s": round(elapsed, 3),
                "counts": counts,
                "rules": rows,
            }
        )
    else:
        width = max(len(r["rule"]) for r in rows)
        id_width = max(len(r["id"]) for r in rows)
        print(f"check {name} --live ({elapsed:.1f} s of a {budget_s(args.seconds, args.deadline):.1f} s bound)")
        for r in rows:
            line = f"  {r['status'].upper():<5} {r['id'].ljust(id_width)}  {r['rule'].ljust(width)}  {r['detail']}"
            print(line.rstrip())
        print(f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[LIVE_NA]} n/a")
    return 0 if ok else 1


@subcommand("check", "check a segment against every conformance rule; exit 0 only if all pass", _check_args)
def _cmd_check(args: argparse.Namespace) -> int:
    if not args.live:
        given = [o for o in ("seconds", "deadline") if getattr(args, o) is not None]
        if given:
            raise UsageError(f"{' and '.join('--' + o for o in given)} set the live probe: add --live")
    args.seconds = 5.0 if args.seconds is None else args.seconds
    args.deadline = 1.0 if args.deadline is None else args.deadline
    name = _resolve(args.name, allow_other_user=args.allow_other_user)
    results, err = run_check(name, image_wait_s=max(0.0, args.image_wait), allow_other_user=args.allow_other_user)
    if args.live and err is None:
        return _cmd_check_live(args, name, results)
    counts = {s: sum(r.status == s for r in results) for s in (PASS, FAIL, SKIPPED, NA)}
    ok = err is None and counts[FAIL] == 0 and counts[SKIPPED] == 0
    if args.json:
        _print_json(
            {
                "name": name,
                "ok": ok,
                "error": None if err is None else str(err),
                "counts": counts,
                # "id" as the --live report writes it (C11,C12 for a rule of several items); "ids" the list
                "rules": [{"id": ",".join(r.ids), **dataclasses.asdict(r)} for r in results],
            }
        )
    else:
        width = max(len(r.rule) for r in results)
        id_width = max(len(" ".join(r.ids)) for r in results)
        print(f"check {name}")
        for r in results:
            ids = " ".join(r.ids).ljust(id_width)
            print(f"  {r.status.upper():<8} {r.rule.ljust(width)}  {ids}  {r.detail}".rstrip())
        print(f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIPPED]} skipped, {counts[NA]} n/a")
    if err is not None:
        _error(f"{_failed_segment(argparse.Namespace(command='check', name=name), err)}{err}")
        return err.exit_code
    return 0 if ok else 1


# ------------------------------------------------------------------ sim, train, demo, draw


@subcommand(
    "sim", "run the reference engine: create a segment, print its name, serve until Ctrl-C", lambda p: _sim_args(p)
)
def _cmd_sim(args: argparse.Namespace) -> int:
    from .sim.run import run_sim

    return run_sim(args)


def _sim_args(p: argparse.ArgumentParser) -> None:
    from .sim.run import add_misbehave_argument, add_noop_step_argument, add_sim_arguments, add_sim_stats_argument

    add_sim_arguments(p)
    add_noop_step_argument(p)
    add_misbehave_argument(p)
    add_sim_stats_argument(p)


def _train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shm", metavar="NAME", required=True, help="segment of the engine to drive")
    p.add_argument("--steps", type=_step_count, default=None, help="stop after this many steps (default: until Ctrl-C)")
    p.add_argument("--policy", choices=("pd", "random"), default="pd", help="pd: swing-up controller (default)")
    p.add_argument("--seed", type=plain_int, default=0, help="seed of the random policy")
    p.add_argument(
        "--timeout",
        type=seconds_between(0.01, 86400),
        default=5.0,
        help="seconds to wait for the engine before giving up (default 5)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    add_allow_other_user_argument(p)


@subcommand("train", "run the reference trainer: step an engine in lock-step with a policy", _train_args)
def _cmd_train(args: argparse.Namespace) -> int:
    from .sim.run import run_train

    return run_train(args)


def _demo_args(p: argparse.ArgumentParser) -> None:
    from .sim.run import add_sim_arguments

    add_sim_arguments(p)
    add_window_arguments(p)
    p.add_argument("--policy", choices=("pd", "random"), default="pd", help="trainer policy (default pd)")
    p.add_argument("--no-trainer", action="store_true", help="engine only: watch it free-run")
    p.add_argument("--headless", action="store_true", help="no window: status lines only (until Ctrl-C)")


@subcommand("demo", "reference engine + reference trainer + the monitor window", _demo_args)
def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args)


def _draw_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help="segment name, e.g. LuckyEngine_1234")
    kinds = p.add_subparsers(dest="kind", metavar="KIND", required=True)
    line = kinds.add_parser("line", help="a line segment")
    line.add_argument("--from", dest="start", required=True, metavar="X,Y,Z")
    line.add_argument("--to", dest="end", required=True, metavar="X,Y,Z")
    arrow = kinds.add_parser("arrow", help="an arrow")
    arrow.add_argument("--origin", required=True, metavar="X,Y,Z")
    arrow.add_argument("--direction", required=True, metavar="X,Y,Z")
    arrow.add_argument("--scale", type=plain_float, default=1.0)
    vel = kinds.add_parser("velocity", help="a velocity command")
    vel.add_argument("--origin", default="0,0,0", metavar="X,Y,Z")
    vel.add_argument("--vel", required=True, metavar="VX,VY,WZ", help="lin_vel_x, lin_vel_y, ang_vel_z")
    vel.add_argument("--scale", type=plain_float, default=1.0)
    kinds.add_parser("clear", help="remove every drawing")
    for sp in (line, arrow):  # a VelocityCommand has no colour in the schema: the engine picks it
        sp.add_argument("--color", default="1,0.2,0.2,1", metavar="R,G,B[,A]", help="components 0..1")
    for sp in (line, arrow, vel):
        sp.add_argument("--clear", action="store_true", help="set clear_previous: erase earlier drawings first")
    p.add_argument(
        "--timeout", type=seconds_between(0.01, 3600), default=2.0, help="seconds to wait for the reply (default 2)"
    )
    add_allow_other_user_argument(p)


@subcommand("draw", "send a debug-draw command to an engine over the tools channel", _draw_args)
def _cmd_draw(args: argparse.Namespace) -> int:
    from .core import drawing as d
    from .core.commands import CommandClient
    from .protocol.envelope import Envelope, encode
    from .protocol.errors import EnvelopeError
    from .protocol.messages import MethodId
    from .transport.discovery import pid_alive
    from .transport.shm import Segment
    from .transport.tools_agent import claim_tools

    # Text is parsed and range-checked under the option's name; the builder applies the same rules.
    if args.kind == "line":
        req = d.line_request(
            d.parse_numbers(args.start, 3, "--from"),
            d.parse_numbers(args.end, 3, "--to"),
            d.parse_color(args.color),
            args.clear,
        )
    elif args.kind == "arrow":
        req = d.arrow_request(
            d.parse_numbers(args.origin, 3, "--origin"),
            d.parse_numbers(args.direction, 3, "--direction"),
            d.parse_color(args.color),
            d.scale_value(args.scale, "--scale"),
            args.clear,
        )
    elif args.kind == "velocity":
        vx, vy, wz = d.parse_numbers(args.vel, 3, "--vel")
        req = d.velocity_request(
            d.parse_numbers(args.origin, 3, "--origin"), vx, vy, wz, d.scale_value(args.scale, "--scale"), args.clear
        )
    else:
        req = d.clear_request()
    try:  # a value the wire cannot carry is the caller's to fix, found before anything is attached
        encode(Envelope(method=MethodId.DrawReq, correlation_id=0, payload=req))
    except EnvelopeError as exc:
        raise UsageError(f"{str(exc).removeprefix('cannot encode envelope: ')}") from None
    with Segment.attach(args.name, allow_other_user=args.allow_other_user) as seg:
        if not pid_alive(seg.header.server_pid):  # a dead engine's segment: nobody would answer
            raise UnavailableError(f"{seg.name}: engine exited (engine pid {seg.header.server_pid} is gone)")
        with claim_tools(seg, allow_other_user=args.allow_other_user) as channel:
            resp, rtt = CommandClient(channel, timeout_s=args.timeout).request(MethodId.DrawReq, req)
    ok = getattr(resp.payload, "success", False)
    print(f"{'success' if ok else 'refused'} (round trip {ms_text(rtt, 2)})")
    return EXIT_OK if ok else EXIT_FAILED


# ------------------------------------------------------------------ watch


def _watch_args(p: argparse.ArgumentParser) -> None:
    from .watch import add_watch_arguments

    add_watch_arguments(p)


@subcommand(
    "watch", "follow a segment in the terminal: state changes and a summary per interval (sends nothing)", _watch_args
)
def _cmd_watch(args: argparse.Namespace) -> int:
    from .watch import run_watch

    return run_watch(args)


# ------------------------------------------------------------------ headless: snapshot, record, export


def _precheck(name: str | None, allow_other_user: bool) -> str:
    """The segment to follow, opened once here so a bad one gets its own message and exit code."""
    from .transport.shm import Segment

    resolved = _resolve(name, allow_other_user=allow_other_user)
    with Segment.attach(resolved, allow_other_user=allow_other_user):
        pass
    return resolved


def _headless_name_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", metavar="NAME", help=_NAME_HELP)
    add_allow_other_user_argument(p)


def _snapshot_args(p: argparse.ArgumentParser) -> None:
    from .headless.snapshot import add_snapshot_arguments

    _headless_name_arg(p)
    add_snapshot_arguments(p)


@subcommand(
    "snapshot", "write the image region (the grid, or one env) to a PNG, exact pixels, no display", _snapshot_args
)
def _cmd_snapshot(args: argparse.Namespace) -> int:
    from .headless.snapshot import check_snapshot_arguments, run_snapshot

    check_snapshot_arguments(args)  # a usage error first, whatever the segment
    return run_snapshot(args, _precheck(args.name, args.allow_other_user))


def _record_args(p: argparse.ArgumentParser) -> None:
    from .headless.record import add_record_arguments

    _headless_name_arg(p)
    add_record_arguments(p)


@subcommand("record", "record the image grid (or one env) to a video file, until --seconds or Ctrl-C", _record_args)
def _cmd_record(args: argparse.Namespace) -> int:
    from .headless.record import check_record_arguments, run_record

    check_record_arguments(args)  # a usage error first, whatever the segment
    return run_record(args, _precheck(args.name, args.allow_other_user))


def _export_args(p: argparse.ArgumentParser) -> None:
    from .headless.export import add_export_arguments

    add_export_arguments(p)


@subcommand("export", "serve Prometheus metrics of every live segment (or those named) over HTTP", _export_args)
def _cmd_export(args: argparse.Namespace) -> int:
    from .headless.export import run_export

    return run_export(args)


def add_remote_argument(p: argparse.ArgumentParser) -> None:
    """``--remote [PORT]``: the window inside a password-protected VNC server on 127.0.0.1."""
    from .headless.remote import DEFAULT_PORT, parse_port

    p.add_argument(
        "--remote",
        nargs="?",
        const=DEFAULT_PORT,
        type=parse_port,
        metavar="PORT",
        help=f"run the window inside a VNC server on 127.0.0.1:PORT (default {DEFAULT_PORT}) with a password, "
        "for a node without a screen; reach it through an SSH tunnel (needs TigerVNC's Xvnc)",
    )
