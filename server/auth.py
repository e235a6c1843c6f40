"""Bearer tokens: the caller's full token and the per-pod caretaker tokens the server mints.

A caretaker token is `ct1.<deployment>.<nonce>.<mac>`, where mac = HMAC-SHA256(server secret,
"caretaker|<deployment>|<nonce>"). It names the deployment it was minted for — never the attach
session's id — so a pod can prove which deployment it belongs to and nothing else. It is accepted
only on the caretaker endpoint; the full caller token only on the caller endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from enum import StrEnum

CARETAKER_PREFIX = "ct1"


class Scope(StrEnum):
    CALLER = "caller"
    CARETAKER = "caretaker"


class AuthError(Exception):
    """A request's credentials were missing or wrong (HTTP 401), or had the wrong scope (403)."""

    def __init__(self, message: str, *, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Principal:
    scope: Scope
    deployment: str | None = None  # set for caretaker tokens


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def new_secret() -> bytes:
    return secrets.token_bytes(32)


def new_id(nbytes: int = 16) -> str:
    """An unguessable identifier (sessions, deployments)."""
    return _b64(secrets.token_bytes(nbytes))


class Authenticator:
    def __init__(self, caller_token: str, secret: bytes) -> None:
        if not caller_token:
            raise ValueError("the caller token must not be empty")
        self._caller_token = caller_token.encode()
        self._secret = secret

    def _mac(self, deployment: str, nonce: str) -> str:
        msg = f"caretaker|{deployment}|{nonce}".encode()
        return _b64(hmac.new(self._secret, msg, hashlib.sha256).digest())

    def mint_caretaker_token(self, deployment: str) -> str:
        nonce = new_id(9)
        return f"{CARETAKER_PREFIX}.{deployment}.{nonce}.{self._mac(deployment, nonce)}"

    def identify(self, token: str) -> Principal:
        """Who holds `token`; raises AuthError(401) when it is no valid token at all."""
        if token.startswith(CARETAKER_PREFIX + "."):
            parts = token.split(".")
            if len(parts) == 4:
                _, deployment, nonce, mac = parts
                if hmac.compare_digest(mac.encode(), self._mac(deployment, nonce).encode()):
                    return Principal(Scope.CARETAKER, deployment)
            raise AuthError("invalid caretaker token")
        if hmac.compare_digest(token.encode(), self._caller_token):
            return Principal(Scope.CALLER)
        raise AuthError("invalid token")

    def authorize(self, authorization: str | None, scope: Scope) -> Principal:
        """Check an `Authorization` header value for an endpoint that needs `scope`."""
        if not authorization:
            raise AuthError("missing bearer token")
        kind, _, token = authorization.partition(" ")
        if kind.lower() != "bearer" or not token.strip():
            raise AuthError("expected 'Authorization: Bearer <token>'")
        principal = self.identify(token.strip())
        if principal.scope is not scope:
            raise AuthError(f"a {principal.scope} token is not accepted on the {scope} endpoint", status=403)
        return principal
