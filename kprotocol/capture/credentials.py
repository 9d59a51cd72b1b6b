"""Credentials in captured SASL logins, hidden unless asked for (`--show-credentials`).

A SaslAuthenticate request carries the client's SASL message: PLAIN's `authzid NUL user NUL password`,
SCRAM's client-final message with its proof, OAUTHBEARER's bearer token, GSSAPI's Kerberos tokens.
Printed as decoded, a capture of a login hands out the password. `redact_request` replaces the bytes
with a description keeping what helps a diagnosis (the mechanism as recognised, the user name, the
SCRAM nonce) and never the secret.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

SASL_AUTHENTICATE = 36
REDACTED = "<redacted: --show-credentials shows it>"
_SCRAM_FIRST = re.compile(rb"^[nyp][^,]*,[^,]*,n=([^,]*),r=")
_SCRAM_FINAL = re.compile(rb"^c=[^,]*,r=([^,]*)(?:,.*)?,p=")


def describe_auth_bytes(data: bytes) -> dict[str, Any]:
    """What can be told of a client's SASL message without its secret."""
    if data.count(b"\0") == 2 and not data.startswith((b"n,", b"y,", b"p=")):
        _, user, _ = data.split(b"\0")
        return {"mechanism": "PLAIN", "username": user.decode("utf-8", "replace"), "password": REDACTED}
    if (first := _SCRAM_FIRST.match(data)) is not None:
        return {"mechanism": "SCRAM (client-first)", "username": first.group(1).decode("utf-8", "replace")}
    if (final := _SCRAM_FINAL.match(data)) is not None:
        return {"mechanism": "SCRAM (client-final)", "nonce": final.group(1).decode("ascii", "replace"),
                "proof": REDACTED}
    if b"auth=Bearer " in data or data.startswith(b"n,") and b"\x01auth=" in data:
        return {"mechanism": "OAUTHBEARER", "token": REDACTED}
    return {"mechanism": "unrecognised", "bytes": len(data), "content": REDACTED}


def redact_request(api_key: int, body: Any) -> Any:
    """A request's JSON body with its credentials replaced (a copy); other requests as they are."""
    if api_key != SASL_AUTHENTICATE or not isinstance(body, dict) or not isinstance(body.get("authBytes"), str):
        return body
    try:
        data = base64.b64decode(body["authBytes"], validate=True)
    except (binascii.Error, ValueError):
        data = b""
    return {**body, "authBytes": REDACTED, "authBytesSummary": describe_auth_bytes(data)}
