"""Proxies: sans-IO SOCKS5 and HTTP-proxy parsers, the app-facing listener, transparent capture
(original destination and hostname sniffing) and the caller-side dialer."""

from __future__ import annotations

from cornus_core.proxy.dialer import DialError, dial
from cornus_core.proxy.httpproxy import HttpProxyError
from cornus_core.proxy.listener import (
    DEFAULT_PORT,
    Connected,
    ConnectionRequest,
    ConnectionStats,
    ConnectResult,
    Handler,
    ProxyListener,
    RefusalKind,
    Refused,
    StatsCallback,
    start_listener,
)
from cornus_core.proxy.noproxy import NoProxy
from cornus_core.proxy.settings import ProxySettings, app_proxy_env, merge_env_proxies
from cornus_core.proxy.sniff import NEED_MORE, sniff_hostname
from cornus_core.proxy.socks5 import Socks5Error
from cornus_core.proxy.transparent import NotRedirectedError, TransparentListener, original_dst

__all__ = [
    "DEFAULT_PORT",
    "NEED_MORE",
    "ConnectResult",
    "Connected",
    "ConnectionRequest",
    "ConnectionStats",
    "DialError",
    "Handler",
    "HttpProxyError",
    "NoProxy",
    "NotRedirectedError",
    "ProxyListener",
    "ProxySettings",
    "RefusalKind",
    "Refused",
    "Socks5Error",
    "StatsCallback",
    "TransparentListener",
    "app_proxy_env",
    "dial",
    "merge_env_proxies",
    "original_dst",
    "sniff_hostname",
    "start_listener",
]
