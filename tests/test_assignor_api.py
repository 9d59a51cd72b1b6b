"""The KIP-924 API: validation errors, user assignors loaded by "module:Class", TaskAssignmentUtils."""

from __future__ import annotations

import sys
import textwrap

import pytest

from kprotocol.assignor import (AssignedTask, AssignedTaskType, AssignmentError, HighAvailabilityTaskAssignor,
                                KafkaStreamsAssignment, ScenarioError, StickyTaskAssignor, TaskAssignment,
                                TaskAssignmentUtils, TaskAssignor, assign_scenario, load_assignor,
                                validate_task_assignment)
from kprotocol.assignor.errors import TaskAssignmentError
from kprotocol.assignor.rack_aware import traffic
from kprotocol.assignor.scenario import parse_scenario
from kprotocol.assignor.simulation import next_round, synthetic_scenario

ACTIVE, STANDBY = AssignedTaskType.ACTIVE, AssignedTaskType.STANDBY


def state_of(**kwargs):
    return parse_scenario(synthetic_scenario(**kwargs)).state


def assignment(*clients: tuple[str, list[tuple[str, AssignedTaskType]]]) -> TaskAssignment:
    return TaskAssignment(tuple(KafkaStreamsAssignment.of(pid, [AssignedTask(t, k) for t, k in tasks])
                                for pid, tasks in clients))


@pytest.fixture
def state():
    # subtopology 0 stateful (0_0, 0_1), subtopology 1 stateless (1_0, 1_1); processes p0000, p0001
    return state_of(processes=2, subtopologies=2, partitions=2, standbys=1)


def test_valid_assignment(state):
    good = assignment(("p0000", [("0_0", ACTIVE), ("1_0", ACTIVE), ("0_1", STANDBY)]),
                      ("p0001", [("0_1", ACTIVE), ("1_1", ACTIVE), ("0_0", STANDBY)]))
    assert validate_task_assignment(state, good) is AssignmentError.NONE


@pytest.mark.parametrize("clients, error", [
    ((("p0000", [("0_0", ACTIVE)]), ("p0001", [("0_0", ACTIVE)])), AssignmentError.ACTIVE_TASK_ASSIGNED_MULTIPLE_TIMES),
    ((("p0000", [("0_0", ACTIVE)]), ("p0001", [("0_1", ACTIVE)]), ("p0000", [("0_0", STANDBY)])),
     AssignmentError.ACTIVE_AND_STANDBY_TASK_ASSIGNED_TO_SAME_KAFKASTREAMS),
    ((("p0000", [("0_0", ACTIVE)]), ("p0001", [("1_0", STANDBY)])), AssignmentError.INVALID_STANDBY_TASK),
    ((("p0000", [("0_0", ACTIVE)]),), AssignmentError.MISSING_PROCESS_ID),
    ((("p0000", []), ("p0001", []), ("p9999", [])), AssignmentError.UNKNOWN_PROCESS_ID),
    ((("p0000", [("5_5", ACTIVE)]), ("p0001", [])), AssignmentError.UNKNOWN_TASK_ID),
])
def test_validation_errors(state, clients, error):
    assert validate_task_assignment(state, assignment(*clients)) is error


def test_built_in_assignors_implement_the_protocol(state):
    for assignor in (StickyTaskAssignor(), HighAvailabilityTaskAssignor()):
        assert isinstance(assignor, TaskAssignor)
        assert validate_task_assignment(state, assignor.assign(state)) is AssignmentError.NONE


def test_follow_up_deadline_while_warming_up():
    scenario = synthetic_scenario(processes=2, subtopologies=2, partitions=4, standbys=0)
    scenario = next_round(scenario, assign_scenario(scenario))
    scenario["members"].append({**scenario["members"][0], "member_id": "new-t0", "process_id": "new",
                                "active": [], "standby": [], "warmup": [], "task_offsets": {}, "task_end_offsets": {}})
    state = parse_scenario(scenario, now_ms=1_000).state
    result = HighAvailabilityTaskAssignor().assign(state)
    assert result.follow_up_requested()
    interval = state.assignment_configs.probing_rebalance_interval_ms
    assert {a.follow_up_rebalance_deadline_ms for a in result.assignment} == {1_000 + interval}


USER_ASSIGNOR = '''
from kprotocol.assignor import TaskAssignment, TaskAssignmentUtils

class IdentityThenStandbys:
    """Everyone keeps its previous actives; standbys by the default algorithm."""
    def assign(self, application_state):
        kept = TaskAssignmentUtils.identity_assignment(application_state)
        placed = TaskAssignmentUtils.default_standby_task_assignment(application_state, kept)
        return TaskAssignment(tuple(placed[p] for p in sorted(placed)))

class Broken:
    def assign(self, application_state):
        return TaskAssignment(())
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_assignors.py").write_text(textwrap.dedent(USER_ASSIGNOR))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_assignors"
    sys.modules.pop("my_assignors", None)


def test_user_assignor_by_module_and_class(user_module):
    scenario = synthetic_scenario(processes=3, subtopologies=2, partitions=3, standbys=1)
    scenario = next_round(scenario, assign_scenario(scenario))
    scenario["assignor"] = f"{user_module}:IdentityThenStandbys"
    result = assign_scenario(scenario)
    for member in scenario["members"]:
        assert result["members"][member["member_id"]]["active"] == member["active"]
    assert isinstance(load_assignor(f"{user_module}:IdentityThenStandbys"), TaskAssignor)


def test_invalid_user_assignments_are_rejected(user_module):
    scenario = synthetic_scenario(processes=2, subtopologies=1, partitions=2)
    scenario["assignor"] = f"{user_module}:Broken"
    with pytest.raises(TaskAssignmentError, match="MISSING_PROCESS_ID"):
        assign_scenario(scenario)


@pytest.mark.parametrize("spec", ["no_colon", "my_assignors:Missing", ":Cls"])
def test_unloadable_assignors(spec, user_module):
    with pytest.raises(TaskAssignmentError):
        load_assignor(spec)
    scenario = synthetic_scenario(processes=2, subtopologies=1, partitions=2)
    scenario["assignor"] = spec
    with pytest.raises(ScenarioError):
        assign_scenario(scenario)


def cross_rack(state, clients, role=ACTIVE):
    total = 0
    for client in clients.values():
        rack = state.kafka_streams_states[client.process_id].rack_id
        for t in client.of_type(role):
            parts = state.all_tasks[t].topic_partitions
            total += traffic([tp.rack_ids for tp in parts if tp.is_changelog == (role is not ACTIVE) and tp.rack_ids],
                             rack)
    return total


def test_utils_optimize_rack_aware_actives_keeps_counts_and_lowers_traffic():
    state = state_of(processes=6, subtopologies=4, partitions=12, standbys=1, racks=3, strategy="min_traffic", seed=3)
    plain = {p: KafkaStreamsAssignment.of(p) for p in state.kafka_streams_states}
    pids = sorted(plain)
    for i, t in enumerate(sorted(state.all_tasks)):  # rack-oblivious round robin
        plain[pids[i % 6]] = plain[pids[i % 6]].assign_task(AssignedTask(t, ACTIVE))
    optimized = TaskAssignmentUtils.optimize_rack_aware_active_tasks(state, plain, non_overlap_cost=0)
    assert {p: len(a.tasks) for p, a in optimized.items()} == {p: len(a.tasks) for p, a in plain.items()}
    assert cross_rack(state, optimized) < cross_rack(state, plain)
    with_standbys = TaskAssignmentUtils.default_standby_task_assignment(state, optimized)
    swapped = TaskAssignmentUtils.optimize_rack_aware_standby_tasks(state, with_standbys)
    assert cross_rack(state, swapped, STANDBY) <= cross_rack(state, with_standbys, STANDBY)
    result = TaskAssignment(tuple(swapped.values()))
    assert validate_task_assignment(state, result) is AssignmentError.NONE


def test_identity_assignment_repeats_the_previous_one():
    scenario = synthetic_scenario(processes=3, subtopologies=2, partitions=3, standbys=1)
    state = parse_scenario(next_round(scenario, assign_scenario(scenario))).state
    identity = TaskAssignmentUtils.identity_assignment(state)
    for pid, client in state.kafka_streams_states.items():
        assert set(identity[pid].of_type(ACTIVE)) == client.previous_active_tasks
        assert set(identity[pid].of_type(STANDBY)) == client.previous_standby_tasks


def test_lags_follow_the_readme_rules():
    scenario = synthetic_scenario(processes=3, subtopologies=1, partitions=2, standbys=0)
    scenario["members"][0]["active"] = ["0_0"]
    scenario["members"][1]["task_offsets"] = {"0_0": 400, "0_1": 900}
    scenario["members"][0]["task_end_offsets"] = {"0_0": 1000}
    states = parse_scenario(scenario).state.kafka_streams_states
    assert states["p0000"].lag_for("0_0") == 0                       # running active
    assert states["p0001"].lag_for("0_0") == 600                     # reported end offset - offset
    assert states["p0001"].lag_for("0_1") == 0                       # no end offset: largest offset is the end
    assert states["p0002"].lag_for("0_0") == 1000                    # no state: the whole end offset


def test_state_and_assignment_helpers():
    scenario = synthetic_scenario(processes=2, subtopologies=2, partitions=2, standbys=1)
    scenario["members"][0]["active"] = ["0_1", "1_0"]
    scenario["members"][0]["standby"] = ["0_0"]
    scenario["members"][0]["task_offsets"] = {"0_0": 10}
    scenario["members"][1]["task_end_offsets"] = {"0_0": 50}
    state = parse_scenario(scenario).state
    assert state.stateful_tasks() == ["0_0", "0_1"] and state.stateless_tasks() == ["1_0", "1_1"]
    assert state.kafka_streams_states["p0000"].prev_tasks_by_lag() == ["0_1", "1_0", "0_0"]
    client = KafkaStreamsAssignment.of("p0000", [AssignedTask("0_1", ACTIVE), AssignedTask("0_0", STANDBY)])
    assert client.tasks == {"0_1": AssignedTask("0_1", ACTIVE), "0_0": AssignedTask("0_0", STANDBY)}
    moved = client.assign_task(AssignedTask("0_0", ACTIVE)).remove_task("0_1").with_follow_up_rebalance(42)
    assert moved.of_type(ACTIVE) == ["0_0"] and moved.of_type(STANDBY) == []
    assert moved.follow_up_rebalance_deadline_ms == 42 and client.follow_up_rebalance_deadline_ms is None
