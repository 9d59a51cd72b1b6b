"""TLS on the gateway's client side: its listeners' certificate, mutual TLS and SNI routing.

    tls = ListenerTLS.load("gateway.crt", "gateway.key", client_ca="clients-ca.pem")
    Gateway(..., tls=tls)                         # every listener speaks TLS
    Gateway(..., tls=tls, sni=SniRouting("kafka.example.com", port=9093))

With `client_ca` a client must present a certificate signed by it (mutual TLS); its subject (RFC 4514,
as Kafka names an SSL principal) is logged and kept as the connection's principal. With SNI routing one
TLS port serves every broker: a client reaching `broker-<id>.<suffix>` talks to broker <id>, one reaching
`bootstrap.<suffix>` (or any other name) to the bootstrap broker, and metadata names those hosts, so a
single wildcard certificate for `*.<suffix>` covers the cluster.
"""

from __future__ import annotations

import re
import ssl
import weakref
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ListenerTLS:
    """The server side of the gateway's listeners."""

    context: ssl.SSLContext
    mutual: bool = False
    _names: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary, repr=False)

    @classmethod
    def load(cls, cert: str | Path, key: str | Path, client_ca: str | Path | None = None) -> ListenerTLS:
        """A TLS 1.2+ server context from PEM files; a file that cannot be read is a ValueError."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(str(cert), str(key))
            if client_ca is not None:
                context.load_verify_locations(cafile=str(client_ca))
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"TLS certificate {cert} / key {key} / client CA {client_ca}: {exc}") from None
        tls = cls(context, mutual=client_ca is not None)
        context.sni_callback = tls._remember_name
        return tls

    def _remember_name(self, ssl_object: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> None:
        if name:
            self._names[ssl_object] = name.lower()

    def server_name(self, ssl_object: ssl.SSLObject | None) -> str | None:
        """The host name a client asked for (SNI), if it sent one."""
        return None if ssl_object is None else self._names.get(ssl_object)


def principal(ssl_object: ssl.SSLObject | None) -> str | None:
    """`User:<subject>` of a client's verified certificate (Kafka's default SSL principal), else None."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    from cryptography import x509  # only with mutual TLS

    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()


@dataclass(frozen=True)
class SniRouting:
    """One TLS port for every broker: `broker-<id>.<suffix>` and `bootstrap.<suffix>`."""

    suffix: str
    port: int = 0  # the port clients reach (0: the listener's own)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*", self.suffix):
            raise ValueError(f"SNI suffix {self.suffix!r}: a DNS name such as kafka.example.com")

    def broker_host(self, node_id: int) -> str:
        return f"broker-{node_id}.{self.suffix}"

    @property
    def bootstrap_host(self) -> str:
        return f"bootstrap.{self.suffix}"

    def node_of(self, server_name: str | None) -> int | None:
        """The broker a client asked for by name; None for the bootstrap (or no or another name)."""
        if server_name is None:
            return None
        match = re.fullmatch(rf"broker-(\d+)\.{re.escape(self.suffix.lower())}", server_name.lower())
        return int(match.group(1)) if match else None
