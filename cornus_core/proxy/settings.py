"""The caller's own proxy settings, and the proxy variables handed to a workload.

Settings come from the process environment first (``http_proxy``, ``https_proxy``, ``all_proxy``,
``no_proxy``; the lower-case spelling wins over the upper-case one, as in curl), else from the
desktop where it can be read (GNOME's ``org.gnome.system.proxy`` through ``gsettings``).
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote

from cornus_core.policy.patterns import parse_pattern
from cornus_core.proxy._address import authority
from cornus_core.proxy.noproxy import NoProxy

VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
LOOPBACK_NO_PROXY = ("localhost", "127.0.0.1", "::1")
_GLOB_META = re.compile(r"[*?\[\]]")


@dataclass(frozen=True)
class ProxySettings:
    http_proxy: str | None = None
    https_proxy: str | None = None
    all_proxy: str | None = None
    no_proxy: str | None = None
    source: str = "none"  # "environment", "desktop" or "none": where the values were read

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ProxySettings:
        env = os.environ if environ is None else environ
        values = {name: env.get(name) or env.get(name.upper()) or None for name in VARIABLES}
        source = "environment" if any(values[name] for name in VARIABLES[:3]) else "none"
        return cls(**values, source=source)

    @classmethod
    def from_desktop(cls, *, timeout: float = 2.0) -> ProxySettings | None:
        """GNOME's manual proxy configuration, or None when there is none to read."""
        gsettings = shutil.which("gsettings")
        if gsettings is None:
            return None
        try:
            out = subprocess.run(
                [gsettings, "list-recursively", "org.gnome.system.proxy"],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        return _from_gsettings(out)

    @classmethod
    def resolve(cls, environ: Mapping[str, str] | None = None) -> ProxySettings:
        """The environment's settings; when it sets no proxy, the desktop's (if readable)."""
        settings = cls.from_environ(environ)
        if settings.source == "none":
            return cls.from_desktop() or settings
        return settings

    @functools.cached_property
    def _no_proxy(self) -> NoProxy:
        return NoProxy.parse(self.no_proxy)

    def bypass(self, host: str, port: int) -> bool:
        """True when ``NO_PROXY`` says ``host:port`` is reached directly."""
        return self._no_proxy.matches(host, port)

    def proxy_for(self, host: str, port: int, scheme: str | None = None) -> str | None:
        """The proxy URL to reach ``host:port`` through, or None for a direct connection.

        ``scheme`` is what the app speaks when known (``http``, ``https``); otherwise port 80 is
        taken as http, 443 as https, and any other port uses ``all_proxy`` only, like a tool that
        is no web client would.
        """
        if self.bypass(host, port):
            return None
        scheme = scheme or {80: "http", 443: "https"}.get(port)
        if scheme == "http":
            return self.http_proxy or self.all_proxy
        if scheme == "https":
            return self.https_proxy or self.all_proxy
        return self.all_proxy

    def to_env(self) -> dict[str, str]:
        """Every set value in both spellings, for a workload's environment."""
        env: dict[str, str] = {}
        for name in VARIABLES:
            value = getattr(self, name)
            if value:
                env[name] = env[name.upper()] = value
        return env


def _from_gsettings(listing: str) -> ProxySettings | None:
    # Lines read "org.gnome.system.proxy[.KIND] KEY VALUE"; KIND is "" for the base schema.
    keys: dict[tuple[str, str], object] = {}
    for line in listing.splitlines():
        schema, _, rest = line.partition(" ")
        key, _, value = rest.partition(" ")
        keys[schema.removeprefix("org.gnome.system.proxy").lstrip("."), key] = _gvariant(value)
    if keys.get(("", "mode")) != "manual":
        return None

    def url(kind: str, scheme: str) -> str | None:
        host, port = keys.get((kind, "host")), keys.get((kind, "port"))
        if not isinstance(host, str) or not host or not isinstance(port, int) or port <= 0:
            return None
        userinfo = ""
        user = keys.get(("http", "authentication-user"))
        if (
            kind == "http"
            and keys.get(("http", "use-authentication")) is True
            and isinstance(user, str)
            and user
        ):
            password = keys.get(("http", "authentication-password"))
            userinfo = f"{quote(user, safe='')}:{quote(str(password or ''), safe='')}@"
        return f"{scheme}://{userinfo}{authority(host, port)}"

    http = url("http", "http")
    https = http if keys.get(("", "use-same-proxy")) is True else url("https", "http")
    socks = url("socks", "socks5h")
    ignore = keys.get(("", "ignore-hosts"))
    no_proxy = ",".join(str(h) for h in ignore) if isinstance(ignore, list) else None
    if not (http or https or socks):
        return None
    return ProxySettings(http, https, socks, no_proxy, source="desktop")


def _gvariant(text: str) -> object:
    """The few GVariant text forms gsettings prints for these keys: strings, ints, bools, arrays."""
    text = text.strip().removeprefix("@as ")
    if text in ("true", "false"):
        return text == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None


class _RuleLike(Protocol):
    pattern: str
    route: str


def cluster_no_proxy(rules: Sequence[_RuleLike], script: str | None) -> list[str]:
    """NO_PROXY entries for destinations the policy surely routes ``cluster``, so proxy-aware apps
    reach them without a detour through the caretaker.

    Only the leading run of ``cluster`` rules counts (a later rule may be shadowed by an earlier
    one of another route), only port-less patterns that NO_PROXY can say exactly: names, ``*.suffix``
    (as ``.suffix``), IPs and CIDRs. A PAC script decides at run time: nothing is listed.
    """
    if script:
        return []
    entries: list[str] = []
    for rule in rules:
        if rule.route != "cluster":
            break
        pattern = parse_pattern(rule.pattern)
        if pattern.port is not None:
            continue
        if pattern.kind == "net" and pattern.network is not None:
            net = pattern.network
            entries.append(str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net))
        elif pattern.kind == "glob" and pattern.glob is not None:
            glob = pattern.glob
            if glob.startswith("*.") and not _GLOB_META.search(glob[2:]):
                entries.append(glob[1:])
            elif not _GLOB_META.search(glob):
                entries.append(glob)
    return entries


def app_proxy_env(port: int, no_proxy_extra: Iterable[str] = ()) -> dict[str, str]:
    """The environment that points a workload at the caretaker's proxy on ``127.0.0.1:port``."""
    http = f"http://127.0.0.1:{port}"
    no_proxy = ",".join(dict.fromkeys([*LOOPBACK_NO_PROXY, *no_proxy_extra]))
    values = {
        "http_proxy": http,
        "https_proxy": http,
        "all_proxy": f"socks5h://127.0.0.1:{port}",
        "no_proxy": no_proxy,
    }
    return {spelling: value for name, value in values.items() for spelling in (name.upper(), name)}


def merge_env_proxies(user_env: Mapping[str, str], resolved: Mapping[str, str]) -> dict[str, str]:
    """``user_env`` plus the resolved proxy variables it does not set in either spelling."""
    merged = dict(user_env)
    user_names = {name.lower() for name in user_env}
    for name, value in resolved.items():
        if name.lower() not in user_names:
            merged[name] = value
    return merged
