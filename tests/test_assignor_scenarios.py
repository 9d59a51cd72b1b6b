"""The shared scenarios: every result valid and no worse than Apache Kafka's (balance, stickiness, cross-rack
traffic as scored by the shared metrics.py), the CLI, and clear errors for bad scenarios."""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
from pathlib import Path

import pytest

from kprotocol.assignor import ScenarioError, assign_scenario, cli
from test_assignor_invariants import check_invariants

SHARED = Path(__file__).resolve().parents[2] / "shared" / "assignor"
SCENARIOS = sorted((SHARED / "scenarios").glob("*.json"))


def load_metrics():
    spec = importlib.util.spec_from_file_location("shared_assignor_metrics", SHARED / "metrics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def metrics():
    return load_metrics()


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_no_worse_than_kafka(path, metrics):
    scenario = json.loads(path.read_text())
    kafka = metrics.compute(scenario, json.loads((SHARED / "kafka-results" / path.name).read_text()))
    result = assign_scenario(scenario)
    ours = metrics.compute(scenario, result)
    assert ours["valid"], ours["violations"]
    check_invariants(scenario, result)
    assert ours["active_spread"] <= max(kafka["active_spread"], 1)
    assert ours["moved_active"] <= kafka["moved_active"]
    if scenario.get("topic_partition_racks"):
        assert ours["cross_rack_active"] <= kafka["cross_rack_active"]
    assert assign_scenario(copy.deepcopy(scenario)) == result


def small_scenario() -> dict:
    return json.loads((SHARED / "scenarios" / "st_standby_promotion.json").read_text())


@pytest.mark.parametrize("mutate, message", [
    (lambda s: s["members"][0]["active"].append("9_0"), "unknown task id '9_0'"),
    (lambda s: s["members"][1]["task_offsets"].update({"0_99": 5}), "unknown task id '0_99'"),
    (lambda s: s["members"].append(dict(s["members"][0])), "duplicate member id 'p02-t1'"),
    (lambda s: s["subtopologies"][0].update(partitions=-1), "partitions must be a non-negative integer"),
    (lambda s: s["subtopologies"].append(dict(s["subtopologies"][0])), "duplicate subtopology id '0'"),
    (lambda s: s["configs"].update({"num.standby.replicas": -2}), "num.standby.replicas"),
    (lambda s: s["configs"].update({"rack.aware.assignment.strategy": "nearest"}), "strategy"),
    (lambda s: s.update(members=[]), "members must be a non-empty list"),
    (lambda s: s.update(assignor="round_robin"), "unknown assignor 'round_robin'"),
    (lambda s: s.update(assignor="no.such.module:Assignor"), "cannot load assignor"),
])
def test_bad_scenarios_name_the_problem(mutate, message):
    scenario = small_scenario()
    mutate(scenario)
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(")) as info:
        assign_scenario(scenario)
    assert isinstance(info.value, ValueError)


def run_cli(path: Path) -> int:
    """`kprotocol assign PATH` through the subcommand this package registers."""
    parser = argparse.ArgumentParser(prog="kprotocol")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["assign", str(path)])
    return args.func(args)


def test_cli_prints_the_result(tmp_path, capsys):
    scenario = small_scenario()
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    assert run_cli(path) == 0
    assert json.loads(capsys.readouterr().out) == assign_scenario(scenario)


def test_cli_reports_bad_scenarios(tmp_path, capsys):
    scenario = small_scenario()
    scenario["members"][0]["standby"] = ["7_7"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(scenario))
    assert run_cli(path) != 0
    assert "unknown task id '7_7'" in capsys.readouterr().err
    assert run_cli(tmp_path / "missing.json") != 0
