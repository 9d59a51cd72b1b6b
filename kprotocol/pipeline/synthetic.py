"""Synthetic pipeline tables of a fleet of Kafka Streams groups, for the report's benchmark and tests.

`write_fleet(out, groups=300, rebalances=1000)` writes what `kprotocol pipeline offsets` would have
written for a year of `groups` streams groups rebalancing `rebalances` times each: the rebalances
table, the group_members rows of every assignment (a target assignment per member per rebalance),
member records with client ids and process ids, and offset commits. Columns are built as Arrow arrays,
so 300,000 rebalances take seconds to write.
"""

from __future__ import annotations

import random
import uuid

import pyarrow as pa

from kprotocol.pipeline.tables import SCHEMAS, write_part

YEAR_MS = 365 * 86_400_000
START_MS = 1_735_689_600_000  # 2025-01-01


def _table(name: str, columns: dict[str, list]) -> pa.Table:
    schema = SCHEMAS[name]
    rows = len(next(iter(columns.values())))
    return pa.Table.from_arrays([pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(rows, f.type)
                                 for f in schema], schema=schema)


def write_fleet(out: str, groups: int = 300, rebalances: int = 1000, members: int = 4, tasks: int = 8,
                seed: int = 7, name_length: int = 0) -> dict[str, int]:
    """Write the tables; returns their row counts. `name_length` pads client ids to that length (long
    names, as Kafka Streams makes them: application id, process UUID, thread)."""
    rng = random.Random(seed)
    counts = {"rebalances": 0, "group_members": 0, "offsets_committed": 0}
    for g in range(groups):
        group = f"app-{g:04d}-streams"
        processes = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(members)]
        ids = [f"{group}-{p}-StreamThread-1-consumer".ljust(name_length, "x") for p in processes]
        clients = [f"{group}-{p[:8]}-StreamThread-1".ljust(name_length, "x") for p in processes]
        reb: dict[str, list] = {c: [] for c in ("group", "protocol", "epoch", "start_timestamp", "end_timestamp",
                                                "duration_ms", "trigger", "members_before", "members_after",
                                                "tasks_moved", "warmup_tasks", "probing")}
        mem: dict[str, list] = {c: [] for c in ("group", "protocol", "generation", "member_id", "client_id",
                                                "process_id", "client_host", "left", "assigned_active",
                                                "assigned_standby", "assigned_warmup", "record_type_name",
                                                "record_offset", "record_timestamp", "source_partition")}
        off: dict[str, list] = {c: [] for c in ("group", "topic", "partition", "offset", "commit_timestamp",
                                                "deleted", "transactional", "record_offset", "record_timestamp",
                                                "source_partition")}
        offset = 0
        times = sorted(rng.randrange(YEAR_MS) for _ in range(rebalances))
        for m in range(members):  # the member records, at the start
            for column, value in (("group", group), ("protocol", "streams"), ("generation", None),
                                  ("member_id", ids[m]), ("client_id", clients[m]), ("process_id", processes[m]),
                                  ("client_host", f"/10.0.{g % 250}.{m}"), ("left", False), ("assigned_active", None),
                                  ("assigned_standby", None), ("assigned_warmup", None),
                                  ("record_type_name", "StreamsGroupMemberMetadata"), ("record_offset", offset),
                                  ("record_timestamp", START_MS), ("source_partition", g % 50)):
                mem[column].append(value)
            offset += 1
        for epoch, at in enumerate(times, start=1):
            duration = int(rng.lognormvariate(6.5, 1.6))  # a median of about 0.7 s, a long tail to minutes
            start = START_MS + at
            shift = epoch % members
            for m in range(members):
                active = [f"0_{t}" for t in range(tasks) if (t + shift) % members == m]
                standby = [f"0_{t}" for t in range(tasks) if (t + shift + 1) % members == m]
                for column, value in (("group", group), ("protocol", "streams"), ("generation", epoch),
                                      ("member_id", ids[m]), ("client_id", None), ("process_id", None),
                                      ("client_host", None), ("left", False), ("assigned_active", active),
                                      ("assigned_standby", standby), ("assigned_warmup", []),
                                      ("record_type_name", "StreamsGroupTargetAssignmentMember"),
                                      ("record_offset", offset), ("record_timestamp", start + duration // 2),
                                      ("source_partition", g % 50)):
                    mem[column].append(value)
                offset += 1
            for column, value in (("group", group), ("protocol", "streams"), ("epoch", epoch),
                                  ("start_timestamp", start), ("end_timestamp", start + duration),
                                  ("duration_ms", duration), ("trigger", "assignment or metadata change"),
                                  ("members_before", ids), ("members_after", ids),
                                  ("tasks_moved", rng.randrange(tasks + 1)), ("warmup_tasks", 0), ("probing", False)):
                reb[column].append(value)
            for partition in range(2):
                for column, value in (("group", group), ("topic", "input"), ("partition", partition),
                                      ("offset", epoch * 100), ("commit_timestamp", start + duration),
                                      ("deleted", False), ("transactional", False), ("record_offset", offset),
                                      ("record_timestamp", start + duration), ("source_partition", g % 50)):
                    off[column].append(value)
                offset += 1
        for name, columns in (("rebalances", reb), ("group_members", mem), ("offsets_committed", off)):
            write_part(out, name, g, _table(name, columns))
            counts[name] += len(columns["group"])
    return counts
