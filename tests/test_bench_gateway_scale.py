"""bench/gateway_scale.py's driver: its quick mode against the broker and the gateway, and its own invariants
(every member reached stable, the counts add up), not the performance it measures."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench():
    spec = importlib.util.spec_from_file_location("gateway_scale", ROOT / "bench" / "gateway_scale.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gateway_scale"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_tracker_stable_only_when_every_task_is_held_once_at_one_epoch() -> None:
    tracker = bench().Tracker("g", tasks=4, expected=2)
    tracker.update("a", 3, frozenset({0, 1}))
    assert not tracker.stable()  # one member has not reported
    tracker.update("b", 3, frozenset({1, 2, 3}))
    assert not tracker.stable()  # task 1 held twice
    tracker.update("b", 3, frozenset({2}))
    assert not tracker.stable()  # task 3 held by no one
    tracker.update("b", 3, frozenset({2, 3}))
    assert tracker.stable()
    tracker.saw_epoch(4)  # a newer epoch was answered to someone: not final
    assert not tracker.stable()
    tracker.update("a", 4, frozenset({0, 1}))
    tracker.update("b", 4, frozenset({2, 3}))
    assert tracker.stable()
    tracker.remove("b")
    assert not tracker.stable()


def test_a_group_never_stable_times_out() -> None:
    module = bench()
    scenario = module.Scenario("streams", 1, 2)
    side = types.SimpleNamespace(name="gateway", port=0, pid=0)
    run = module.Run(scenario, side, module.Options(), ["g"], "t", {})
    run.trackers["g"].update("a", 1, frozenset(range(scenario.tasks)))  # the other member never reports

    async def wait() -> tuple[float | None, float]:
        run.tasks[object()] = asyncio.get_running_loop().create_future()  # a member still running
        start = time.monotonic()
        return await run.until_stable(start + 0.2), time.monotonic() - start

    stable_at, waited = asyncio.run(wait())
    assert stable_at is None and 0.2 <= waited < 2


def test_quick_mode_against_the_broker_and_the_gateway(kafka_broker, tmp_path: Path, capsys) -> None:
    out = tmp_path / "scale.json"
    report = bench().main(["--quick", "--kinds", "streams,classic", "--sizes", "20", "--initial-delay-ms", "0",
                           "--steady-s", "2", "--json", str(out)], broker=kafka_broker)
    assert [e["scenario"] for e in report] == ["streams 20", "classic 20"]
    for entry in report:
        assert set(entry["results"]) == {"broker", "gateway"}
        for side, r in entry["results"].items():
            where = f"{entry['scenario']} {side}"
            assert r["stable"] and r["join_s"] > 0, where
            assert r["members_failed"] == 0 and not r["errors"], (where, r["errors"])
            counts = r["counts"]
            assert counts["members"] == counts["reported"] == 20, (where, counts)
            assert counts[entry["kind"]] == 20, (where, counts)
            assert counts["tasks"] == counts["tasks_expected"] == entry["tasks"], (where, counts)
            assert len(r["describe"]) == 1 and r["describe"][0].startswith("Stable"), (where, r["describe"])
            if entry["kind"] == "streams":
                assert r["describe"][0].endswith("members 20"), (where, r["describe"])
            assert r["heartbeats"] > 0 and r["p50_ms"] <= r["p99_ms"], where
            assert r["cpu_ms_per_heartbeat"] is not None and r["window_s"] >= 2, where
        assert entry["ratios"]["join_s"] is not None
        assert {key for key, _, _ in entry["targets"]} >= {"cpu", "p99", "join", "rss"}
    assert json.loads(out.read_text())["scenarios"] == json.loads(json.dumps(report))
    table = capsys.readouterr().out
    assert "| streams 20 | gateway / broker |" in table and "| classic 20 | broker |" in table
