"""Apache Kafka's jars resolved from Maven Central by the `java/` project, cached outside the checkout.

`java/pom.xml` is the one place that names the Kafka release (`kafka.version`) and the older Kafka
Streams releases the tests run (`legacy.streams.versions`). Resolution runs Maven once per release
and copies the jars to `~/.cache/kprotocol/kafka-<version>/libs` (`KPROTOCOL_CACHE` moves the root);
later runs only check that the directory is complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

JAVA_DIR = Path(os.environ.get("KPROTOCOL_JAVA_DIR", Path(__file__).resolve().parents[2] / "java"))
POM = JAVA_DIR / "pom.xml"
LEGACY_POM = JAVA_DIR / "legacy-streams" / "pom.xml"
EXAMPLES_POM = JAVA_DIR / "streams-examples" / "pom.xml"
PROJECT_JAR = JAVA_DIR / "target" / "kprotocol-java.jar"


class ToolchainError(RuntimeError):
    """Java, Maven or a Kafka artifact is missing; the message is one line saying what to do."""


def cache_root() -> Path:
    return Path(os.environ.get("KPROTOCOL_CACHE", Path.home() / ".cache" / "kprotocol"))


@functools.cache
def pom_properties() -> dict[str, str]:
    """The `<properties>` of java/pom.xml (a flat list of simple elements)."""
    if not POM.is_file():
        raise ToolchainError(f"{POM} not found: the Kafka toolchain needs a kprotocol checkout")
    block = re.search(r"<properties>(.*?)</properties>", POM.read_text(encoding="utf-8"), re.S)
    return dict(re.findall(r"<([\w.]+)>([^<]*)</\1>", block.group(1) if block else ""))


def kafka_version() -> str:
    return pom_properties()["kafka.version"]


def legacy_streams_versions() -> tuple[str, ...]:
    return tuple(v.strip() for v in pom_properties()["legacy.streams.versions"].split(",") if v.strip())


def require(tool: str) -> str:
    """The path of `tool` on PATH, or a one-line ToolchainError."""
    path = shutil.which(tool)
    if path is None:
        raise ToolchainError(f"`{tool}` not found on PATH: Apache Kafka in the test loop needs Java 17+ and Maven "
                             "(Debian: apt-get install openjdk-17-jdk-headless maven)")
    return path


def _mvn(pom: Path, *args: str) -> None:
    cmd = [require("mvn"), "-B", "-q", "-f", str(pom), *args]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-30:])
        raise ToolchainError(f"Maven failed ({' '.join(args)}): {tail}")


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock between processes (pytest workers, a person's shell) on `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _resolve(pom: Path, libs: Path, *props: str) -> Path:
    """Copy the runtime dependencies of `pom` into `libs` unless a run with the same pom completed it."""
    done_marker = libs / ".complete"
    stamp = hashlib.sha256(pom.read_bytes() + repr(props).encode()).hexdigest()
    if done_marker.is_file() and done_marker.read_text() == stamp:
        return libs
    require("java")
    with _locked(libs.parent):
        if done_marker.is_file() and done_marker.read_text() == stamp:
            return libs
        tmp = libs.with_name(libs.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"kprotocol: resolving {libs.parent.name} from Maven Central into {libs}", file=sys.stderr)
        _mvn(pom, *props, "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={tmp}")
        shutil.rmtree(libs, ignore_errors=True)
        tmp.rename(libs)
        done_marker.write_text(stamp)
    return libs


def kafka_libs() -> Path:
    """The directory of the current Kafka release's jars (broker, tools, Streams, clients, logging)."""
    return _resolve(POM, cache_root() / f"kafka-{kafka_version()}" / "libs")


def legacy_streams_libs(version: str) -> Path:
    """The jars of an older Kafka Streams release with its matching clients."""
    return _resolve(LEGACY_POM, cache_root() / f"kafka-streams-{version}" / "libs", f"-Dstreams.version={version}")


def streams_examples_libs() -> Path:
    """The jar of Apache Kafka's published Kafka Streams examples (java/streams-examples/pom.xml)."""
    version = re.search(r"<examples.version>([^<]+)<", EXAMPLES_POM.read_text(encoding="utf-8")).group(1)
    return _resolve(EXAMPLES_POM, cache_root() / f"kafka-streams-examples-{version}" / "libs")


def project_jar() -> Path:
    """kprotocol's own Java programs, rebuilt when a source under java/src is newer than the jar."""
    with _locked(PROJECT_JAR.parent):
        sources = [p for p in (JAVA_DIR / "src").rglob("*") if p.is_file()] + [POM]
        newest = max(p.stat().st_mtime for p in sources)
        if not PROJECT_JAR.is_file() or PROJECT_JAR.stat().st_mtime < newest:
            require("java")
            _mvn(POM, "package", "-DskipTests")
            PROJECT_JAR.touch()
    return PROJECT_JAR


def classpath(libs: Path | None = None, extra: tuple[Path, ...] = ()) -> str:
    """A Java class path: kprotocol's jar first, then every jar of `libs` (the current release by default)
    and of the `extra` directories."""
    libs = libs or kafka_libs()
    return os.pathsep.join([str(project_jar()), str(libs / "*"), *(str(d / "*") for d in extra)])


def java_command(main_class: str, *args: str, libs: Path | None = None, heap: str = "512m",
                 jvm_options: tuple[str, ...] = (), extra_libs: tuple[Path, ...] = ()) -> list[str]:
    """The argv that runs `main_class` with Kafka's jars and the project's log4j2 configuration."""
    return [require("java"), f"-Xmx{heap}", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={JAVA_DIR / 'src' / 'main' / 'resources' / 'log4j2.properties'}",
            *jvm_options, "-cp", classpath(libs, extra_libs), main_class, *args]
