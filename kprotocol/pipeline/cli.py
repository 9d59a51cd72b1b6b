"""`kprotocol pipeline offsets|captures PATH... --out DIR` and `kprotocol report DIR --out report.html`.

The same module runs under spark-submit (see `kprotocol/pipeline/__main__.py`): there the master
comes from spark-submit, here it is `local[*]` unless `--master` says otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kprotocol.capture.cli import parse_ports
from kprotocol.tools.inputs import UsageError
from kprotocol.tools.interrupts import exit_on_interrupt
from kprotocol.tools.jsontext import dumps


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="files or directories: local paths or URIs (file://, hdfs://, s3a://, s3://, gs://)")
    parser.add_argument("--out", required=True, help="output directory of the Parquet tables")
    parser.add_argument("--master", help="Spark master (default: local[*], or spark-submit's)")
    parser.add_argument("--partitions", type=int, help="Spark partitions (default: one per split)")
    parser.add_argument("--split-mb", type=float, default=64,
                        help="target split size in MiB (default: %(default)s)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="Spark's progress bar on stderr (default: on a terminal)")
    parser.add_argument("--require-accel", action="store_true",
                        help="fail (exit 1) when a task ran without kprotocol's compiled paths")


def register(subparsers: argparse._SubParsersAction) -> None:
    pipeline = subparsers.add_parser("pipeline", help="bulk decoding on Spark into Parquet tables")
    jobs = pipeline.add_subparsers(dest="job", required=True)
    offsets = jobs.add_parser("offsets", help="coordinator-topic segments (__consumer_offsets, __transaction_state, "
                                              "__share_group_state) -> tables")
    _common(offsets)
    offsets.set_defaults(func=_run)
    captures = jobs.add_parser("captures", help="pcap/pcapng captures -> exchanges (and problems)")
    _common(captures)
    captures.add_argument("--ports", type=parse_ports, default=(9092,),
                          help="broker ports carrying Kafka, comma-separated (default 9092)")
    captures.add_argument("--show-credentials", action="store_true",
                          help="keep SASL logins' passwords, proofs and tokens in the exchanges table (redacted by "
                               "default)")
    captures.set_defaults(func=_run)
    package = jobs.add_parser("package", help="kprotocol packed for Spark executors (--archives), with venv-pack")
    package.add_argument("--out", default="dist", help="directory of kprotocol-env.tar.gz (default: %(default)s)")
    package.set_defaults(func=_package)
    report = subparsers.add_parser("report", help="rebalance timelines and tables from the pipeline's tables")
    report.add_argument("dir", help="the pipeline's output directory")
    report.add_argument("--out", required=True, help="report.html, or a .png of the timelines")
    report.add_argument("--group", action="append", help="only this group (repeatable)")
    report.set_defaults(func=_report)


def _run(args: argparse.Namespace) -> int:
    try:
        from kprotocol.pipeline import jobs
    except ImportError as exc:
        sys.stderr.write(f"kprotocol: error: the pipeline needs the `pipeline` extra "
                         f"(pip install 'kprotocol[pipeline]'): {exc}\n")
        return 2

    for path in args.paths:  # local mistakes are told before Spark starts (and logs its start-up)
        if "://" not in path and not Path(path).exists():
            raise FileNotFoundError(2, "No such file or directory", path)
    if args.job == "offsets":
        jobs.coordinator_segments(args.paths)  # another topic named is refused before Spark starts
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    with exit_on_interrupt():  # Ctrl-C: one line, not Py4J's tracebacks (and not PySpark's own handler)
        spark = jobs.spark_session(args.master, progress=progress)
    split_bytes = int(args.split_mb * (1 << 20))
    try:
        if args.job == "captures":
            counts = jobs.run_captures(args.paths, args.out, spark=spark, split_bytes=split_bytes,
                                       partitions=args.partitions, ports=args.ports,
                                       credentials=args.show_credentials)
        else:
            counts = jobs.run_offsets(args.paths, args.out, spark=spark, split_bytes=split_bytes,
                                      partitions=args.partitions)
    finally:
        spark.stop()
    print(dumps({"out": args.out, **counts}))
    return _check_runtime(counts, args.require_accel) or _check_problems(counts, args.out)


def _check_problems(counts: dict, out: str) -> int:
    """Exit 1, as every command, when something in the input does not decode (the rest is in the tables)."""
    if not counts.get("problems"):
        return 0
    sys.stderr.write(f"kprotocol: {counts['problems']} problem(s) in the input (what does not decode): "
                     f"see the problems table in {out}\n")
    return 1


def _check_runtime(counts: dict, required: bool) -> int:
    """A loud warning (an error with --require-accel) when a task ran kprotocol in pure Python."""
    pure = counts.get("pure_python_tasks", 0)
    if not pure:
        return 0
    level = "error" if required else "WARNING"
    sys.stderr.write(
        f"kprotocol: {level}: {pure} of {counts['tasks']} task(s) ran without kprotocol's compiled paths "
        f"(accel in {counts['tasks_accel']}, capture walk in {counts['tasks_walk']}, offsets path in "
        f"{counts['tasks_offsets']}; executor Python: "
        f"{', '.join(counts['executor_pythons'])}): several times slower. Ship the packed environment: "
        f"kprotocol pipeline package --out dist/, then spark-submit --archives "
        f"dist/kprotocol-env.tar.gz#environment with PYSPARK_PYTHON=./environment/bin/python\n")
    return 1 if required else 0


def _package(args: argparse.Namespace) -> int:
    try:
        from kprotocol.pipeline.package import package
    except ImportError as exc:
        sys.stderr.write(f"kprotocol: error: packaging needs venv-pack (pip install venv-pack): {exc}\n")
        return 2
    archive = package(Path(args.out))
    print(dumps({"archive": str(archive), "size": archive.stat().st_size}))
    return 0


def _report(args: argparse.Namespace) -> int:
    if "://" not in args.dir and not Path(args.dir).is_dir():
        if Path(args.dir).exists():
            raise UsageError(f"{args.dir} is not a directory: give the pipeline's --out directory")
        raise FileNotFoundError(2, "No such file or directory", args.dir)
    try:
        from kprotocol.pipeline.report import report_problems, write_report
    except ImportError as exc:
        sys.stderr.write(f"kprotocol: error: the report needs the `pipeline` extra "
                         f"(pip install 'kprotocol[pipeline]'): {exc}\n")
        return 2

    present = _groups(args.dir)
    if present is None:
        raise UsageError(f"{args.dir} holds no group_members table: give the directory `kprotocol pipeline "
                         f"offsets --out` wrote")
    missing = sorted(set(args.group or ()) - present)
    if missing:
        known = ", ".join(sorted(present)[:10]) + (", ..." if len(present) > 10 else "") or "none"
        sys.stderr.write(f"kprotocol: no group {', '.join(missing)} in {args.dir} (groups there: {known})\n")
        if len(missing) == len(set(args.group)):
            return 1
    try:
        groups = write_report(args.dir, Path(args.out), groups=args.group)
    except ValueError as exc:  # a PNG of several groups
        raise UsageError(str(exc)) from None
    print(dumps({"out": args.out, "groups": groups}))
    partial = report_problems(args.dir)
    for reason in partial:  # the report says it too, in a banner at its top
        sys.stderr.write(f"kprotocol: WARNING: partial tables in {args.dir}: {reason}\n")
    return 1 if missing or partial else 0


def _groups(out: str) -> set[str] | None:
    """The groups of the pipeline's group_members table under `out`, or None when there is no such table."""
    import pyarrow.parquet as pq

    from kprotocol.pipeline.files import filesystem
    from kprotocol.pipeline.tables import table_dir

    fsys, path = filesystem(table_dir(out, "group_members"))
    if fsys.get_file_info(path).type == 0:  # pyarrow.fs.FileType.NotFound
        return None
    return set(pq.read_table(path, columns=["group"], filesystem=fsys).column("group").to_pylist())
