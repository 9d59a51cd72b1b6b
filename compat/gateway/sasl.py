"""SASL in the gateway: clients' own logins passed through, and the gateway's own logins upstream.

Clients authenticate with the brokers themselves: their SaslHandshake and SaslAuthenticate requests
are forwarded like any other and the broker's answers go back unchanged (a wrong password gets the
broker's error, then the broker hangs up). Whether a connection is logged in is the broker's to say:
the gateway answers a managed-group request only after the broker answered its authorization probes
on that connection (authorization.py), which it does only on a connection whose login it completed,
whatever the mechanism (PLAIN, SCRAM, OAUTHBEARER, GSSAPI) and however the requests were pipelined.
`SaslTracker` watches the exchange as the broker reads it (lenient.py) for the logs (as whom) and for
KIP-368's session lifetime: past it, the broker closes the connection at the next request that is not
a SaslHandshake (a re-authentication), and so does the gateway for the requests it answers itself.

`login()` is the gateway's own client side (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, RFC 5802 / 7677)
for its admin, offsets and state-topic connections, with the credentials of --upstream-config.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kprotocol.runtime.struct import Message

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
ROUNDS = {"PLAIN": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2}  # client messages until the login is done


class SaslError(ConnectionError):
    """The broker refused the gateway's own login (its error code and message)."""


@dataclass(frozen=True)
class Credentials:
    mechanism: str
    username: str
    password: str

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"sasl.mechanism {self.mechanism!r}: the gateway logs in with {', '.join(MECHANISMS)}")


class SaslTracker:
    """One client connection's SASL exchange as the broker judged it."""

    def __init__(self) -> None:
        self.mechanism: str | None = None
        self.user: str | None = None
        self.rounds = 0
        self.authenticated = False
        self.failed = False
        self.expires_at: float | None = None  # time.monotonic() past which the broker ends the session (KIP-368)
        self._sent_at = 0.0

    @property
    def principal(self) -> str | None:
        return f"User:{self.user}" if self.authenticated and self.user is not None else None

    def request(self, api_key: int, body: Message) -> None:
        """A SaslHandshake or SaslAuthenticate request the client sends."""
        if api_key == SASL_HANDSHAKE:
            self.mechanism, self.rounds, self.expires_at = body.mechanism, 0, None  # a (re-)authentication
        elif api_key == SASL_AUTHENTICATE:
            self._sent_at = time.monotonic()
            if self.rounds == 0:
                self.user = _user_of(self.mechanism, bytes(body.auth_bytes))

    def response(self, api_key: int, body: Message) -> None:
        """The broker's answer to one of them."""
        if body.error_code != 0:
            self.failed, self.authenticated = True, False
            return
        if api_key == SASL_AUTHENTICATE:
            self.rounds += 1
            lifetime = getattr(body, "session_lifetime_ms", 0) or 0
            if lifetime > 0:  # counted from when the request left: never later than the broker's own deadline
                self.expires_at = self._sent_at + lifetime / 1000
            if self.rounds >= ROUNDS.get(self.mechanism or "", 1 << 30):
                self.authenticated = True

    def confirmed(self) -> None:
        """The broker answered a request that is not a login's after a successful round: logged in
        (how OAUTHBEARER, GSSAPI and any other mechanism's end is learned)."""
        if self.rounds and not self.failed:
            self.authenticated = True

    def expired(self, api_key: int, now: float) -> bool:
        """Whether the broker would close the connection on reading this request (KIP-368)."""
        return self.expires_at is not None and now > self.expires_at and api_key != SASL_HANDSHAKE


def _user_of(mechanism: str | None, token: bytes) -> str | None:
    """The user name in a client's first SASL message (PLAIN: authzid NUL user NUL password)."""
    try:
        if mechanism == "PLAIN":
            parts = token.split(b"\0")
            return parts[1].decode() if len(parts) == 3 else None
        if mechanism in SCRAM_HASHES:
            bare = token.decode().split(",", 2)[2]
            fields = dict(item.split("=", 1) for item in bare.split(","))
            return _unescape(fields["n"])
    except (UnicodeDecodeError, IndexError, KeyError, ValueError):
        return None
    return None


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


Exchange = Callable[[Message, int | None], Awaitable[Message]]


async def login(send: Exchange, credentials: Credentials) -> None:
    """Authenticate the gateway's own connection; `send(request, version)` makes one round trip."""
    from kprotocol.registry import message_class

    handshake = await send(message_class("SaslHandshakeRequest")(mechanism=credentials.mechanism), 1)
    if handshake.error_code:
        raise SaslError(f"SASL mechanism {credentials.mechanism} refused upstream (error {handshake.error_code}; "
                        f"the broker offers {', '.join(handshake.mechanisms)})")
    authenticate = message_class("SaslAuthenticateRequest")

    async def step(token: bytes) -> bytes:
        response = await send(authenticate(auth_bytes=token), None)
        if response.error_code:
            raise SaslError(f"SASL {credentials.mechanism} login of {credentials.username!r} refused upstream: "
                            f"error {response.error_code} {response.error_message or ''}".rstrip())
        return bytes(response.auth_bytes)

    if credentials.mechanism == "PLAIN":
        await step(b"\0" + credentials.username.encode() + b"\0" + credentials.password.encode())
        return
    scram = ScramClient(credentials)
    server_first = await step(scram.first())
    server_final = await step(scram.final(server_first))
    scram.verify(server_final)


class ScramClient:
    """The client side of SCRAM (RFC 5802) without channel binding, as Kafka speaks it."""

    def __init__(self, credentials: Credentials, nonce: str | None = None) -> None:
        self.hash = SCRAM_HASHES[credentials.mechanism]
        self.credentials = credentials
        self.nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        self.bare = f"n={_escape(credentials.username)},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        fields = dict(item.split("=", 1) for item in text.split(","))
        nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        if not nonce.startswith(self.nonce):
            raise SaslError("SCRAM: the server's nonce does not extend the gateway's")
        salted = hashlib.pbkdf2_hmac(self.hash().name, self.credentials.password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", self.hash)
        stored_key = self.hash(client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        message = f"{self.bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored_key, message, self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.digest(salted, b"Server Key", self.hash)
        self._server_signature = hmac.digest(server_key, message, self.hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        fields = dict(item.split("=", 1) for item in server_final.decode().split(","))
        if "e" in fields:
            raise SaslError(f"SCRAM: the server refused the login: {fields['e']}")
        if not hmac.compare_digest(base64.b64decode(fields.get("v", "")), self._server_signature):
            raise SaslError("SCRAM: the server's signature does not match (not the broker holding the credentials)")
