"""Short fuzz runs of the protocol layer (fixed seeds), and the regression corpus.

Each surface of ``fuzz_surfaces`` runs a few thousand generated inputs with
a fixed seed, under ``tracemalloc`` (a per-input allocation bound) and a CPU
timer (a per-input time limit): every input must end in a value or the
module's typed error, with the surface's invariants holding. Every file under
``corpus/<surface>/`` is replayed on each run: inputs a fuzzer once found,
and hand-made hostile shapes. ``benchmarks/fuzz.py`` is the long mode.
"""

from __future__ import annotations

import inspect
import json

import pytest
from fuzz_surfaces import (
    ARG_METHODS,
    SURFACES,
    corpus_files,
    fuzz,
    load_case,
    make_surface,
    run_one,
)

from lucky_monitor.protocol import header as H

#: Inputs per surface in CI: seconds in total for all four, under tracemalloc.
SHORT = {"header": 3000, "accessors": 1500, "ring": 3000, "envelope": 3000}
SEED = 20240909


@pytest.mark.parametrize("surface", SURFACES)
def test_short_fuzz_finds_nothing(surface: str) -> None:
    report = fuzz(make_surface(surface, **_small(surface)), SHORT[surface], SEED, trace_memory=True)
    failures = [f"#{f['index']}: {f['why']}\n{json.dumps(f['case'])[:2000]}" for f in report.failures[:3]]
    assert not report.failures, "\n".join(failures)
    assert report.inputs == SHORT[surface]
    # The generators reach past the first checks: both outcomes occur.
    outcomes = report.outcomes
    if surface == "header":
        assert outcomes["ok"] and outcomes["RegionError"] and outcomes["TruncatedSegment"], outcomes
    elif surface == "accessors":
        assert outcomes["accepted"] > SHORT[surface] // 2, outcomes
    elif surface == "ring":
        assert outcomes["reader:messages"] and outcomes["reader:RingCorrupt"] and outcomes["tap:corrupt"], outcomes
    else:
        assert outcomes["decode:ok"] and outcomes["decode:EnvelopeError"], outcomes


def _small(surface: str) -> dict[str, int]:
    return {"pool_size": 200} if surface == "envelope" else {}


CORPUS = [(s, p) for s in SURFACES for p in corpus_files(s)]


@pytest.mark.parametrize(("surface", "path"), CORPUS, ids=[f"{s}/{p.stem}" for s, p in CORPUS])
def test_corpus_input_gives_a_value_or_a_typed_error(surface: str, path) -> None:
    s = make_surface(surface, **_small(surface))
    _, why, _ = run_one(s, load_case(path), time_limit=2.0, trace_memory=False)
    assert why is None, f"{path.name}: {why}"


def test_every_surface_has_a_corpus() -> None:
    for s in SURFACES:
        assert corpus_files(s), f"corpus/{s} is empty"


def test_the_accessor_fuzzer_knows_every_public_method_of_header() -> None:
    for name in dir(H.Header):
        attr = inspect.getattr_static(H.Header, name)
        if name.startswith("_") or isinstance(attr, property) or not callable(attr):
            continue
        params = [
            p
            for p in inspect.signature(getattr(H.Header, name)).parameters.values()
            if p.name != "self" and p.default is inspect.Parameter.empty
        ]
        assert (name in ARG_METHODS) == bool(params), f"exercise() does not know how to call Header.{name}"
