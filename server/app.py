"""cornus-server's WebSocket front: endpoints, authentication, and handing connections to sessions."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Collection
from http import HTTPStatus
from urllib.parse import quote, unquote

from websockets.asyncio.server import Server, ServerConnection, serve, unix_serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from cornus_core.wire import HelloError, WireError, accept_websocket, websocket_options

from .auth import Authenticator, AuthError, Scope
from .backends.base import Backend
from .gateway import Gateway
from .session import Registry

log = logging.getLogger(__name__)

DEPLOY_ATTACH = "/.cornus/v1/deploy/attach"
CARETAKER_ATTACH = "/.cornus/v1/caretaker/attach"
HEALTHZ = "/healthz"
ALL_ENDPOINTS = (DEPLOY_ATTACH, CARETAKER_ATTACH, HEALTHZ)
CARETAKER_ENDPOINTS = (CARETAKER_ATTACH, HEALTHZ)


def _text(status: HTTPStatus, body: str, **headers: str) -> Response:
    return Response(status.value, status.phrase, Headers({"Content-Type": "text/plain", **headers}),
                    (body + "\n").encode())


class CornusServer:
    def __init__(self, *, auth: Authenticator, backend: Backend, gateway: Gateway | None = None,
                 advertise_url: str | None = None) -> None:
        self.auth = auth
        self.backend = backend
        self.gateway = gateway or Gateway(enabled=False)
        self._advertise_url = advertise_url
        self._server: Server | None = None
        self._extra: dict[str, Server] = {}  # url -> a listener serving some endpoints on another address
        self.registry: Registry | None = None

    @property
    def url(self) -> str:
        """The ws:// URL this server listens on (after start)."""
        assert self._server is not None
        return _url_of(self._server)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._server = await serve(self._handle, host, port, process_request=self._check_request,
                                   **websocket_options())
        self.registry = Registry(auth=self.auth, backend=self.backend, gateway=self.gateway,
                                 caretaker_url=(self._advertise_url or self.url) + CARETAKER_ATTACH)
        return self.url

    async def add_listener(self, host: str, port: int = 0, *,
                           endpoints: Collection[str] = CARETAKER_ENDPOINTS) -> str:
        """Serve ``endpoints`` (by default only the caretaker's) on another address as well, e.g. the
        host end of a pod's veth, so that the pod reaches this server without reaching the caller's
        endpoint; returns its ws:// URL. ``close_listener`` (or ``close``) stops it."""
        if self.registry is None:
            raise RuntimeError("start the server before adding listeners")
        check = functools.partial(self._check_request, endpoints=frozenset(endpoints))
        server = await serve(self._handle, host, port, process_request=check, **websocket_options())
        url = _url_of(server)
        self._extra[url] = server
        return url

    async def add_unix_listener(self, path: str, *, endpoints: Collection[str] = CARETAKER_ENDPOINTS) -> str:
        """Serve ``endpoints`` (by default only the caretaker's) on the unix socket ``path`` as well, for a
        pod with no network path to this server but the same filesystem (a user-namespace pod). The socket
        is made accessible to its owner only. Returns ``ws+unix://<path, percent-encoded>``, the form the
        caretaker dials; ``close_listener`` stops it and removes the socket."""
        if self.registry is None:
            raise RuntimeError("start the server before adding listeners")
        check = functools.partial(self._check_request, endpoints=frozenset(endpoints))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a stale socket of a crashed run
        server = await unix_serve(self._handle, path, process_request=check, **websocket_options())
        os.chmod(path, 0o600)
        url = unix_url(path)
        self._extra[url] = server
        return url

    async def close_listener(self, url: str) -> None:
        """Stop a listener ``add_listener`` or ``add_unix_listener`` made (and the connections it
        accepted); unknown URLs are fine."""
        server = self._extra.pop(url, None)
        if server is not None:
            server.close()
            await server.wait_closed()
            if url.startswith(UNIX_SCHEME):
                with contextlib.suppress(OSError):
                    os.unlink(_unix_path(url))

    async def close(self) -> None:
        for url in list(self._extra):
            await self.close_listener(url)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def __aenter__(self) -> CornusServer:
        if self._server is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_request(self, connection: ServerConnection, request: Request, *,
                       endpoints: Collection[str] = ALL_ENDPOINTS) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path not in endpoints:
            return _text(HTTPStatus.NOT_FOUND, f"no endpoint {path}")
        if path == HEALTHZ:
            return _text(HTTPStatus.OK, "ok")
        scope = Scope.CALLER if path == DEPLOY_ATTACH else Scope.CARETAKER
        try:
            principal = self.auth.authorize(request.headers.get("Authorization"), scope)
        except AuthError as exc:
            if exc.status == 403:
                return _text(HTTPStatus.FORBIDDEN, str(exc))
            return _text(HTTPStatus.UNAUTHORIZED, str(exc), **{"WWW-Authenticate": 'Bearer realm="cornus"'})
        if scope is Scope.CARETAKER:
            assert self.registry is not None
            if principal.deployment not in self.registry.deployments:
                return _text(HTTPStatus.FORBIDDEN, "this caretaker's deployment is not live on this server")
        return None

    async def _handle(self, ws: ServerConnection) -> None:
        assert self.registry is not None and ws.request is not None
        path = ws.request.path.split("?", 1)[0]
        try:
            mux = await accept_websocket(ws)
        except (HelloError, WireError, OSError) as exc:
            log.info("connection from %s failed its hello: %s", ws.remote_address, exc)
            return
        try:
            if path == DEPLOY_ATTACH:
                await self.registry.open(mux).run()
            else:
                principal = self.auth.identify(ws.request.headers["Authorization"].split(" ", 1)[1].strip())
                session = self.registry.deployments.get(principal.deployment or "")
                if session is not None:
                    await session.serve_caretaker(mux)
        finally:
            await mux.aclose(timeout=2)


UNIX_SCHEME = "ws+unix://"


def unix_url(path: str) -> str:
    """The URL of a unix-socket listener: ``ws+unix://`` and the socket path with every ``/`` encoded."""
    return UNIX_SCHEME + quote(path, safe="")


def _unix_path(url: str) -> str:
    return unquote(url[len(UNIX_SCHEME):])


def _url_of(server: Server) -> str:
    host, port = next(iter(server.sockets)).getsockname()[:2]
    host = f"[{host}]" if ":" in host else host
    return f"ws://{host}:{port}"
