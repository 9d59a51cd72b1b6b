"""The Spark jobs: plan splits on the driver, decode them in tasks, write the Parquet tables.

    from kprotocol.pipeline import run_offsets
    counts = run_offsets(["/var/lib/kafka/data"], "out/")             # local[*] by default
    counts = run_offsets(paths, "hdfs:///tables", spark=session)        # an existing session
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from kprotocol.capture.walk import MAX_SHARES
from kprotocol.coordinator_topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE
from kprotocol.pipeline.capture_rows import (CAPTURE_SUFFIXES, connection_rows, keyed_segments, owned_rows,
                                             plan_capture)
from kprotocol.pipeline.copies import (COVERAGE, EXCHANGE_IDENTITY, RECORD_IDENTITY, Coverage, coverage, drop_copies,
                                       overlaps)
from kprotocol.pipeline.executor import RUNTIME, runtime_summary, task_runtime
from kprotocol.pipeline.files import KAFKA_SEGMENT, InputFile, list_inputs, partition_of
from kprotocol.pipeline.manifest import mark, rows_written
from kprotocol.pipeline.offsets_rows import TABLES as OFFSETS_TABLES
from kprotocol.pipeline.offsets_rows import split_rows
from kprotocol.pipeline.rebalances import derive, group_records
from kprotocol.pipeline.splits import DEFAULT_SPLIT_BYTES, SegmentSplit, plan_segment
from kprotocol.pipeline.tables import (GROUP_RECORDS, SCHEMAS, WORKING_SCHEMAS, PartWriter, paused_gc, remove_table,
                                       reset, table_dir, to_arrow, write_options, write_part)
from kprotocol.pipeline.topic_names import topic_names
from kprotocol.tools.gcmode import long_run_gc
from kprotocol.tools.inputs import UsageError

SEGMENT_SUFFIXES = (".log",)
COORDINATOR_TOPICS = (CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE)


def spark_session(master: str | None = None, app_name: str = "kprotocol-pipeline", progress: bool = True):
    """The active SparkSession, or a new one (`local[*]` unless `master` or spark-submit says otherwise)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"  # plain `python`: no spark-submit chose a master
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):  # keep a local session on loopback
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        # The JVM talks to its Python workers over a Unix socket: over loopback TCP each task waits
        # about 40 ms more (measured: 52 ms against 12 ms between two trivial tasks).
        builder = builder.config("spark.python.unix.domain.socket.enabled", "true")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (builder.config("spark.ui.showConsoleProgress", str(progress).lower())
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    return session


SOURCES = "sources"  # the name a capture task's exchanges per capture go by among its (table, rows) pairs


def _tally(items: Iterable[tuple[str, Any]], counts: Counter[str], runtimes: list[Any],
           covered: list[Coverage] | None = None, sources: Counter[str] | None = None) -> None:
    """Add a task's (table, rows) pairs to `counts`, its runtime report to `runtimes`, its coverage
    (`copies.Coverage`) to `covered`, its exchanges per capture to `sources`."""
    for name, value in items:
        if name == RUNTIME:
            runtimes.append(value)
        elif name == COVERAGE:
            covered.extend(value)  # type: ignore[union-attr]
        elif name == SOURCES:
            sources.update(value)  # type: ignore[union-attr]
        else:
            counts[name] += value


def _decode_task(out: str) -> Callable[[Iterable[tuple[int, SegmentSplit]]], Iterable[tuple[str, Any]]]:
    def run(parts: Iterable[tuple[int, SegmentSplit]]) -> Iterable[tuple[str, Any]]:
        yield RUNTIME, task_runtime()
        for number, split in parts:
            counts, covered = decode_split(out, number, split)
            yield from counts.items()
            yield COVERAGE, covered
            yield "bytes", split.end - split.start
    return run


def write_split(out: str, number: int, split: SegmentSplit) -> dict[str, int]:
    """Decode one split into its part of every offsets table, and of the group records the rebalances
    stage reads; the row count of each table."""
    return decode_split(out, number, split)[0]


def decode_split(out: str, number: int, split: SegmentSplit) -> tuple[dict[str, int], list[Coverage]]:
    """`write_split`, and the offsets its records part covers (`copies.Coverage`)."""
    with paused_gc():
        tables = split_rows(split)
        for table, rows in tables.items():
            write_part(out, table, number, rows)
        write_part(out, GROUP_RECORDS, number, group_records(tables["records"]))
    records = tables["records"]
    if not isinstance(records, pa.Table):
        records = to_arrow(records, SCHEMAS["records"])
    covered = coverage(_part(out, "records", number), records, "segment", "offset", ("topic", "partition"))
    return {table: len(rows) for table, rows in tables.items()}, covered


def _part(out: str, table: str, number: int, prefix: str = "part") -> str:
    return f"{table_dir(out, table)}/{prefix}-{number:05d}.parquet"


def _options(path: str) -> dict[str, Any]:
    """The Parquet write options of a part file, by its table (the directory it is in)."""
    table = path.rsplit("/", 2)[-2]
    return write_options(SCHEMAS[table] if table in SCHEMAS else WORKING_SCHEMAS[table])


def drop_record_copies(spark: Any, out: str, covered: list[Coverage]) -> int:
    """Drop the records read twice (a segment and its copy) from the offsets tables, with the rows
    derived from them; the copies counted in the duplicates table. Returns the records dropped."""
    meets = overlaps(covered)

    def dependents(part: str) -> dict[str, str]:
        number = int(part.rsplit("-", 1)[1].split(".")[0])
        return {_part(out, "offsets_committed", number): "record_offset",
                _part(out, "group_members", number): "record_offset",
                _part(out, GROUP_RECORDS, number): "offset", _part(out, "problems", number): "offset"}

    def run(parts: list[str]) -> list[tuple[str, str, int]]:
        with paused_gc():
            return drop_copies(parts, RECORD_IDENTITY, "segment", "offset", dependents, _options, prefer="partition")

    found = spark.sparkContext.parallelize(meets, len(meets)).flatMap(run).collect() if meets else []
    return _write_duplicates(out, "records", found, "part")


def _write_duplicates(out: str, table: str, found: list[tuple[str, str, int]], prefix: str) -> int:
    totals: Counter[tuple[str, str]] = Counter()
    for source, first, rows in found:
        totals[(source, first)] += rows
    write_part(out, "duplicates", 0, [{"table": table, "source": s, "copy_of": f, "rows": n}
                                      for (s, f), n in sorted(totals.items())], prefix=prefix)
    return sum(totals.values())


def coordinator_segments(paths: list[str]) -> list[InputFile]:
    """The segments of coordinator topics under `paths`, as `kprotocol offsets decode` reads them: in a
    Kafka data directory only the __consumer_offsets-N, __transaction_state-N and __share_group_state-N
    partitions (Kafka-named segments of other TOPIC-N directories are skipped; other `.log` files are
    read); a partition of another topic, or a segment in one, named explicitly is refused
    (UsageError), not decoded into junk."""
    found: list[InputFile] = []
    for given in paths:
        segments = list_inputs([given], SEGMENT_SUFFIXES)
        kept = [f for f in segments if f.topic in COORDINATOR_TOPICS or f.topic is None
                or not KAFKA_SEGMENT.match(f.uri.rsplit("/", 1)[-1])]
        named = partition_of(given)
        if named and named[0] not in COORDINATOR_TOPICS and len(kept) < len(segments):
            raise UsageError(f"{given}: a partition of topic {named[0]!r}, not of a coordinator topic "
                             f"(the offsets job reads {', '.join(COORDINATOR_TOPICS)})")
        if segments and not kept:
            raise UsageError(f"{given}: no segments of a coordinator topic ({', '.join(COORDINATOR_TOPICS)})")
        found += kept
    found.sort(key=lambda f: f.uri.rsplit("/", 1))
    return found


def plan_offsets(paths: list[str], split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[SegmentSplit]:
    """Every split of every coordinator-topic segment under `paths` (see `coordinator_segments`)."""
    return [s for f in coordinator_segments(paths) for s in plan_segment(f, split_bytes)]


def run_offsets(paths: list[str], out: str, *, spark: Any = None, master: str | None = None,
                split_bytes: int = DEFAULT_SPLIT_BYTES, partitions: int | None = None) -> dict[str, Any]:
    """Decode coordinator-topic segments into records, offsets_committed, group_members, problems and
    rebalances (and topic_names, from a metadata log under `paths`); returns the row count of each
    table, the bytes read and what the tasks ran on (`executor.runtime_summary`)."""
    spark = spark or spark_session(master)
    splits = plan_offsets(paths, split_bytes)
    mark(out, "offsets", "running", inputs=paths)
    reset(out, (*OFFSETS_TABLES, "rebalances", "topic_names", "duplicates"))
    remove_table(out, GROUP_RECORDS)  # what a run that died left
    numbered = list(enumerate(splits))
    slices = max(1, min(len(numbered), partitions or len(numbered)))
    counts: Counter[str] = Counter()
    runtimes: list[Any] = []
    covered: list[Coverage] = []
    _tally(spark.sparkContext.parallelize(numbered, slices).mapPartitions(_decode_task(out)).collect(), counts,
           runtimes, covered)
    counts["duplicate_records"] = drop_record_copies(spark, out, covered)
    if counts["duplicate_records"]:
        for table in OFFSETS_TABLES:  # (Counter.update would add)
            counts[table] = rows_written(out, table, "part")
    counts["rebalances"] = derive_rebalances(spark, out, splits)
    remove_table(out, GROUP_RECORDS)
    counts["topic_names"] = write_topic_names(paths, out)
    counts["splits"] = len(splits)
    written = (*OFFSETS_TABLES, "rebalances", "topic_names", "duplicates")
    mark(out, "offsets", "complete", inputs=paths, tables={t: rows_written(out, t, "part") for t in written})
    return {**counts, **runtime_summary(runtimes)}


CAPTURE_TABLES = ("exchanges", "problems")


def plan_captures(paths: list[str], split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[tuple[str, Any]]:
    """(file, split) for every split of every capture under `paths`."""
    return [s for f in list_inputs(paths, CAPTURE_SUFFIXES) for s in plan_capture(f, split_bytes)]


def _connection_task(out: str, ports: frozenset[int],
                     credentials: bool = False) -> Callable[[int, Iterable[Any]], Iterable[tuple[str, Any]]]:
    def run(index: int, pairs: Iterable[tuple[Any, Any]]) -> Iterable[tuple[str, Any]]:
        exchanges: list[dict[str, Any]] = []
        covered: list[Coverage] = []
        problems: list[dict[str, Any]] = []
        connections = 0
        with paused_gc():
            groups: dict[Any, list[Any]] = {}
            for key, part in pairs:  # this partition's connections, a list of segments per split
                groups.setdefault(key, []).append(part)
            for key, items in groups.items():
                rows, found, decoded = connection_rows(key, items, ports, credentials)
                exchanges += rows
                problems += found
                connections += decoded
            exchanges.sort(key=lambda r: (r["source"], r["request_first_packet"]))
            write_part(out, "exchanges", index, exchanges, prefix="capture")
            write_part(out, "problems", index, problems, prefix="capture")
            sources = Counter(r["source"] for r in exchanges)
            if exchanges:
                times = pa.table({"source": [r["source"] for r in exchanges],
                                  "request_time": [r["request_time"] for r in exchanges]})
                covered = coverage(_part(out, "exchanges", index, "capture"), times, "source", "request_time")
        return [(RUNTIME, task_runtime()), ("exchanges", len(exchanges)), ("problems", len(problems)),
                ("connections", connections), (COVERAGE, covered), (SOURCES, sources)]
    return run


OWNERS_MAX = 8  # captures that need at most this many tasks are read whole by each (`owned_rows`)


def _owned_task(out: str, ports: frozenset[int],
                credentials: bool = False) -> Callable[[int, Iterable[Any]], Iterable[tuple[str, Any]]]:
    def run(index: int, shares: Iterable[tuple[str, tuple[int, int]]]) -> Iterable[tuple[str, Any]]:
        yield RUNTIME, task_runtime()
        for uri, share in shares:
            exchanges = PartWriter(out, "exchanges", index, prefix="capture-owned")
            times: list[float] = []

            def add(row: dict[str, Any]) -> None:
                times.append(row["request_time"])
                exchanges.add(row)

            with long_run_gc():  # rows are streamed out: the collector stays on, seldom
                problems, connections = owned_rows(uri, share, ports, add, credentials)
            write_part(out, "problems", index, problems, prefix="capture-owned")
            written = exchanges.close()
            yield from (("exchanges", written), ("problems", len(problems)), ("connections", connections),
                        (SOURCES, {uri: written}))
            if times:
                yield COVERAGE, [Coverage(_part(out, "exchanges", index, "capture-owned"), (), uri, min(times),
                                          max(times))]
    return run


def run_captures(paths: list[str], out: str, *, spark: Any = None, master: str | None = None,
                 split_bytes: int = DEFAULT_SPLIT_BYTES, partitions: int | None = None,
                 ports: Iterable[int] = (9092,), owners_max: int = OWNERS_MAX,
                 credentials: bool = False) -> dict[str, Any]:
    """Decode pcap/pcapng captures into the exchanges table (and problems). A capture of n splits gets
    min(n, cores) tasks; up to `owners_max` of them (at most 64) each read it whole and decode their
    share of its connections. Beyond that its splits are read in parallel, their segments shuffled by
    connection, each connection decoded whole in one task. SASL credentials are redacted unless
    `credentials`."""
    spark = spark or spark_session(master)
    sc = spark.sparkContext
    inputs = list_inputs(paths, CAPTURE_SUFFIXES)
    mark(out, "captures", "running", inputs=paths)
    reset(out, (*CAPTURE_TABLES, "duplicates"), prefix="capture")
    kafka_ports = frozenset(ports)
    owned: list[tuple[str, tuple[int, int]]] = []
    shuffled = []
    for file in inputs:
        tasks = min(max(1, -(-file.size // max(1, split_bytes))), sc.defaultParallelism)
        if tasks <= min(owners_max, MAX_SHARES):
            owned += [(file.uri, (k, tasks)) for k in range(tasks)]
        else:
            shuffled.append(file)
    splits = [s for f in shuffled for s in plan_capture(f, split_bytes)]
    counts: Counter[str] = Counter(splits=len(owned) + len(splits))
    runtimes: list[Any] = []
    covered: list[Coverage] = []
    sources: Counter[str] = Counter()
    if owned:
        task = _owned_task(out, kafka_ports, credentials)
        _tally(sc.parallelize(owned, len(owned)).mapPartitionsWithIndex(task).collect(), counts, runtimes, covered,
               sources)
    if splits:
        keyed = sc.parallelize(splits, len(splits)).flatMap(lambda s: keyed_segments(s[0], s[1], kafka_ports))
        # More partitions than cores (connections differ wildly in size, small tasks balance the cores),
        # and about 32 MiB of capture each. partitionBy moves the pairs without PySpark's Python-side
        # combining of groupByKey; each task groups its own partition.
        total = sum(f.size for f in shuffled)
        count = partitions or max(4 * sc.defaultParallelism, -(-total // (32 << 20)))
        shuffle = keyed.partitionBy(max(1, count))
        _tally(shuffle.mapPartitionsWithIndex(_connection_task(out, kafka_ports, credentials)).collect(), counts,
               runtimes, covered, sources)
    if not owned and not splits:
        for table in CAPTURE_TABLES:
            write_part(out, table, 0, [], prefix="capture")
    counts["duplicate_exchanges"] = drop_exchange_copies(spark, out, covered)
    counts["exchanges"] -= counts["duplicate_exchanges"]
    silent = [f.uri for f in inputs if not sources[f.uri]]
    hints = dict(sc.parallelize(silent, len(silent)).map(lambda uri: (uri, port_hint(uri, kafka_ports))).collect()
                 if silent else [])
    captures = [{"source": f.uri, "exchanges": sources[f.uri], "hint": hints.get(f.uri)} for f in inputs]
    mark(out, "captures", "complete", inputs=paths, ports=sorted(kafka_ports), captures=captures,
         tables={t: rows_written(out, t, "capture") for t in (*CAPTURE_TABLES, "duplicates")})
    return {**counts, **runtime_summary(runtimes)}


def port_hint(uri: str, ports: frozenset[int]) -> str:
    """Why a capture gave no exchange, as `kprotocol capture summary` says it: no Kafka connection on the
    ports given, and the ports its Kafka requests go to (a local file; elsewhere the command to find them)."""
    from pathlib import Path

    from kprotocol.capture.cli import kafka_request_ports

    given = f"port{'s' * (len(ports) > 1)} {','.join(map(str, sorted(ports)))}"
    if "://" in uri:
        return f"no Kafka connection on {given}: `kprotocol capture summary` on a local copy names its Kafka ports"
    found = [port for port, _ in kafka_request_ports(Path(uri)).most_common() if port not in ports]
    if not found:
        return f"no Kafka connection on {given}, and no Kafka request on any other port"
    seen = ", ".join(map(str, found[:8])) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
    return (f"no Kafka connection on {given}; Kafka requests go to port{'s' * (len(found) > 1)} {seen}: "
            f"try --ports {','.join(map(str, found[:8]))}")


def drop_exchange_copies(spark: Any, out: str, covered: list[Coverage]) -> int:
    """Drop the exchanges decoded twice (a capture and its copy, a pcap and its pcapng conversion) from
    the exchanges table; the copies counted in the duplicates table. Returns the exchanges dropped."""
    meets = overlaps(covered)

    def run(parts: list[str]) -> list[tuple[str, str, int]]:
        with paused_gc():
            return drop_copies(parts, EXCHANGE_IDENTITY, "source", "request_time", lambda _: {}, _options)

    found = spark.sparkContext.parallelize(meets, len(meets)).flatMap(run).collect() if meets else []
    return _write_duplicates(out, "exchanges", found, "capture")


def write_topic_names(paths: list[str], out: str) -> int:
    """The topic_names table, read on the driver from the `__cluster_metadata` log under `paths` (if any)."""
    names = topic_names(paths)
    write_part(out, "topic_names", 0, [{"topic_id": i, "topic": n} for i, n in sorted(names.items())])
    return len(names)


def derive_rebalances(spark: Any, out: str, splits: list[SegmentSplit]) -> int:
    """The rebalances table. A group's records all sit in one coordinator partition, so each Spark task
    takes one partition's group records (segments named outside a partition directory: together; the
    working table its decode tasks wrote), reads them with
    pyarrow (no JVM round trip) and derives that partition's groups."""
    parts: dict[tuple[str | None, int | None], list[int]] = {}
    for number, split in enumerate(splits):  # a partition's segments and their copies in other directories
        parts.setdefault((split.topic, split.partition), []).append(number)
    work = list(parts.values())
    if not work:
        write_part(out, "rebalances", 0, [])
        return 0
    rows = (spark.sparkContext.parallelize(work, len(work))
            .flatMap(lambda numbers: _derive_partition_quietly(out, numbers))
            .collect())
    rows.sort(key=lambda r: (r["group"], r["protocol"], r["epoch"] or 0))
    write_part(out, "rebalances", 0, rows)
    return len(rows)


def _derive_partition_quietly(out: str, numbers: list[int]) -> list[dict[str, Any]]:
    with paused_gc():
        return _derive_partition(out, numbers)


def _derive_partition(out: str, numbers: list[int]) -> list[dict[str, Any]]:
    import pyarrow.dataset as ds

    from kprotocol.pipeline.files import filesystem

    fsys, path = filesystem(table_dir(out, GROUP_RECORDS))
    files = [f"{path}/part-{n:05d}.parquet" for n in numbers]
    table = ds.dataset(files, schema=WORKING_SCHEMAS[GROUP_RECORDS], filesystem=fsys, format="parquet").to_table()
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in table.to_pylist():
        groups.setdefault(row["group"], []).append(row)
    return [r for group, records in groups.items() for r in derive(group, records)]

