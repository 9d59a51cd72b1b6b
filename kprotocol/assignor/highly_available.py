"""The KIP-441 highly-available assignor, made sticky.

1. A balanced target for stateful actives: previous owners keep tasks within an even quota (releasing first
   the tasks another under-quota process is caught up on), freed tasks go to the least lagging state holder
   with room, the rest is dealt; KIP-925 optimization then re-places them at minimum cost when configured.
2. A target on a process that is not caught up does not take the task yet: it stays on a caught-up process
   (its previous owner if possible), or on the most caught-up one, and the target warms up (at most
   `max.warmup.replicas` warm-ups at a time) while a probing rebalance is scheduled. Once caught up, the
   target wins the task, so repeated rebalances converge to the balanced assignment.
3. Stateless actives water-fill the remaining load so that total actives stay balanced.
4. Standbys: sticky to caught-up holders, balanced, tag-aware; greedy rack-aware swaps.
"""

from __future__ import annotations

from .api import ApplicationState, AssignmentConfigs, TaskAssignment
from .assembly import to_task_assignment
from .balance import even_quotas, fill_quotas, placements
from .problem import Problem, build_problem
from .rack_aware import configured_costs, optimize_actives, swap_standbys
from .standby import assign_standbys
from .sticky import moved_anyway


class HighAvailabilityTaskAssignor:
    def assign(self, application_state: ApplicationState) -> TaskAssignment:
        problem = build_problem(application_state)
        configs = application_state.assignment_configs
        stateful = [t for t in range(problem.num_tasks) if problem.stateful[t]]
        stateless = [t for t in range(problem.num_tasks) if not problem.stateful[t]]
        target = balanced_stateful_target(problem, stateful)
        optimize_for_racks(problem, configs, stateful, target, stateful=True)
        active, pending = hold_back_until_caught_up(problem, stateful, target)
        place_stateless(problem, configs, stateless, active)
        load = [0] * problem.num_processes
        for p in active:
            load[p] += 1
        tags = configs.rack_aware_assignment_tags
        standbys = assign_standbys(problem, active, configs.num_standby_replicas, load, tags, by_lag=True)
        warmups = [-1] * problem.num_tasks
        budget = configs.max_warmup_replicas
        for t in pending:
            p = target[t]
            if budget > 0 and p not in standbys[t]:
                warmups[t] = p
                budget -= 1
        if configs.rack_aware_assignment_strategy != "none" and problem.racks_known:
            swap_standbys(problem, active, standbys, warmups, tags)
        deadline = application_state.now_ms + configs.probing_rebalance_interval_ms if pending else None
        return to_task_assignment(problem, active, standbys, warmups, deadline)


def balanced_stateful_target(problem: Problem, stateful: list[int]) -> list[int]:
    previous = [0] * problem.num_processes
    for t in stateful:
        if problem.prev_active[t] >= 0:
            previous[problem.prev_active[t]] += 1
    quota = even_quotas(problem.capacity, len(stateful), previous)
    spare = [q - c for q, c in zip(quota, previous)]

    def caught_up_elsewhere(t: int) -> bool:
        return any(p != problem.prev_active[t] and spare[p] > 0 and lag <= problem.acceptable_lag
                   for p, lag in problem.state_holders(t).items())

    def lag_rank(t: int, p: int) -> int:
        lag = problem.state_lags[t][p]
        return 0 if lag <= problem.acceptable_lag else lag

    keep_order = sorted(problem.owned_first(stateful), key=caught_up_elsewhere)
    return placements(keep_order, quota, problem.capacity,
                      keep=problem.prev_active, candidates=problem.state_lags, rank=lag_rank)


def optimize_for_racks(problem: Problem, configs: AssignmentConfigs, tasks: list[int], owner: list[int],
                       stateful: bool) -> None:
    """KIP-925 on the target: configured costs for stateful tasks, traffic first for stateless ones; without
    a strategy only tasks that move anyway are steered."""
    if not tasks or not problem.racks_known:
        return
    strategy = configs.rack_aware_assignment_strategy
    if strategy == "none":
        among = set(tasks)
        free = [t for t in moved_anyway(problem, owner) if t in among]
        optimize_actives(problem, free, owner, 1, 0)
    elif stateful:
        optimize_actives(problem, tasks, owner, *configured_costs(configs), strategy == "balance_subtopology")
    else:
        optimize_actives(problem, tasks, owner, len(tasks) + 1, 1, strategy == "balance_subtopology")


def hold_back_until_caught_up(problem: Problem, stateful: list[int], target: list[int]) -> tuple[list[int], list[int]]:
    """Actual actives (stateful ones set, others -1) and the tasks whose move to the target must wait.

    Waiting tasks, those with the fewest caught-up processes first, go to the least loaded caught-up process
    (the previous owner among equals), else to the least lagging one when that lags less than the target."""
    active = [-1] * problem.num_tasks
    load = [0] * problem.num_processes
    waiting = []
    for t in stateful:
        active[t] = target[t]
        if problem.caught_up(t, target[t]):
            load[target[t]] += 1
        else:
            waiting.append(t)
    acceptable, cap = problem.acceptable_lag, problem.capacity

    def caught_up_holders(t: int) -> list[int]:
        return [q for q, lag in problem.state_holders(t).items() if lag <= acceptable]

    pending = []
    for t in sorted(waiting, key=lambda t: (len(caught_up_holders(t)), t)):
        lags = problem.state_holders(t)
        caught = [(load[q] / cap[q], q != problem.prev_active[t], lags[q], q) for q in caught_up_holders(t)]
        if caught:
            q = min(caught)[3]
        else:
            closer = [(lag, load[q] / cap[q], q) for q, lag in lags.items() if lag < problem.lag(t, target[t])]
            q = min(closer)[2] if closer else target[t]
        active[t] = q
        load[q] += 1
        if q != target[t]:
            pending.append(t)
    pending.sort()
    return active, pending


def place_stateless(problem: Problem, configs: AssignmentConfigs, stateless: list[int], active: list[int]) -> None:
    """Give stateless tasks to the least loaded threads (sticky within that), then optimize for racks."""
    base = [0] * problem.num_processes
    for p in active:
        if p >= 0:
            base[p] += 1
    previous = [0] * problem.num_processes
    for t in stateless:
        if problem.prev_active[t] >= 0:
            previous[problem.prev_active[t]] += 1
    quota = fill_quotas(problem.capacity, base, len(stateless), previous)
    owner = placements(problem.owned_first(stateless), quota, problem.capacity,
                       keep=problem.prev_active)
    for t in stateless:
        active[t] = owner[t]
    optimize_for_racks(problem, configs, stateless, active, stateful=False)
