"""The caller-side dialer: reach a destination the way the caller's own traffic would.

Direct, through an HTTP(S) proxy with ``CONNECT`` (Basic auth from the proxy URL's userinfo), or
through SOCKS5 / SOCKS4 (``socks5h`` and ``socks4a`` let the proxy resolve names), as the
``ProxySettings`` and their ``NO_PROXY`` say. Every failure is one ``DialError`` whose ``kind``
(``refused``, ``timeout``, ``error``) is what the app is finally told.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import ssl
from typing import Literal
from urllib.parse import SplitResult, unquote, urlsplit

from python_socks import ProxyConnectionError, ProxyError, ProxyType
from python_socks.async_.asyncio import Proxy

from cornus_core.proxy._address import authority
from cornus_core.proxy.httpproxy import HttpProxyError, connect_request, parse_connect_response
from cornus_core.proxy.settings import ProxySettings

DialKind = Literal["refused", "timeout", "error"]
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]

_DEFAULT_PORTS = {"http": 80, "https": 443, "socks5": 1080, "socks5h": 1080, "socks4": 1080, "socks4a": 1080}
# What a proxy's answer means for the app: SOCKS5 reply codes and HTTP CONNECT statuses.
_SOCKS_KINDS: dict[int, DialKind] = {0x02: "refused", 0x05: "refused", 0x06: "timeout"}
_HTTP_KINDS: dict[int, DialKind] = {403: "refused", 502: "refused", 503: "refused", 504: "timeout"}


class DialError(Exception):
    def __init__(self, kind: DialKind, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind: DialKind = kind
        self.reason = reason


async def dial(
    host: str,
    port: int,
    settings: ProxySettings,
    *,
    timeout: float,
    scheme: str | None = None,
    proxy_tls: ssl.SSLContext | None = None,
) -> Streams:
    """Open a byte stream to ``host:port`` within ``timeout`` seconds, or raise ``DialError``.

    ``scheme`` is what the app speaks, when known (see ``ProxySettings.proxy_for``);
    ``proxy_tls`` verifies an ``https://`` proxy (default: the system's trusted CAs).
    """
    proxy = settings.proxy_for(host, port, scheme)
    target = authority(host, port)
    where = target if proxy is None else f"{target} via {redact(proxy)}"
    try:
        async with asyncio.timeout(timeout):
            if proxy is None:
                return await asyncio.open_connection(host, port)
            return await _via_proxy(proxy, host, port, timeout, proxy_tls)
    except DialError:
        raise
    except TimeoutError:
        raise DialError("timeout", f"{where}: no connection within {timeout:g} s") from None
    except ConnectionRefusedError:
        raise DialError("refused", f"{where}: connection refused") from None
    except OSError as exc:
        raise DialError("error", f"{where}: {exc.strerror or exc}") from None


@functools.cache
def _default_tls() -> ssl.SSLContext:
    return ssl.create_default_context()  # loading the CA store is slow: once per process


def redact(url: str) -> str:
    """The proxy URL without its password, fit for logs and messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username}:***@{netloc}").geturl()


def _parse_proxy(url: str) -> tuple[SplitResult, str, int]:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise DialError("error", f"proxy {redact(url)!r} is not an http, https, socks4(a) or socks5(h) URL")
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        raise DialError("error", f"proxy {redact(url)!r} has a bad port") from None
    return parts, scheme, port


async def _via_proxy(
    url: str, host: str, port: int, timeout: float, proxy_tls: ssl.SSLContext | None
) -> Streams:
    parts, scheme, proxy_port = _parse_proxy(url)
    assert parts.hostname is not None
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    if scheme in ("http", "https"):
        tls = (proxy_tls or _default_tls()) if scheme == "https" else None
        auth = None
        if user is not None:
            auth = "Basic " + base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")
        return await _http_connect(parts.hostname, proxy_port, tls, auth, host, port, url)
    proxy = Proxy(
        ProxyType.SOCKS5 if scheme.startswith("socks5") else ProxyType.SOCKS4,
        parts.hostname,
        proxy_port,
        username=user,
        password=password,
        rdns=scheme in ("socks5h", "socks4a"),
    )
    try:
        sock = await proxy.connect(host, port, timeout=timeout)
    except ProxyConnectionError as exc:
        raise DialError("error", f"proxy {redact(url)} unreachable: {exc}") from None
    except ProxyError as exc:
        kind = _SOCKS_KINDS.get(exc.error_code or 0, "error")
        raise DialError(kind, f"{authority(host, port)} via {redact(url)}: {exc}") from None
    return await asyncio.open_connection(sock=sock)


async def _http_connect(
    proxy_host: str,
    proxy_port: int,
    tls: ssl.SSLContext | None,
    auth: str | None,
    host: str,
    port: int,
    url: str,
) -> Streams:
    where = f"{authority(host, port)} via {redact(url)}"
    try:
        reader, writer = await asyncio.open_connection(proxy_host, proxy_port, ssl=tls)
    except OSError as exc:
        raise DialError("error", f"proxy {redact(url)} unreachable: {exc.strerror or exc}") from None
    kind: DialKind = "error"
    try:
        writer.write(connect_request(host, port, proxy_authorization=auth))
        await writer.drain()
        status, reason = parse_connect_response(await reader.readuntil(b"\r\n\r\n"))
    except asyncio.IncompleteReadError:
        problem = "the proxy closed the connection before answering CONNECT"
    except asyncio.LimitOverrunError:
        problem = "the proxy's answer to CONNECT is too long"
    except HttpProxyError as exc:
        problem = str(exc)
    except BaseException:
        writer.close()
        raise
    else:
        if 200 <= status < 300:
            return reader, writer
        kind = _HTTP_KINDS.get(status, "error")
        problem = f"the proxy answered {status} {reason}".rstrip()
    writer.close()
    raise DialError(kind, f"{where}: {problem}")
