"""The migration tests' overlap check reads the apps' own task events as Kafka Streams reports them."""

from __future__ import annotations

from migration import overlaps


def tasks(t: int, state: str, *active: str) -> dict:
    return {"event": "tasks", "timeMs": t, "state": state, "active": list(active)}


def test_a_task_revoked_during_a_rebalance_counts_as_given_up_when_it_began() -> None:
    # instance 0 lists 0_2 while rebalancing (its thread metadata changes at the rebalance's end)
    revoking = [tasks(100, "RUNNING", "0_2"), tasks(200, "REBALANCING", "0_2"), tasks(400, "RUNNING", "0_1")]
    taking = [tasks(300, "RUNNING", "0_0", "0_2")]
    assert overlaps([revoking, taking]) == []


def test_a_task_kept_through_a_rebalance_still_overlaps() -> None:
    keeping = [tasks(100, "RUNNING", "0_2"), tasks(200, "REBALANCING", "0_2"), tasks(400, "RUNNING", "0_2")]
    taking = [tasks(300, "RUNNING", "0_2"), tasks(500, "RUNNING")]
    assert overlaps([keeping, taking]) == ["0_2: instance 0 200-400 and 1 300-500"]


def test_two_running_instances_with_one_task_overlap() -> None:
    assert overlaps([[tasks(100, "RUNNING", "0_1"), tasks(500, "RUNNING")],
                     [tasks(300, "RUNNING", "0_1"), tasks(600, "RUNNING")]]) == \
        ["0_1: instance 0 100-500 and 1 300-600"]
