"""Long fuzz runs of the protocol layer: one JSON line of figures per surface.

The fuzzers are those of the CI run (``tests/fuzz/fuzz_surfaces.py``); this
script runs them for as many inputs as asked, without ``tracemalloc`` unless
``--trace-memory`` (which makes a run several times slower), and prints per
surface: inputs run, inputs/s, the outcome histogram (ok and each typed error,
per operation), failures (0 expected), the longest time one input took and
the process's peak RSS. A failing input is saved as a corpus file under
``--save DIR/<surface>/`` (default ``fuzz-findings``), ready to move into
``tests/fuzz/corpus/`` as a regression input.

Usage::

    python benchmarks/fuzz.py --surface header|accessors|ring|envelope|all --inputs N [--seed S]
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

from _common import emit, machine_facts

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "fuzz"))

import fuzz_surfaces as F


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--surface", choices=[*F.SURFACES, "all"], default="all")
    ap.add_argument("--inputs", type=int, default=100_000, help="inputs per surface (default 100000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=2.0, help="CPU seconds one input may take (default 2)")
    ap.add_argument("--trace-memory", action="store_true", help="check each input's allocations (slower)")
    ap.add_argument("--save", type=Path, default=Path("fuzz-findings"), help="where failing inputs go")
    ap.add_argument("--progress", action="store_true", help="a line on stderr every 100000 inputs")
    args = ap.parse_args(argv)
    facts = machine_facts()
    failed = 0
    for name in F.SURFACES if args.surface == "all" else (args.surface,):

        def progress(r: F.Report) -> None:
            rate = r.inputs / r.seconds
            print(f"{r.surface}: {r.inputs} inputs, {rate:.0f}/s, {len(r.failures)} failures", file=sys.stderr)

        report = F.fuzz(
            F.make_surface(name),
            args.inputs,
            args.seed,
            time_limit=args.time_limit,
            trace_memory=args.trace_memory,
            progress=progress if args.progress else None,
        )
        for f in report.failures[:20]:
            F.save_case(name, f"seed{args.seed}_input{f['index']}", f["why"], f["case"], root=args.save)
        failed += len(report.failures)
        emit(
            {
                "benchmark": "fuzz",
                **report.figures(),
                "failure_reasons": sorted({f["why"][:200] for f in report.failures})[:10],
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "time_limit_s": args.time_limit,
            },
            facts=facts,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
