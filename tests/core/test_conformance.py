"""The conformance rule table: ids are LAYOUT.md's checklist items; the heartbeat rule follows §8.3."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from lucky_monitor.core.conformance import FAIL, NA, PASS, RULES, SKIPPED, Subject, evaluate, run_check
from lucky_monitor.protocol import header as hdr
from lucky_monitor.protocol.enums import EngineState
from lucky_monitor.transport.shm import platform_kind

LAYOUT = Path(__file__).resolve().parents[2] / "schema" / "LAYOUT.md"

needs_dev_shm = pytest.mark.skipif(platform_kind() != "dir", reason="segments are files under /dev/shm only on Linux")


def checklist_ids() -> set[str]:
    text = LAYOUT.read_text()
    section = text[text.index("## 14. Conformance checklist") :]
    return set(re.findall(r"^\| (C\d+) \|", section, flags=re.MULTILINE))


def test_every_rule_names_checklist_items_of_layout_md() -> None:
    known = checklist_ids()
    assert {"C1", "C25", "C38"} <= known
    for rule in RULES:
        assert rule.ids and set(rule.ids) <= known, rule.name


def test_rule_names_are_unique_per_header() -> None:
    h = hdr.plan(num_envs=2, obs_size=1, act_size=1, image=(4, 4, 3))
    names = [name for rule in RULES for _, name in rule.expand(h)]
    assert len(names) == len(set(names))


def statuses(name: str) -> dict[str, tuple[str, str]]:
    results, _ = run_check(name, image_wait_s=0.0)
    return {r.rule: (r.status, r.detail) for r in results}


@needs_dev_shm
def test_heartbeat_zero_with_the_extension_block_fails(segment_factory) -> None:
    eng = segment_factory()  # plan() writes a session_id: the extension block is there
    eng.set("engine_state", EngineState.RUNNING)
    status, detail = statuses(eng.name)["heartbeat fresh"]
    assert status == FAIL and "heartbeat_ns is 0" in detail and "10 times per second" in detail
    eng.set("engine_state", EngineState.PAUSED)
    assert statuses(eng.name)["heartbeat fresh"][0] == FAIL
    eng.set("heartbeat_ns", time.monotonic_ns())
    assert statuses(eng.name)["heartbeat fresh"][0] == PASS


@needs_dev_shm
def test_a_heartbeat_in_the_future_fails_and_info_says_so(segment_factory, capsys) -> None:
    """Seen: heartbeat_ns 2^64 - 1 passed C25 ("last beat -18446697992.897 s ago"), and `info` printed that age."""
    from lucky_monitor.cli import main

    eng = segment_factory()
    eng.set("engine_state", EngineState.RUNNING)
    eng.set("heartbeat_ns", 2**64 - 1)
    status, detail = statuses(eng.name)["heartbeat fresh"]
    assert status == FAIL and "in the future" in detail and "CLOCK_MONOTONIC" in detail, detail
    capsys.readouterr()
    assert main(["info", eng.name]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "heartbeat age" in ln)
    assert "s in the future (not this machine's CLOCK_MONOTONIC)" in line and "-" not in line, line


@needs_dev_shm
def test_heartbeat_zero_is_allowed_while_initialising_and_without_the_extension(segment_factory) -> None:
    eng = segment_factory()
    assert statuses(eng.name)["heartbeat fresh"] == (NA, "engine initialising: heartbeat_ns may still be 0")
    old = segment_factory(session_id=0)
    old.set("engine_state", EngineState.RUNNING)
    status, detail = statuses(old.name)["heartbeat fresh"]
    assert status == NA and "session_id 0" in detail


@needs_dev_shm
def test_closing_engine_may_stop_its_heartbeat(segment_factory) -> None:
    eng = segment_factory()
    eng.set("heartbeat_ns", 1)
    eng.set("engine_state", EngineState.CLOSING)
    assert statuses(eng.name)["heartbeat fresh"][0] == NA


def test_an_error_no_rule_recognises_is_reported_and_skips_the_header_rules() -> None:
    h = hdr.plan(num_envs=1, obs_size=1, act_size=1)
    err = hdr.HeaderError("nothing_we_know", "made up")
    results = evaluate(Subject(h, h.pack(), h.segment_size, err))
    assert results[0].status == PASS  # the file holds a header
    assert all(r.status == SKIPPED for r in results[1:-1])
    assert (results[-1].rule, results[-1].status) == ("header validation", FAIL)


def test_live_rules_are_skipped_without_a_segment() -> None:
    h = hdr.plan(num_envs=1, obs_size=1, act_size=1, server_pid=os.getpid())
    results = evaluate(Subject(h, h.pack(), h.segment_size))
    live = {name for rule in RULES if rule.stage == "live" for _, name in rule.expand(h)}
    assert {r.status for r in results if r.rule in live} == {SKIPPED}
    assert {r.status for r in results if r.rule not in live} <= {PASS, NA}


@needs_dev_shm
def test_segment_name_rule_holds_engines_to_30_characters_of_the_charset(segment_factory) -> None:
    """C2: readers accept longer names (up to 200); an engine's may have at most 30 characters."""
    long_name = "LuckyEngine_" + "x" * 25  # 37 characters
    status, detail = statuses(segment_factory(long_name).name)["segment name"]
    assert status == FAIL and "37 characters, at most 30" in detail
    ok = segment_factory()
    status, detail = statuses(ok.name)["segment name"]
    assert status == PASS and "an override" in detail and f"LuckyEngine_{os.getpid()}" in detail
    default = segment_factory(f"LuckyEngine_{os.getpid()}")
    status, detail = statuses(default.name)["segment name"]
    assert status == PASS and "the default LuckyEngine_<server_pid>" in detail


@needs_dev_shm
@pytest.mark.parametrize(
    ("plan_kw", "enabled", "text"),
    [
        ({"services_available": 0x1E0}, None, "services_available has bits above 7 set (0x100)"),
        ({}, 0x1FF, "services_enabled has bits above 7 set (0x100)"),
        ({"services_available": 0x21}, 0x23, "services_enabled has bits not in services_available (0x2)"),
    ],
)
def test_service_masks_rule_fails_bits_the_spec_does_not_define(segment_factory, plan_kw, enabled, text) -> None:
    """C9: bits 8-31 of both masks are zero, and services_enabled is within services_available."""
    eng = segment_factory(**plan_kw)
    if enabled is not None:
        eng.set("services_enabled", enabled)
    status, detail = statuses(eng.name)["service masks"]
    assert status == FAIL and text in detail


@needs_dev_shm
def test_service_masks_rule_passes_a_subset_and_needs_the_extension_block(segment_factory) -> None:
    eng = segment_factory(services_available=0x21)
    eng.set("services_enabled", 0x01)
    assert statuses(eng.name)["service masks"] == (
        PASS,
        "services_available 0x21, services_enabled 0x01, enabled within available",
    )
    old = segment_factory(session_id=0)
    status, detail = statuses(old.name)["service masks"]
    assert status == NA and "session_id 0" in detail


@pytest.mark.parametrize(
    ("every", "status", "words"),
    [
        (20, FAIL, "inverted seqlock"),
        (1, FAIL, "stayed odd"),
        (0, PASS, "image_seq"),
        (-20, PASS, "writes in progress"),
    ],
)
def test_image_seq_even_judges_the_share_of_looks_not_one_look(every: int, status: str, words: str) -> None:
    """An engine keeping the image seqlock inverted (odd between writes, even for a moment while writing)
    passed when the one look landed in a write. ``every`` > 0: even at one look in ``every`` (1: never);
    0: always even; < 0: odd at one look in ``-every`` (a sound engine's writes in progress)."""
    import types

    from lucky_monitor.core import conformance

    looks = iter(range(1_000_000))

    def read_counter(name: str) -> int:
        k = next(looks)
        if every > 1:
            odd = k % every != 0
        elif every == 1:
            odd = True
        elif every == 0:
            odd = False
        else:
            odd = k % -every == 0
        return 2 * k + (1 if odd else 0)

    subject = types.SimpleNamespace(seg=types.SimpleNamespace(read_counter=read_counter), image_wait_s=0.1)
    got, detail = conformance._image_seq_even(subject, "")  # type: ignore[arg-type]
    assert got == status and words in detail, detail
