"""`streams-groups describe --wait-stable`: what makes a described group settled, and the reasons when not."""

from __future__ import annotations

from kprotocol.registry import message_class
from kprotocol.streams_group.stability import unsettled

R = message_class("StreamsGroupDescribeResponse")
TOPOLOGY = R.Topology(epoch=0, subtopologies=[
    R.Subtopology(subtopology_id="0", source_topics=["in"]),
    R.Subtopology(subtopology_id="1", repartition_source_topics=[R.TopicInfo(name="app-repartition", partitions=2)])])


def tasks(spec: dict[str, list[int]]) -> list:
    return [R.TaskIds(subtopology_id=s, partitions=ps) for s, ps in spec.items()]


def member(member_id: str, epoch: int, active: dict, target: dict | None = None, classic: bool = False):
    return R.Member(member_id=member_id, member_epoch=epoch, process_id=f"p-{member_id}", is_classic=classic,
                    assignment=R.Assignment(active_tasks=tasks(active)),
                    target_assignment=R.Assignment(active_tasks=tasks(target if target is not None else active)))


def group(state: str, members: list) -> object:
    return R.DescribedGroup(group_id="app", group_state=state, group_epoch=7, assignment_epoch=7,
                            topology=TOPOLOGY, members=members)


def test_a_stable_group_with_every_task_active_once_is_settled() -> None:
    g = group("Stable", [member("a", 7, {"0": [0, 1], "1": [0]}), member("b", 7, {"0": [2], "1": [1]}, classic=True)])
    assert unsettled(g, {"in": 3}) == []


def test_the_reasons_name_who_is_behind_and_which_task_is_unowned_or_doubled() -> None:
    g = group("Reconciling", [member("a", 6, {"0": [0, 1]}, {"0": [0]}, classic=True),
                              member("b", 7, {"0": [1, 2], "1": [0]})])
    reasons = unsettled(g, {"in": 3})
    assert reasons[0].startswith("group state is Reconciling")
    assert "member a (classic, process p-a) is at epoch 6, the target assignment epoch is 7" in reasons
    assert "member a (classic, process p-a) still holds active tasks 0_1 it must give up" in reasons
    assert "task 1_1 is active on no member" in reasons
    assert "task 0_1 is active on 2 members: a, b" in reasons


def test_unknown_source_partitions_are_not_settled() -> None:
    g = group("Stable", [member("a", 7, {"0": [0], "1": [0, 1]})])
    assert unsettled(g, {}) == ["the topology's tasks are not known yet (topology not configured or source "
                                "topics missing)"]


def test_wait_stable_on_a_broker_exits_1_with_the_reason(kafka_broker) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "kprotocol", "streams-groups", "describe", "--bootstrap-server",
                           kafka_broker.bootstrap, "--group", "no-such-group", "--wait-stable", "--timeout", "6"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("kprotocol: group no-such-group is not stable after ")
    # named, as everywhere (a fresh broker says NOT_COORDINATOR (16) while it loads: the wait goes on)
    assert "GROUP_ID_NOT_FOUND (69)" in done.stderr and "error 69" not in done.stderr
