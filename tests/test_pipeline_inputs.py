"""What the pipeline and `offsets decode` read (no Spark session needed): only coordinator topics from a
Kafka data directory, other topics named explicitly refused with one line, URIs of Hadoop filesystems;
and a command's module imported only when that command runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kprotocol.cli import main as cli_main
from kprotocol.pipeline.files import pyarrow_uri
from kprotocol.pipeline.jobs import plan_offsets
from kprotocol.tools.inputs import UsageError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "fixtures" / "kafka" / "data"
SEGMENT = "00000000000000000000.log"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A broker's data directory: coordinator partitions beside an ordinary topic's and the metadata log
    (copies of a consumer-offsets segment, which would decode into junk records if they were read)."""
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    for other in ("orders-0", "__cluster_metadata-0"):
        (data / other).mkdir()
        shutil.copy(DATA / "__consumer_offsets-0" / SEGMENT, data / other / SEGMENT)
    return data


def test_a_data_directory_gives_only_coordinator_topics(data_dir: Path) -> None:
    splits = plan_offsets([str(data_dir)])
    assert sorted({(s.topic, s.partition) for s in splits}) == [
        ("__consumer_offsets", 0), ("__consumer_offsets", 3), ("__transaction_state", 0)]
    uri = f"file://{data_dir}"
    assert [s.uri for s in plan_offsets([uri])] == [uri + s.uri[len(str(data_dir)):] for s in splits]
    # Segments outside any TOPIC-N directory (a gateway's state, a copied file) are still read.
    assert len(plan_offsets([str(ROOT / "fixtures" / "offsets")])) == 4


@pytest.mark.parametrize("name", ["orders-0", f"orders-0/{SEGMENT}", "__cluster_metadata-0"])
def test_another_topic_named_explicitly_is_refused(data_dir: Path, name: str, capsys) -> None:
    with pytest.raises(UsageError, match="not of a coordinator topic"):
        plan_offsets([str(data_dir / name)])
    # The command line says so in one line before Spark starts (exit 2), as `offsets decode` does.
    for command in (["pipeline", "offsets", str(data_dir / name), "--out", str(data_dir / "out")],
                    ["offsets", "decode", str(data_dir / name)]):
        assert cli_main(command) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "not of a coordinator topic" in err, err
    assert not (data_dir / "out").exists()


def test_offsets_decode_of_zeros_reports_the_problem(tmp_path: Path, capsys) -> None:
    zeros = tmp_path / "zeros.log"
    zeros.write_bytes(bytes(64 << 20))
    assert cli_main(["offsets", "decode", str(zeros)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and f"no record batch: {64 << 20} bytes of zeros" in err
    # A segment whose tail is zeros (preallocated by the broker) reads as before, without a problem.
    padded = tmp_path / "padded.log"
    padded.write_bytes((DATA / "__consumer_offsets-0" / SEGMENT).read_bytes() + bytes(1 << 20))
    assert cli_main(["offsets", "decode", str(padded)]) == 0
    assert capsys.readouterr().out.count("\n") > 0


def test_hadoop_s3_names_are_pyarrows() -> None:
    assert pyarrow_uri("s3a://bucket/kafka/data") == "s3://bucket/kafka/data"
    assert pyarrow_uri("s3n://bucket/x") == "s3://bucket/x"
    assert pyarrow_uri("hdfs://nn:8020/kafka") == "hdfs://nn:8020/kafka"
    assert pyarrow_uri("/var/lib/kafka") == "/var/lib/kafka"


def test_a_command_imports_only_its_own_module(tmp_path: Path) -> None:
    """`offsets decode` and `pipeline --help` run without importing the gateway (compat), the Kafka
    toolchain or PySpark: a Spark executor's Python needs none of them."""
    probe = ("import sys\nfrom kprotocol.cli import main\n"
             f"main(['offsets', 'decode', {str(DATA / '__consumer_offsets-0')!r}, '--max-records', '1'])\n"
             "try:\n    main(['pipeline', 'offsets', '--help'])\nexcept SystemExit:\n    pass\n"
             "heavy = ('compat', 'kprotocol.toolchain', 'kprotocol.streams_group', 'pyspark')\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy)))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
    listed = subprocess.run([sys.executable, "-m", "kprotocol", "--help"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60).stdout
    from kprotocol.cli import COMMANDS

    assert all(name in listed for name in COMMANDS)


def test_topic_names_as_kafka_reads_its_metadata_log(kafka_broker) -> None:
    """A real broker's __cluster_metadata log: every TopicRecord Kafka's own decoder (kafka-dump-log
    --cluster-metadata-decoder) prints gives the same id -> name."""
    import json

    from kprotocol.pipeline.topic_names import topic_names
    from kprotocol.toolchain.broker import run_kafka_tool
    from kprotocol.toolchain.dump_log import MAIN_CLASS

    kafka_broker.create_topic("kprotocol-named-topic", partitions=2)
    logs = sorted((kafka_broker.data_dir / "__cluster_metadata-0").glob("*.log"))
    assert logs
    done = run_kafka_tool(MAIN_CLASS, "--cluster-metadata-decoder", "--files", ",".join(map(str, logs)))
    expected = {}
    for line in done.stdout.splitlines():
        _, _, payload = line.partition(" payload: ")
        if '"TOPIC_RECORD"' in payload:
            data = json.loads(payload)["data"]
            expected[data["topicId"]] = data["name"]
    assert "kprotocol-named-topic" in expected.values()
    assert expected.items() <= topic_names([str(kafka_broker.data_dir)]).items()
