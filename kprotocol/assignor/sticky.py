"""The sticky assignor with the broker's KIP-1071 semantics, at process granularity.

Actives stay with their previous owner while it is within an even quota, then go to previous standby
holders, then are dealt over the least loaded processes; standbys follow the same order of preference.
Racks, when known, only steer tasks that move anyway (KIP-925 costs among them), so stickiness is untouched.
"""

from __future__ import annotations

import numpy as np

from .api import ApplicationState, TaskAssignment
from .assembly import to_task_assignment
from .balance import even_quotas, placements
from .problem import Problem, build_problem
from .rack_aware import configured_costs, optimize_actives, swap_standbys
from .standby import assign_standbys


class StickyTaskAssignor:
    def assign(self, application_state: ApplicationState) -> TaskAssignment:
        problem = build_problem(application_state)
        configs = application_state.assignment_configs
        active = sticky_actives(problem, configured_costs(configs)[0],
                                configs.rack_aware_assignment_strategy == "balance_subtopology")
        load = np.bincount(np.asarray(active, dtype=np.int64), minlength=problem.num_processes).tolist()
        tags = configs.rack_aware_assignment_tags
        standbys = assign_standbys(problem, active, configs.num_standby_replicas, load, tags)
        if configs.rack_aware_assignment_strategy != "none" and problem.racks_known:
            swap_standbys(problem, active, standbys, [-1] * problem.num_tasks, tags)
        return to_task_assignment(problem, active, standbys)


def sticky_actives(problem: Problem, traffic_cost: int, balance_subtopology: bool) -> list[int]:
    previous = np.bincount(np.asarray(problem.prev_active, dtype=np.int64) + 1,
                           minlength=problem.num_processes + 1)[1:].tolist()
    quota = even_quotas(problem.capacity, problem.num_tasks, previous)
    active = placements(problem.owned_first(range(problem.num_tasks)), quota, problem.capacity,
                        keep=problem.prev_active, candidates=problem.prev_standby)
    if problem.racks_known:
        optimize_actives(problem, moved_anyway(problem, active), active, traffic_cost, 0, balance_subtopology)
    return active


def moved_anyway(problem: Problem, owner: list[int]) -> list[int]:
    """Tasks placed on a process that had no state nor ownership of them: free to go elsewhere."""
    return [t for t in range(problem.num_tasks)
            if owner[t] != problem.prev_active[t] and owner[t] not in problem.previous_standbys(t)
            and owner[t] not in problem.state_holders(t)]
