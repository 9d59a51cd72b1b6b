"""KIP-924 `TaskAssignmentUtils`: building blocks for custom assignors, on process-keyed assignments."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .api import ApplicationState, AssignedTask, AssignedTaskType, KafkaStreamsAssignment
from .errors import TaskAssignmentError
from .problem import Problem, build_problem
from .rack_aware import configured_costs, optimize_actives, swap_standbys
from .standby import assign_standbys

Assignments = Mapping[str, KafkaStreamsAssignment]


def _actives(problem: Problem, assignments: Assignments) -> list[int]:
    index = {t: i for i, t in enumerate(problem.task_ids)}
    active = [-1] * problem.num_tasks
    for p, pid in enumerate(problem.process_ids):
        client = assignments.get(pid)
        for t in client.of_type(AssignedTaskType.ACTIVE) if client else ():
            active[index[t]] = p
    missing = [problem.task_ids[t] for t in range(problem.num_tasks) if active[t] < 0]
    if missing:
        raise TaskAssignmentError(f"tasks without an active owner: {missing[:10]}")
    return active


def _rebuild(problem: Problem, assignments: Assignments, kind: AssignedTaskType,
             per_task: Iterable[tuple[int, Iterable[int]]]) -> dict[str, KafkaStreamsAssignment]:
    """Replace every task of `kind` by the given (task, processes) placement."""
    out = {}
    for pid in problem.process_ids:
        client = assignments.get(pid) or KafkaStreamsAssignment.of(pid)
        for t in client.of_type(kind):
            client = client.remove_task(t)
        out[pid] = client
    for t, procs in per_task:
        for p in procs:
            pid = problem.process_ids[p]
            out[pid] = out[pid].assign_task(AssignedTask(problem.task_ids[t], kind))
    return out


class TaskAssignmentUtils:
    @staticmethod
    def identity_assignment(state: ApplicationState) -> dict[str, KafkaStreamsAssignment]:
        """Every client keeps exactly its previous active and standby tasks."""
        return {pid: KafkaStreamsAssignment.of(pid, [
            *(AssignedTask(t, AssignedTaskType.ACTIVE) for t in sorted(s.previous_active_tasks)),
            *(AssignedTask(t, AssignedTaskType.STANDBY) for t in sorted(s.previous_standby_tasks)
              if t not in s.previous_active_tasks and state.all_tasks[t].is_stateful)])
            for pid, s in state.kafka_streams_states.items()}

    @staticmethod
    def default_standby_task_assignment(state: ApplicationState,
                                        assignments: Assignments) -> dict[str, KafkaStreamsAssignment]:
        """Replace all standbys: num.standby.replicas per stateful task, balanced, sticky, tag-aware."""
        problem = build_problem(state)
        active = _actives(problem, assignments)
        load = [0] * problem.num_processes
        for p in active:
            load[p] += 1
        configs = state.assignment_configs
        standbys = assign_standbys(problem, active, configs.num_standby_replicas, load,
                                   configs.rack_aware_assignment_tags, by_lag=True)
        return _rebuild(problem, assignments, AssignedTaskType.STANDBY, enumerate(standbys))

    @staticmethod
    def optimize_rack_aware_active_tasks(state: ApplicationState, assignments: Assignments,
                                         tasks: Iterable[str] | None = None, traffic_cost: int | None = None,
                                         non_overlap_cost: int | None = None) -> dict[str, KafkaStreamsAssignment]:
        """Min-cost re-placement of the given active tasks (default: all), clients keep their task counts."""
        problem = build_problem(state)
        active = _actives(problem, assignments)
        index = {t: i for i, t in enumerate(problem.task_ids)}
        chosen = sorted(index[t] for t in (tasks if tasks is not None else problem.task_ids))
        configs = state.assignment_configs
        default_traffic, default_non_overlap = configured_costs(configs)
        if problem.racks_known:
            optimize_actives(problem, chosen, active,
                             default_traffic if traffic_cost is None else traffic_cost,
                             default_non_overlap if non_overlap_cost is None else non_overlap_cost,
                             configs.rack_aware_assignment_strategy == "balance_subtopology")
        return _rebuild(problem, assignments, AssignedTaskType.ACTIVE, ((t, [active[t]]) for t in chosen))

    @staticmethod
    def optimize_rack_aware_standby_tasks(state: ApplicationState,
                                          assignments: Assignments) -> dict[str, KafkaStreamsAssignment]:
        """Greedy standby swaps that lower changelog cross-rack traffic."""
        problem = build_problem(state)
        active = _actives(problem, assignments)
        index = {t: i for i, t in enumerate(problem.task_ids)}
        standbys: list[list[int]] = [[] for _ in problem.task_ids]
        warmups = [-1] * problem.num_tasks
        for p, pid in enumerate(problem.process_ids):
            client = assignments.get(pid)
            for t in client.of_type(AssignedTaskType.STANDBY) if client else ():
                standbys[index[t]].append(p)
            for t in client.of_type(AssignedTaskType.WARMUP) if client else ():
                warmups[index[t]] = p
        if problem.racks_known:
            swap_standbys(problem, active, standbys, warmups, state.assignment_configs.rack_aware_assignment_tags)
        return _rebuild(problem, assignments, AssignedTaskType.STANDBY, enumerate(standbys))
