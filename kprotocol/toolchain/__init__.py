"""Apache Kafka in the loop: Kafka's jars from Maven Central, a local KRaft broker, Kafka's tools and
the project's Java programs (Kafka Streams test app, round-trip tester), driven from Python."""

from kprotocol.toolchain.broker import KafkaBroker, free_port, run_kafka_tool
from kprotocol.toolchain.maven import (ToolchainError, classpath, java_command, kafka_libs, kafka_version,
                                       legacy_streams_libs, legacy_streams_versions)

__all__ = [
    "KafkaBroker",
    "ToolchainError",
    "classpath",
    "free_port",
    "java_command",
    "kafka_libs",
    "kafka_version",
    "legacy_streams_libs",
    "legacy_streams_versions",
    "run_kafka_tool",
]
