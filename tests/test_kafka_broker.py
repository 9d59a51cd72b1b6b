"""The real Apache Kafka broker of the test loop: started from Maven Central's jars, stopped by PID."""

from __future__ import annotations

import os

from kprotocol import message_class
from kprotocol.toolchain import KafkaBroker, kafka_version

STREAMS_GROUP_HEARTBEAT, CONSUMER_GROUP_HEARTBEAT = 88, 68


def test_broker_answers_with_every_group_protocol(kafka_broker: KafkaBroker) -> None:
    with kafka_broker.connect() as conn:
        assert STREAMS_GROUP_HEARTBEAT in conn.api_versions
        assert CONSUMER_GROUP_HEARTBEAT in conn.api_versions
        metadata = conn.send(message_class("MetadataRequest")(topics=[]))
        assert [(b.host, b.port) for b in metadata.brokers] == [("127.0.0.1", kafka_broker.port)]
        features = conn.send(message_class("ApiVersionsRequest")(
            client_software_name="kprotocol-test", client_software_version="1"), version=3)
        finalized = {f.name: f.max_version_level for f in features.finalized_features}
        assert finalized.get("streams.version", 0) >= 1, finalized


def test_own_broker_stops_cleanly_by_pid() -> None:
    broker = KafkaBroker.start()
    pid = broker.pid
    assert broker.process.poll() is None
    broker.stop()
    assert broker.process.poll() is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"broker pid {pid} still exists")
    assert not broker.workdir.exists()
    assert kafka_version().startswith("4.")


def test_broker_dies_with_the_python_process_that_started_it() -> None:
    """Even when Python is killed before it can stop the broker, no broker is left behind."""
    import shutil
    import subprocess
    import sys
    import time

    script = ("import os\nfrom kprotocol.toolchain import KafkaBroker\nb = KafkaBroker.start()\n"
              "print(b.pid, b.workdir, flush=True)\nos._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    pid, workdir = out.stdout.split()[-2:]
    pid = int(pid)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(workdir, ignore_errors=True)
            return
        time.sleep(0.2)
    os.kill(pid, 9)
    raise AssertionError(f"broker {pid} outlived its parent")
