"""A single-node Apache Kafka broker (KRaft, combined broker+controller) on 127.0.0.1.

    with KafkaBroker.start() as broker:
        broker.bootstrap        # "127.0.0.1:PORT"
        broker.data_dir         # its log.dirs, e.g. for __consumer_offsets-N segments

Storage is formatted by Kafka's own storage tool, the ports are free ones, the data sits in a
temporary directory, and the classic, consumer and streams group protocols are enabled. `stop()`
sends SIGTERM to the broker's own PID (a clean controlled shutdown) and SIGKILL only after a time-out.

    with KafkaBroker.start(sasl_plain_users={"alice": "alice-secret"}) as broker:
        broker.sasl_bootstrap   # "127.0.0.1:PORT" of a second listener, SASL_PLAINTEXT with PLAIN

`sasl_plain_users` adds that listener (user name -> password, kept in the listener's JAAS config);
the PLAINTEXT listener stays, and stays the inter-broker one. Without it only PLAINTEXT listens.

    with KafkaBroker.start(tls=BrokerTLS(keystore_pem, ca_pem), scram_users={"bob": "bob-secret"}) as b:
        b.ssl_bootstrap         # an SSL listener (ssl_client_auth="required" for mutual TLS)
        b.sasl_ssl_bootstrap    # a SASL_SSL listener: SCRAM-SHA-256/512 (and PLAIN with sasl_plain_users)

SCRAM credentials are written into the cluster's metadata by Kafka's storage tool (`--add-scram`).
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from kprotocol.connection import Connection
from kprotocol.registry import message_class
from kprotocol.toolchain.maven import ToolchainError, java_command, kafka_libs
from kprotocol.toolchain.processes import die_with_parent, stop_process

READY_TIMEOUT_S = 90.0
TOPIC_ALREADY_EXISTS = 36

BASE_CONFIG = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "group.coordinator.rebalance.protocols": "classic,consumer,streams",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "group.streams.initial.rebalance.delay.ms": "0",
    "group.streams.min.session.timeout.ms": "1000",  # lower bounds only: lets tests time members out quickly
    "group.streams.min.heartbeat.interval.ms": "500",
    "log.flush.interval.messages": "1",
    "log.segment.bytes": str(64 << 20),
}


SASL_LISTENER = "SASL_PLAINTEXT"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SASL_USER_NAME = re.compile(r"[A-Za-z0-9._-]+")      # a JAAS option key is user_<name>
SASL_PASSWORD = re.compile(r"[\x20-\x7e]*")          # printable ASCII (server.properties is ISO 8859-1)


def sasl_plain_config(users: dict[str, str]) -> dict[str, str]:
    """The broker properties of a SASL_PLAINTEXT listener accepting PLAIN logins of `users`."""
    if not users:
        raise ValueError("sasl_plain_users: at least one user")
    options = []
    for name, password in users.items():
        if not SASL_USER_NAME.fullmatch(name):
            raise ValueError(f"SASL user name {name!r}: use letters, digits, '.', '_' or '-'")
        if not SASL_PASSWORD.fullmatch(password) or '"' in password or "\\" in password:
            raise ValueError(f"SASL password of {name!r}: printable ASCII without quotes or backslashes")
        options.append(f'user_{name}="{password}"')
    prefix = f"listener.name.{SASL_LISTENER.lower()}"
    return {
        f"{prefix}.sasl.enabled.mechanisms": "PLAIN",
        f"{prefix}.plain.sasl.jaas.config": f"{PLAIN_LOGIN_MODULE} required {' '.join(options)};",
        "sasl.enabled.mechanisms": "PLAIN",
    }


SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass(frozen=True)
class BrokerTLS:
    """PEM files for the broker's SSL listeners: its key and certificate in one file, and the CA it trusts."""

    keystore: Path
    truststore: Path
    client_auth: str = "none"  # "required": the SSL listener asks for client certificates (mutual TLS)


def tls_config(tls: BrokerTLS, plain_users: dict[str, str] | None, scram: bool) -> dict[str, str]:
    """Properties of the SSL and SASL_SSL listeners (PEM stores, Kafka 2.7+)."""
    props = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls.keystore),
             "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls.truststore),
             "listener.name.ssl.ssl.client.auth": tls.client_auth}
    mechanisms = [*(["PLAIN"] if plain_users else []), *(SCRAM_MECHANISMS if scram else [])]
    if mechanisms:
        props["listener.name.sasl_ssl.sasl.enabled.mechanisms"] = ",".join(mechanisms)
        for mechanism in SCRAM_MECHANISMS if scram else ():
            props[f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config"] = f"{SCRAM_LOGIN_MODULE} required;"
        if plain_users:
            props["listener.name.sasl_ssl.plain.sasl.jaas.config"] = sasl_plain_config(plain_users)[
                f"listener.name.{SASL_LISTENER.lower()}.plain.sasl.jaas.config"]
    return props


def scram_arguments(users: dict[str, str]) -> list[str]:
    """`kafka-storage format` arguments creating each user's SCRAM-SHA-256 and -512 credentials."""
    out = []
    for name, password in users.items():
        if not SASL_USER_NAME.fullmatch(name) or not SASL_PASSWORD.fullmatch(password) \
                or any(c in password for c in '",[]='):
            raise ValueError(f"SCRAM user {name!r}: letters, digits, '.', '_', '-'; printable password "
                             "without quotes, brackets, commas or '='")
        for mechanism in SCRAM_MECHANISMS:
            out += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_kafka_tool(main_class: str, *args: str, timeout: float = 120.0, check: bool = True,
                   libs: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's command-line tools by its main class; stdout and stderr are captured."""
    done = subprocess.run(java_command(main_class, *args, libs=libs), capture_output=True, text=True,
                          timeout=timeout)
    if check and done.returncode != 0:
        raise ToolchainError(f"{main_class} {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done


@dataclass
class KafkaBroker:
    workdir: Path
    port: int
    controller_port: int
    process: subprocess.Popen[bytes]
    keep_workdir: bool = False
    _log_file: object = field(default=None, repr=False)
    sasl_port: int | None = None  # the SASL_PLAINTEXT listener, when started with `sasl_plain_users`
    ssl_port: int | None = None  # the SSL listener, when started with `tls`
    sasl_ssl_port: int | None = None  # the SASL_SSL listener, when started with `tls` and users

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        if self.sasl_port is None:
            raise ToolchainError("this broker has no SASL listener: start it with sasl_plain_users")
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def ssl_bootstrap(self) -> str:
        if self.ssl_port is None:
            raise ToolchainError("this broker has no SSL listener: start it with tls")
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        if self.sasl_ssl_port is None:
            raise ToolchainError("this broker has no SASL_SSL listener: start it with tls and scram_users")
        return f"127.0.0.1:{self.sasl_ssl_port}"

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, workdir: Path | None = None, config: dict[str, str] | None = None,
              heap: str = "768m", *, sasl_plain_users: dict[str, str] | None = None,
              sasl_advertised_port: int | None = None, tls: BrokerTLS | None = None,
              scram_users: dict[str, str] | None = None, ready_timeout: float = READY_TIMEOUT_S) -> KafkaBroker:
        """Format storage, launch the broker and return once it answers Metadata with itself.

        `sasl_plain_users` (user name -> password) adds a SASL_PLAINTEXT listener on a free port with
        the PLAIN mechanism; it advertises `sasl_advertised_port` when given (a proxy in front of it).
        `tls` adds an SSL listener, and with `scram_users` or `sasl_plain_users` a SASL_SSL one.
        Entries of `config` override the generated properties, listeners included."""
        sasl = sasl_plain_config(sasl_plain_users) if sasl_plain_users is not None else {}
        if sasl_advertised_port is not None and not sasl:
            raise ValueError("sasl_advertised_port needs sasl_plain_users")
        libs = kafka_libs()
        keep = workdir is not None
        workdir = Path(workdir or tempfile.mkdtemp(prefix="kprotocol-kafka-"))
        workdir.mkdir(parents=True, exist_ok=True)
        port, controller_port = free_port(), free_port()
        sasl_port = free_port() if sasl else None
        listeners = [f"PLAINTEXT://127.0.0.1:{port}"]
        advertised = list(listeners)
        protocols = [BASE_CONFIG["listener.security.protocol.map"]]
        if sasl_port is not None:
            listeners.append(f"{SASL_LISTENER}://127.0.0.1:{sasl_port}")
            advertised.append(f"{SASL_LISTENER}://127.0.0.1:{sasl_advertised_port or sasl_port}")
            protocols.append(f"{SASL_LISTENER}:{SASL_LISTENER}")
        ssl_port = sasl_ssl_port = None
        if tls is not None:
            ssl_port = free_port()
            listeners.append(f"SSL://127.0.0.1:{ssl_port}")
            protocols.append("SSL:SSL")
            if scram_users or sasl_plain_users:
                sasl_ssl_port = free_port()
                listeners.append(f"SASL_SSL://127.0.0.1:{sasl_ssl_port}")
                protocols.append("SASL_SSL:SASL_SSL")
            advertised = [a for a in listeners]
            if sasl_port is not None:
                advertised[1] = f"{SASL_LISTENER}://127.0.0.1:{sasl_advertised_port or sasl_port}"
            sasl.update(tls_config(tls, sasl_plain_users, bool(scram_users)))
        elif scram_users:
            raise ValueError("scram_users needs tls (the SASL_SSL listener)")
        sasl["listener.security.protocol.map"] = ",".join(protocols)
        props = {
            **BASE_CONFIG,
            "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{controller_port}"]),
            "advertised.listeners": ",".join(advertised),
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
            "log.dirs": str(workdir / "data"),
            **sasl,
            **(config or {}),
        }
        properties = workdir / "server.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
        cluster_id = run_kafka_tool("kafka.tools.StorageTool", "random-uuid", libs=libs).stdout.strip()
        run_kafka_tool("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(properties),
                       "--standalone", *scram_arguments(scram_users or {}), libs=libs)
        log = (workdir / "broker.log").open("wb")
        process = subprocess.Popen(java_command("kafka.Kafka", str(properties), libs=libs, heap=heap),
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, preexec_fn=die_with_parent)
        broker = cls(workdir, port, controller_port, process, keep, log, sasl_port=sasl_port, ssl_port=ssl_port,
                     sasl_ssl_port=sasl_ssl_port)
        try:
            broker._wait_ready(ready_timeout)
        except BaseException:
            broker.stop(keep_workdir=True)
            raise
        return broker

    def _wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        metadata = message_class("MetadataRequest")
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ToolchainError(f"Kafka broker exited with {self.process.returncode}; log: {self.log_path}")
            try:
                with Connection("127.0.0.1", self.port, timeout=2.0) as conn:
                    if conn.send(metadata(topics=[])).brokers:
                        for other in (self.sasl_port, self.ssl_port, self.sasl_ssl_port):
                            if other is not None:  # the other listeners accept connections too
                                socket.create_connection(("127.0.0.1", other), timeout=2.0).close()
                        return
            except (OSError, ValueError) as exc:
                last_error = exc
            time.sleep(0.2)
        raise ToolchainError(f"Kafka broker not ready within {timeout:.0f} s ({last_error}); "
                             f"log: {self.log_path}")

    def connect(self, client_id: str = "kprotocol-test") -> Connection:
        return Connection("127.0.0.1", self.port, client_id=client_id)

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        """Create a topic through kprotocol's own CreateTopics request; an existing topic is fine."""
        request = message_class("CreateTopicsRequest")
        topic = request.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, configs=[
            request.CreatableTopicConfig(name=k, value=v) for k, v in (config or {}).items()])
        with self.connect() as conn:
            response = conn.send(request(topics=[topic], timeout_ms=30000))
        error = response.topics[0].error_code
        if error not in (0, TOPIC_ALREADY_EXISTS):
            raise ToolchainError(f"CreateTopics {name}: error {error} {response.topics[0].error_message}")

    def stop(self, timeout: float = 30.0, keep_workdir: bool | None = None) -> int | None:
        """SIGTERM the broker's PID, wait for its clean shutdown (SIGKILL after `timeout`)."""
        stop_process(self.process, timeout)
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None
        keep = self.keep_workdir if keep_workdir is None else keep_workdir
        if not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return self.process.returncode

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop(keep_workdir=True if exc is not None else None)
