"""The gateway's configuration (TOML, flags winning, Kafka client properties) and its SASL pieces, offline."""

from __future__ import annotations

import argparse
import logging
import ssl
from pathlib import Path

import orjson
import pytest

from compat.gateway.config import ConfigError, JsonFormatter, apply, load_toml, read_properties, upstream_security
from compat.gateway.sasl import Credentials, SaslTracker, ScramClient
from kprotocol.cli import build_parser
from kprotocol.registry import message_class
from kprotocol.toolchain.certs import CertificateAuthority


def _gateway_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices["gateway"]


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["gateway", *argv])


def test_toml_fills_what_the_flags_leave(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('upstream = "broker:9093"\nlisten = "0.0.0.0:9300"\ngroups = ["a", "b"]\n'
                      'initial_rebalance_delay_ms = 0\nuvloop = false\nmetrics = "127.0.0.1:9404"\n'
                      '[group_config]\n"streams.session.timeout.ms" = "10000"\n'
                      '[upstream_config]\n"security.protocol" = "SASL_SSL"\n')
    args = _args("--config", str(config), "--listen", "127.0.0.1:9400")
    apply(args, _gateway_parser(), load_toml(config))
    assert args.upstream == ("broker", 9093) and args.listen == ("127.0.0.1", 9400)  # the flag wins
    assert args.group == ["a", "b"] and args.initial_rebalance_delay_ms == 0 and args.uvloop is False
    assert args.group_config == ["streams.session.timeout.ms=10000"]
    assert args.metrics == ("127.0.0.1", 9404) and args.upstream_config == {"security.protocol": "SASL_SSL"}


@pytest.mark.parametrize("text, error", [
    ('listen_port = 1\n', "listen_port: not a gateway setting"),
    ('initial_rebalance_delay_ms = "soon"\n', "initial_rebalance_delay_ms: an integer"),
    ('log_format = "xml"\n', "log_format: one of text, json"),
    ('verbose = "yes"\n', "verbose: true or false"),
    ('upstream = "no-port"\n', "upstream:"),
    ('upstream = [\n', "gateway.toml:"),
])
def test_bad_toml_names_the_setting(tmp_path: Path, text: str, error: str) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=error):
        apply(_args(), _gateway_parser(), load_toml(config))


def test_kafka_client_properties(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path, "ca")
    props = tmp_path / "client.properties"
    props.write_text("# an application's file\nsecurity.protocol = SASL_SSL\n"
                     f"ssl.truststore.location={ca.cert}\nssl.truststore.type=PEM\n"
                     "ssl.endpoint.identification.algorithm=\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
                     '    username="svc" password="p\\"w";\nsome.other.setting: 5\n')
    parsed = read_properties(props)
    assert parsed["some.other.setting"] == "5" and parsed["ssl.endpoint.identification.algorithm"] == ""
    security = upstream_security(parsed)
    assert security.protocol == "SASL_SSL" and security.sasl
    assert security.credentials == Credentials("SCRAM-SHA-512", "svc", 'p"w')
    assert security.ssl_context is not None and not security.ssl_context.check_hostname
    assert security.ssl_context.verify_mode == ssl.CERT_REQUIRED
    plain = upstream_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                               "sasl.username": "u", "sasl.password": "p"})
    assert plain.ssl_context is None and plain.credentials == Credentials("PLAIN", "u", "p")


@pytest.mark.parametrize("props, error", [
    ({"security.protocol": "TLS"}, "security.protocol=TLS"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI", "sasl.username": "u",
      "sasl.password": "p"}, "GSSAPI"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent.jks"}, "JKS"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent.pem"}, "upstream TLS"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"}, "'https' or empty"),
])
def test_bad_properties(props: dict[str, str], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        upstream_security(props)


def test_scram_sha_256_rfc7677_example() -> None:
    """The exchange of RFC 7677 section 3, byte for byte."""
    client = ScramClient(Credentials("SCRAM-SHA-256", "user", "pencil"), nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                         b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(ConnectionError, match="signature"):
        client.verify(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_sasl_tracker_follows_the_brokers_verdict() -> None:
    handshake = message_class("SaslHandshakeRequest")
    authenticate, answer = message_class("SaslAuthenticateRequest"), message_class("SaslAuthenticateResponse")
    scram = SaslTracker()
    scram.request(17, handshake(mechanism="SCRAM-SHA-256"))
    scram.response(17, message_class("SaslHandshakeResponse")(error_code=0))
    scram.request(36, authenticate(auth_bytes=b"n,,n=a=2Cb,r=abc"))
    scram.response(36, answer(error_code=0))
    assert not scram.authenticated  # SCRAM takes two rounds
    scram.request(36, authenticate(auth_bytes=b"c=biws,r=abc,p=xyz"))
    scram.response(36, answer(error_code=0))
    assert scram.authenticated and scram.principal == "User:a,b"
    plain = SaslTracker()
    plain.request(17, handshake(mechanism="PLAIN"))
    plain.request(36, authenticate(auth_bytes=b"\0alice\0wrong"))
    plain.response(36, answer(error_code=58, error_message="Authentication failed"))
    assert plain.failed and not plain.authenticated and plain.principal is None


def test_json_log_lines() -> None:
    record = logging.LogRecord("kprotocol.gateway", logging.WARNING, __file__, 1, "client %s: %s", ("a", 'x"y'),
                               None)
    line = orjson.loads(JsonFormatter().format(record))
    assert line["level"] == "warning" and line["message"] == 'client a: x"y' and line["logger"] == "kprotocol.gateway"
    assert line["time"].endswith("+00:00")
