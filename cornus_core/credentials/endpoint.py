"""The pod-loopback credential endpoint: a small, strict HTTP/1.1 server (h11) per delivery.

``generic`` serves ``GET /credentials/<name>`` as the wire shape (404 for names not served here,
502 with ``{"error": ...}`` when the fetch fails). ``aws-imds`` answers what an unmodified AWS SDK
asks: the container-credentials URL (``AWS_CONTAINER_CREDENTIALS_FULL_URI``) and IMDSv2 (token PUT,
then the role listing and the role's credentials).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from types import TracebackType
from urllib.parse import quote, unquote

import h11

from cornus_core.credentials.credential import (
    Credential,
    CredentialError,
    Fetcher,
    error_json,
    format_rfc3339,
)
from cornus_core.credentials.formats import aws_keys
from cornus_core.netguard import is_loopback_host

log = logging.getLogger(__name__)

PROVIDERS = ("generic", "aws-imds")
CREDENTIALS_PREFIX = "/credentials/"
IMDS_TOKEN_PATH = "/latest/api/token"
IMDS_ROLES_PATH = "/latest/meta-data/iam/security-credentials/"
IMDS_TOKEN_MAX_TTL = 21600
MAX_IMDS_TOKENS = 1024
# AWS SDKs need an expiry; a credential without one is announced for an hour and then asked for again.
AWS_DEFAULT_LIFETIME = timedelta(hours=1)
IDLE_TIMEOUT = 30.0
MAX_HEADER_BYTES = 16 << 10
MAX_BODY_BYTES = 64 << 10

_Document = Callable[[Credential], bytes]


def credential_env_name(name: str) -> str:
    """``CORNUS_CREDENTIAL_<NAME>_URL``: the name upper-cased, every other character than A-Z0-9 as ``_``."""
    return f"CORNUS_CREDENTIAL_{re.sub(r'[^A-Z0-9]', '_', name.upper())}_URL"


def endpoint_env(
    provider: str, names: Iterable[str], port: int, *, host: str = "127.0.0.1", auth_token: str | None = None
) -> dict[str, str]:
    """The app's environment for an endpoint on host:port (computable before it listens)."""
    checked = _checked(provider, names, host)
    base = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    env: dict[str, str] = {}
    owner: dict[str, str] = {}
    for name in checked:
        var = credential_env_name(name)
        if var in owner:
            raise CredentialError(f"credentials {owner[var]!r} and {name!r} both map to {var}")
        owner[var] = name
        env[var] = base + CREDENTIALS_PREFIX + quote(name, safe="")
    if provider == "generic":
        env["CORNUS_CREDENTIALS_URL"] = base + CREDENTIALS_PREFIX
    else:
        env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = env[credential_env_name(checked[0])]
        env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = base + "/"
        if auth_token:
            env["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = auth_token
    return env


def _checked(provider: str, names: Iterable[str], host: str) -> list[str]:
    """The distinct names, once provider, names and host make a valid endpoint."""
    # Secrets are served to the pod only: a wildcard or routable address would hand them to the network.
    if not is_loopback_host(host):
        raise CredentialError(f"credential endpoint host {host!r} is not a loopback address")
    unique = list(dict.fromkeys(names))
    if provider not in PROVIDERS:
        raise CredentialError(
            f"endpoint provider {provider!r} is unknown; expected one of {', '.join(PROVIDERS)}"
        )
    if not unique or not all(unique):
        raise CredentialError(f"{provider} endpoint needs at least one non-empty credential name")
    if provider == "aws-imds" and len(unique) != 1:
        raise CredentialError(
            f"aws-imds endpoint serves exactly one credential (the role), got {', '.join(unique)}"
        )
    return unique


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def _error(status: int, message: str, *headers: tuple[str, str]) -> Response:
    return Response(status, error_json(message), headers=headers)


class CredentialEndpoint:
    """One loopback listener for one delivery; get fetches by name (usually the cache's get)."""

    def __init__(
        self,
        provider: str,
        names: Iterable[str],
        get: Fetcher,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        auth_token: str | None = None,
    ) -> None:
        self.provider = provider
        self.names = _checked(provider, names, host)
        self.host = host
        self._get = get
        self._port = port
        self._auth_token = auth_token
        self._imds_tokens: dict[str, float] = {}
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return self._port

    def env(self) -> dict[str, str]:
        return endpoint_env(
            self.provider, self.names, self._port, host=self.host, auth_token=self._auth_token
        )

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self._port, reuse_address=True)
        self._port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> CredentialEndpoint:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- what a request gets (no sockets here) ------------------------------------------------------

    async def handle(self, method: str, target: str, headers: Mapping[str, str]) -> Response:
        """Answer one request; headers are keyed in lower case."""
        path = target.split("?", 1)[0]
        if self.provider == "aws-imds" and path.startswith("/latest/"):
            return await self._imds(method, path, headers)
        if not (path + "/").startswith(CREDENTIALS_PREFIX):
            return _error(404, f"no such path {path[:200]!r}")
        if method != "GET":
            return _error(405, f"{method} is not allowed on {path[:200]!r}", ("Allow", "GET"))
        name = unquote(path[len(CREDENTIALS_PREFIX) :])
        if self.provider == "generic":
            if not name:
                return Response(200, json.dumps({"names": sorted(self.names)}).encode())
            return await self._serve_credential(name, _wire_document)
        token = headers.get("authorization", "")
        if self._auth_token and not hmac.compare_digest(token.encode(), self._auth_token.encode()):
            return _error(401, "missing or wrong Authorization token")
        return await self._serve_credential(name, _aws_document)

    async def _imds(self, method: str, path: str, headers: Mapping[str, str]) -> Response:
        if path == IMDS_TOKEN_PATH:
            if method != "PUT":
                return _error(405, f"{method} is not allowed on {path}", ("Allow", "PUT"))
            if "x-forwarded-for" in headers:  # as the real IMDS does: a proxied request is not the app's own
                return _error(403, "token requests through a proxy are refused")
            ttl = headers.get("x-aws-ec2-metadata-token-ttl-seconds", "")
            if not (ttl.isascii() and ttl.isdigit() and 1 <= int(ttl) <= IMDS_TOKEN_MAX_TTL):
                return _error(400, f"x-aws-ec2-metadata-token-ttl-seconds must be 1..{IMDS_TOKEN_MAX_TTL}")
            token = self._issue_imds_token(int(ttl))
            return Response(
                200, token.encode(), "text/plain", (("x-aws-ec2-metadata-token-ttl-seconds", ttl),)
            )
        if method != "GET":
            return _error(405, f"{method} is not allowed on {path}", ("Allow", "GET"))
        expires = self._imds_tokens.get(headers.get("x-aws-ec2-metadata-token", ""))
        if expires is None or expires <= time.monotonic():
            return _error(401, "missing, unknown or expired x-aws-ec2-metadata-token")
        if path.rstrip("/") == IMDS_ROLES_PATH.rstrip("/"):
            return Response(200, self.names[0].encode(), "text/plain")
        if path.startswith(IMDS_ROLES_PATH):
            return await self._serve_credential(unquote(path[len(IMDS_ROLES_PATH) :]), _aws_document)
        return _error(404, f"no such metadata path {path[:200]!r}")

    def _issue_imds_token(self, ttl: int) -> str:
        now = time.monotonic()
        for token, expires in list(self._imds_tokens.items()):
            if expires <= now or len(self._imds_tokens) >= MAX_IMDS_TOKENS:
                del self._imds_tokens[token]  # expired, or the oldest when too many are live
        token = secrets.token_urlsafe(32)
        self._imds_tokens[token] = now + ttl
        return token

    async def _serve_credential(self, name: str, document: _Document) -> Response:
        if name not in self.names:
            return _error(404, f"credential {name[:200]!r} is not served here")
        try:
            credential = await self._get(name)
            return Response(200, document(credential))
        except CredentialError as exc:
            return _error(502, str(exc))

    # -- HTTP/1.1 over asyncio streams ----------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        try:
            while await self._exchange(conn, reader, writer):
                conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                writer.write(_encode(conn, _error(exc.error_status_hint, f"bad request: {exc}")))
        except (TimeoutError, ConnectionError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _exchange(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Read one request, answer it; False when the connection is done."""
        request = await _next_event(conn, reader)
        if not isinstance(request, h11.Request):
            return False
        body = 0
        while not isinstance(event := await _next_event(conn, reader), h11.EndOfMessage):
            if not isinstance(event, h11.Data):
                return False
            body += len(event.data)
            if body > MAX_BODY_BYTES:
                writer.write(_encode(conn, _error(413, f"request body over {MAX_BODY_BYTES} bytes")))
                return False
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in request.headers}
        try:
            response = await self.handle(
                request.method.decode("ascii"), request.target.decode("latin-1"), headers
            )
        except Exception:
            log.exception("credential endpoint failed on %r", request.target)
            response = _error(500, "internal error")
        writer.write(_encode(conn, response))
        await writer.drain()
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> object:
    while (event := conn.next_event()) is h11.NEED_DATA:
        conn.receive_data(await asyncio.wait_for(reader.read(65536), IDLE_TIMEOUT))
    return event


def _encode(conn: h11.Connection, response: Response) -> bytes:
    headers = [
        ("Content-Type", response.content_type),
        ("Content-Length", str(len(response.body))),
        ("Cache-Control", "no-store"),
        *response.headers,
    ]
    reason = HTTPStatus(response.status).phrase.encode()
    return b"".join(
        (
            conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason)) or b"",
            conn.send(h11.Data(data=response.body)) or b"",
            conn.send(h11.EndOfMessage()) or b"",
        )
    )


def _wire_document(credential: Credential) -> bytes:
    return credential.to_json()


def _aws_document(credential: Credential) -> bytes:
    """The shape both the container-credentials URL and IMDS answer with."""
    keys = aws_keys(credential)
    now = datetime.now(UTC).replace(microsecond=0)
    expiration = credential.expiration or now + AWS_DEFAULT_LIFETIME
    document = {
        "Code": "Success",
        "LastUpdated": format_rfc3339(now),
        "Type": "AWS-HMAC",
        "AccessKeyId": keys.access_key_id,
        "SecretAccessKey": keys.secret_access_key,
        "Token": keys.session_token or "",
        "Expiration": format_rfc3339(expiration),
    }
    return json.dumps(document).encode()
