"""The gateway's configuration: one TOML file carrying what the flags carry, and Kafka client properties.

    kprotocol gateway --config gateway.toml [--listen ...]      # a flag given wins over the file

The TOML keys are the flags' names (`upstream`, `listen`, `group = [...]`, `state_topic`, `tls_cert`,
`metrics`, ...; `-` or `_` alike); the table `[upstream_config]` holds Kafka client properties, as does
the file of `--upstream-config` (Java properties syntax): `security.protocol`, `ssl.truststore.*`,
`ssl.keystore.*`, `ssl.endpoint.identification.algorithm`, `sasl.mechanism`, `sasl.jaas.config` or
`sasl.username`/`sasl.password`, the names an application already uses.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import ssl
import stat
import sys
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compat.gateway.sasl import Credentials
from compat.gateway.upstream import UpstreamSecurity

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
KNOWN = {"security.protocol", "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
         "ssl.truststore.certificates", "ssl.ca.location", "ssl.keystore.location", "ssl.keystore.type",
         "ssl.keystore.password", "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
         "ssl.certificate.location", "ssl.key.location", "ssl.endpoint.identification.algorithm",
         "sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password"}


class ConfigError(ValueError):
    """A configuration the gateway cannot run with; the message names the key and why."""


MAX_CONFIG_BYTES = 1 << 20  # a configuration file is small; /dev/zero or a log file given by mistake is not read
SECRETS = re.compile(r"password|secret|jaas\.config", re.IGNORECASE)
_warnings: list[str] = []  # said once logging is set up (its format may come from the file), or by --check-config


def config_warnings() -> list[str]:
    """The warnings reading the configuration gave, each once (and forgotten)."""
    out = list(dict.fromkeys(_warnings))
    _warnings.clear()
    return out


def read_config_file(path: str | Path) -> str:
    """A configuration file's text: a regular file (a FIFO or a device is refused at once, never read)
    of at most MAX_CONFIG_BYTES, UTF-8. A file naming a password or secret that every user may read
    gets a warning (`config_warnings`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes: not a configuration file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    if info.st_mode & stat.S_IROTH and SECRETS.search(text):
        _warnings.append(f"{path} holds a password or secret and every user may read it (chmod o-r {path})")
    return text


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java .properties file: `key=value` or `key: value` lines, `#`/`!` comments, `\\` continuations."""
    out: dict[str, str] = {}
    pending = ""
    for raw in read_config_file(path).splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        pending = ""
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        if match is None:
            out[line] = ""
        else:
            out[match.group(1)] = match.group(2)
    return out


def upstream_security(props: Mapping[str, str]) -> UpstreamSecurity:
    """Kafka client properties -> how the gateway connects upstream (unknown keys are ignored, as Kafka's
    clients warn and go on; wrong values are a ConfigError)."""
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"security.protocol={protocol}: one of {', '.join(PROTOCOLS)}")
    context = _ssl_context(props) if protocol in ("SSL", "SASL_SSL") else None
    credentials = _credentials(props) if protocol.startswith("SASL_") else None
    return UpstreamSecurity(protocol, context, credentials)


def _ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context()
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", ""):
        raise ConfigError(f"ssl.endpoint.identification.algorithm={algorithm}: 'https' or empty")
    context.check_hostname = algorithm == "https"
    trust = props.get("ssl.truststore.location") or props.get("ssl.ca.location")
    trust_type = props.get("ssl.truststore.type", "PEM" if trust and trust.endswith((".pem", ".crt")) else "JKS")
    try:
        if props.get("ssl.truststore.certificates"):
            context.load_verify_locations(cadata=props["ssl.truststore.certificates"])
        elif trust:
            if trust_type.upper() == "PEM" or props.get("ssl.ca.location"):
                context.load_verify_locations(cafile=trust)
            elif trust_type.upper() == "PKCS12":
                context.load_verify_locations(cadata=_pkcs12_certificates(trust, props.get("ssl.truststore.password")))
            else:
                raise ConfigError(f"ssl.truststore.type={trust_type}: the gateway reads PEM or PKCS12 "
                                  "(keytool -importkeystore -deststoretype PKCS12 converts a JKS store)")
        _load_keystore(context, props)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"upstream TLS: {exc}") from None
    return context


def _load_keystore(context: ssl.SSLContext, props: Mapping[str, str]) -> None:
    """The gateway's own certificate for brokers that require one (ssl.client.auth=required)."""
    password = props.get("ssl.key.password") or props.get("ssl.keystore.password")
    if props.get("ssl.certificate.location"):  # librdkafka's names
        context.load_cert_chain(props["ssl.certificate.location"], props.get("ssl.key.location"), password)
        return
    location, kind = props.get("ssl.keystore.location"), props.get("ssl.keystore.type", "JKS").upper()
    if props.get("ssl.keystore.certificate.chain"):
        _load_pem_pair(context, props["ssl.keystore.certificate.chain"], props.get("ssl.keystore.key", ""), password)
    elif location and (kind == "PEM" or location.endswith(".pem")):
        context.load_cert_chain(location, None, password)
    elif location and kind == "PKCS12":
        from cryptography.hazmat.primitives.serialization import pkcs12
        from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

        store = pkcs12.load_key_and_certificates(Path(location).read_bytes(),
                                                 (props.get("ssl.keystore.password") or "").encode() or None)
        key, cert, extra = store
        if key is None or cert is None:
            raise ConfigError(f"ssl.keystore.location={location}: no key and certificate in it")
        chain = b"".join(c.public_bytes(Encoding.PEM) for c in [cert, *extra])
        _load_pem_pair(context, chain.decode(),
                       key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode(), None)
    elif location:
        raise ConfigError(f"ssl.keystore.type={kind}: the gateway reads PEM or PKCS12")


def _load_pem_pair(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """ssl can only load a certificate from a file: a private temporary one, removed at once."""
    fd, name = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        context.load_cert_chain(name, None, password)
    finally:
        os.unlink(name)


def _pkcs12_certificates(path: str, password: str | None) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    store = pkcs12.load_pkcs12(Path(path).read_bytes(), (password or "").encode() or None)
    certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)


def _credentials(props: Mapping[str, str]) -> Credentials:
    mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
    username, password = props.get("sasl.username"), props.get("sasl.password")
    jaas = props.get("sasl.jaas.config")
    if jaas:
        options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in JAAS_OPTION.findall(jaas)}
        username, password = options.get("username", username), options.get("password", password)
    if username is None or password is None:
        raise ConfigError("SASL upstream: sasl.jaas.config with username=\"...\" password=\"...\", "
                          "or sasl.username and sasl.password")
    try:
        return Credentials(mechanism, username, password)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


# --- the TOML file -----------------------------------------------------------------------------------------


def load_toml(path: str | Path) -> dict[str, Any]:
    try:
        return tomllib.loads(read_config_file(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def apply(args: argparse.Namespace, parser: argparse.ArgumentParser, config: Mapping[str, Any]) -> None:
    """Fill `args` from the file wherever the command line left a flag at its default."""
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "config")}
    for raw_key, value in config.items():
        key = raw_key.replace("-", "_")
        if key == "groups":
            key = "group"
        action = actions.get(key)
        if action is None:
            raise ConfigError(f"{raw_key}: not a gateway setting (one of {', '.join(sorted(actions))})")
        default = action.default
        if isinstance(default, str) and action.type is not None:
            default = action.type(default)  # argparse converts a string default too
        if getattr(args, key) != default:
            continue  # given on the command line
        setattr(args, key, _convert(action, raw_key, value))


def _convert(action: argparse.Action, key: str, value: Any) -> Any:
    """A TOML value as the flag's own type would have parsed it."""
    if isinstance(value, dict):
        if action.dest == "upstream_config":
            return {str(k): str(v) for k, v in value.items()}
        return [f"{k}={v}" for k, v in value.items()]  # e.g. [group_config]
    if action.nargs == 0 or isinstance(action.default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: true or false")
        return value
    if isinstance(action, argparse._AppendAction):
        values = value if isinstance(value, list) else [value]
        return [_convert_one(action, key, v, many=True) for v in values]
    return _convert_one(action, key, value)


def _convert_one(action: argparse.Action, key: str, value: Any, many: bool = False) -> Any:
    """One value as the flag's type reads it: a TOML value of another type is a ConfigError."""
    if action.type is int and not (isinstance(value, int) and not isinstance(value, bool)):
        raise ConfigError(f"{key}: an integer, not {_toml_type(value)}")
    if action.type is not int and not isinstance(value, str):
        wanted = "a string or a list of strings" if many else "a string"
        if action.metavar == "KEY=VALUE":
            wanted = 'a table ([KEY] VALUE = "...") or a list of "KEY=VALUE" strings'
        raise ConfigError(f"{key}: {wanted}, not {_toml_type(value)}")
    converted = value
    if action.type is not None and action.type is not int:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: a string")
        try:
            converted = action.type(value)  # type: ignore[misc]
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise ConfigError(f"{key}: {exc}") from None
    if action.choices is not None and converted not in action.choices:
        raise ConfigError(f"{key}: one of {', '.join(map(str, action.choices))}")
    return converted


def _toml_type(value: Any) -> str:
    kinds = {bool: "a boolean", int: "an integer", float: "a number", list: "a list", dict: "a table"}
    return next((name for kind, name in kinds.items() if isinstance(value, kind)), f"a {type(value).__name__}")


# --- the flags of this module's settings, and what they build ----------------------------------------------


def add_arguments(gateway: argparse.ArgumentParser) -> None:
    """TLS, upstream security, metrics, logs and the config file."""
    from kprotocol.tools.inputs import host_port

    gateway.add_argument("--config", type=Path, metavar="FILE",
                         help="a TOML file with any of these settings (a flag given wins over it)")
    gateway.add_argument("--check-config", action="store_true",
                         help="validate the configuration and the upstream connection, print one line, exit 0 or 2")
    gateway.add_argument("--upstream-config", type=Path, metavar="FILE",
                         help="Kafka client properties for the upstream cluster (security.protocol, ssl.*, sasl.*)")
    gateway.add_argument("--tls-cert", type=Path, metavar="PEM", help="the listeners' TLS certificate (chain)")
    gateway.add_argument("--tls-key", type=Path, metavar="PEM", help="its private key")
    gateway.add_argument("--tls-client-ca", type=Path, metavar="PEM",
                         help="require client certificates signed by this CA (mutual TLS)")
    gateway.add_argument("--tls-listen", type=host_port, metavar="HOST:PORT",
                         help="TLS listeners here, while --listen stays plaintext (default: --listen speaks TLS)")
    gateway.add_argument("--sni-suffix", metavar="DOMAIN",
                         help="one TLS port for every broker: broker-<id>.DOMAIN and bootstrap.DOMAIN (SNI)")
    gateway.add_argument("--sni-advertised-port", type=int, default=0, metavar="PORT",
                         help="the port clients reach the SNI listener on, when not its own (a load balancer)")
    gateway.add_argument("--metrics", type=host_port, metavar="HOST:PORT",
                         help="serve /metrics (Prometheus), /healthz and /readyz here")
    gateway.add_argument("--log-format", choices=("text", "json"), default="text", help="log lines (default: text)")


def upstream_properties(args: argparse.Namespace) -> dict[str, str]:
    source = getattr(args, "upstream_config", None)
    if source is None:
        return {}
    if isinstance(source, dict):
        return source
    return read_properties(source)


def listener_tls(args: argparse.Namespace) -> Any:
    """tls.ListenerTLS from the flags, or None."""
    from compat.gateway.tls import ListenerTLS

    if args.tls_cert is None and args.tls_key is None:
        if args.tls_client_ca or args.tls_listen or args.sni_suffix:
            raise ConfigError("--tls-client-ca, --tls-listen and --sni-suffix need --tls-cert and --tls-key")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise ConfigError("--tls-cert and --tls-key go together")
    try:
        return ListenerTLS.load(args.tls_cert, args.tls_key, args.tls_client_ca)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def configure_logging(log_format: str, verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (ISO 8601 UTC), level, logger, message, and the exception if any."""

    def format(self, record: Any) -> str:
        import datetime
        import traceback

        import orjson

        line = {"time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(),
                "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return orjson.dumps(line).decode()


async def check_upstream(bootstrap: tuple[str, int], security: UpstreamSecurity) -> str:
    """Connect (TLS, SASL login, ApiVersions, Metadata) as the gateway will; a line describing the cluster."""
    from compat.gateway.upstream import UpstreamConnection
    from kprotocol.registry import message_class

    connection = UpstreamConnection(bootstrap, security)
    try:
        metadata = await asyncio.wait_for(connection.send(message_class("MetadataRequest")(topics=[])), 20)
    finally:
        connection.close()
    return (f"upstream {bootstrap[0]}:{bootstrap[1]} ({security.protocol}"
            f"{', SASL ' + security.credentials.mechanism if security.credentials else ''}): "
            f"{len(metadata.brokers)} brokers, cluster {metadata.cluster_id}")


def _pairs(flag: str, items: list[str]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise ConfigError(f"{flag} {item!r} is not KEY=VALUE")
        pairs[name.strip()] = value.strip()
    return pairs


def group_configs(items: list[str], base: Any) -> tuple[Any, Any]:
    """--group-config KEY=VALUE items: the streams-group configs and the classic-group bounds
    (group.min.session.timeout.ms, group.max.session.timeout.ms, group.max.size). An unknown name is
    refused with the closest known one."""
    import difflib

    from compat.classic import ClassicConfig
    from kprotocol.streams_group import GroupConfig

    pairs = _pairs("--group-config", items)
    known = [*GroupConfig.kafka_names(), *ClassicConfig.NAMES]
    unknown = sorted(set(pairs) - set(known))
    if unknown:
        hints = [f"{u} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(u, known, 1)) else u
                 for u in unknown]
        raise ConfigError(f"--group-config: unknown group configs: {', '.join(hints)} (known: {', '.join(known)})")
    classic = {k: v for k, v in pairs.items() if k in ClassicConfig.NAMES}
    try:
        return (GroupConfig.from_kafka({k: v for k, v in pairs.items() if k not in classic}, base),
                ClassicConfig.from_kafka(classic))
    except ValueError as exc:
        raise ConfigError(f"--group-config: {exc}") from None


def limits(items: list[str]) -> Any:
    """--limit KEY=VALUE items as the gateway's Limits (their names are declared in limits.py)."""
    import difflib

    from compat.gateway.limits import Limits

    pairs = _pairs("--limit", items)
    for name in sorted(set(pairs) - set(Limits.NAMES)):
        close = difflib.get_close_matches(name, list(Limits.NAMES), 1)
        if close:
            raise ConfigError(f"--limit: unknown limit {name} (did you mean {close[0]}?)")
    try:
        return Limits.from_kafka(pairs)
    except ValueError as exc:
        raise ConfigError(f"--limit: {exc}") from None


def validate(args: argparse.Namespace) -> UpstreamSecurity:
    """Everything start-up checks that needs no network (--check-config runs the same): raises
    ConfigError naming the setting."""
    from compat.gateway.tls import SniRouting
    from kprotocol.streams_group import GroupConfig

    if args.upstream is None:
        raise ConfigError('--upstream HOST:PORT (or upstream = "HOST:PORT" in --config) is required')
    for group in args.group:
        if not group.strip():
            raise ConfigError("--group: an empty group id")
    if args.state is not None and args.state.exists() and not args.state.is_dir():
        raise ConfigError(f"--state {args.state}: a file, not a directory")
    if args.initial_rebalance_delay_ms < 0:
        raise ConfigError("--initial-rebalance-delay-ms must not be negative")
    group_configs(args.group_config, GroupConfig(initial_rebalance_delay_ms=args.initial_rebalance_delay_ms))
    limits(args.limit)
    security = upstream_security(upstream_properties(args))
    listener_tls(args)
    if args.sni_suffix:
        try:
            SniRouting(args.sni_suffix, args.sni_advertised_port)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return security


def check(args: argparse.Namespace) -> int:
    """--check-config: one line on stdout (0) or stderr (2), after the warnings."""
    try:
        security = validate(args)
        for warning in config_warnings():
            print(f"kprotocol gateway: warning: {warning}", file=sys.stderr)
        line = asyncio.run(check_upstream(args.upstream, security))
    except ConfigError as exc:
        print(f"kprotocol gateway: configuration error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ConnectionError, asyncio.TimeoutError, EOFError, ssl.SSLError) as exc:
        print(f"kprotocol gateway: upstream {args.upstream[0]}:{args.upstream[1]} unusable: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    from compat.gateway.cli import banner

    print(f"configuration ok; {line}; {banner(args, limits(args.limit))}")
    return 0
