"""Kafka's error codes by name, wherever people read them: the table in kprotocol.errors is the
release's own (org.apache.kafka.common.protocol.Errors, read by a JVM)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kprotocol.errors import ERROR_NAMES, error_name, error_text
from kprotocol.toolchain.maven import kafka_libs, require

LIST_ERRORS = """
public class ListErrors {
    public static void main(String[] args) {
        for (org.apache.kafka.common.protocol.Errors error : org.apache.kafka.common.protocol.Errors.values())
            System.out.println(error.code() + " " + error.name());
    }
}
"""


def test_the_names_are_those_of_the_kafka_release(tmp_path: Path) -> None:
    source = tmp_path / "ListErrors.java"
    source.write_text(LIST_ERRORS)
    result = subprocess.run([require("java"), "-cp", f"{kafka_libs()}/*", str(source)], capture_output=True,
                            text=True, timeout=120, check=True)
    kafka = {int(code): name for code, name in (line.split() for line in result.stdout.splitlines())}
    assert len(kafka) > 130 and ERROR_NAMES == kafka


def test_names_and_text() -> None:
    assert error_name(16) == "NOT_COORDINATOR" and error_name(-1) == "UNKNOWN_SERVER_ERROR"
    assert error_name(30000) == "UNKNOWN_ERROR_CODE_30000"
    assert error_text(69) == "GROUP_ID_NOT_FOUND (69)"
    assert error_text(69, "Group g not found.") == "GROUP_ID_NOT_FOUND (69): Group g not found."
