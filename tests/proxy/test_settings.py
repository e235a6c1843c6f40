"""Proxy settings from the environment and the desktop, NO_PROXY, and workload environments."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cornus_core.proxy import NoProxy, ProxySettings, app_proxy_env, merge_env_proxies


def test_lower_case_wins_and_empty_is_unset() -> None:
    settings = ProxySettings.from_environ(
        {
            "http_proxy": "http://lower:1",
            "HTTP_PROXY": "http://upper:1",
            "https_proxy": "",
            "HTTPS_PROXY": "http://upper:2",
            "ALL_PROXY": "socks5h://s:1080",
            "NO_PROXY": ".corp",
        }
    )
    assert settings == ProxySettings(
        "http://lower:1", "http://upper:2", "socks5h://s:1080", ".corp", source="environment"
    )
    assert ProxySettings.from_environ({"no_proxy": "x"}).source == "none"


def test_proxy_for_by_scheme_and_port() -> None:
    settings = ProxySettings("http://h:1", "http://s:2", "socks5h://a:3", "skip.example")
    assert settings.proxy_for("x.example", 80) == "http://h:1"
    assert settings.proxy_for("x.example", 443) == "http://s:2"
    assert settings.proxy_for("x.example", 5432) == "socks5h://a:3"
    assert settings.proxy_for("x.example", 8080, "http") == "http://h:1"
    assert settings.proxy_for("x.example", 8443, "https") == "http://s:2"
    assert settings.proxy_for("a.skip.example", 443) is None
    only_https = ProxySettings(https_proxy="http://s:2")
    assert only_https.proxy_for("x.example", 443) == "http://s:2"
    assert only_https.proxy_for("x.example", 22) is None  # like ssh, which ignores https_proxy


@pytest.mark.parametrize(
    ("no_proxy", "host", "port", "bypass"),
    [
        ("*", "anything.example", 1, True),
        ("example.com", "example.com", 443, True),
        ("example.com", "www.example.com", 443, True),
        (".example.com", "example.com", 443, True),
        (".example.com", "a.b.example.com", 443, True),
        ("*.example.com", "a.example.com", 443, True),
        ("example.com", "badexample.com", 443, False),
        ("example.com", "example.com.evil", 443, False),
        ("Example.COM", "www.example.com.", 443, True),
        ("localhost, 127.0.0.1 ,::1", "127.0.0.1", 80, True),
        ("localhost,127.0.0.1,::1", "::1", 80, True),
        ("localhost,127.0.0.1,::1", "[::1]", 80, True),
        ("10.0.0.0/8", "10.200.3.4", 80, True),
        ("10.0.0.0/8", "11.0.0.1", 80, False),
        ("10.0.0.0/8", "ten.example", 80, False),  # names are never resolved
        ("fd00::/8", "fd12::1", 80, True),
        ("[fd00::/8]", "fd12::1", 80, True),
        ("[::1]:8080", "::1", 8080, True),
        ("[::1]:8080", "::1", 8081, False),
        ("example.com:8443", "api.example.com", 8443, True),
        ("example.com:8443", "api.example.com", 443, False),
        ("10.1.1.1:22", "10.1.1.1", 22, True),
        ("10.1.1.1:22", "10.1.1.1", 23, False),
        ("", "example.com", 80, False),
        ("a.example *", "b.example", 80, True),
    ],
)
def test_no_proxy(no_proxy: str, host: str, port: int, bypass: bool) -> None:
    assert NoProxy.parse(no_proxy).matches(host, port) is bypass


@settings(deadline=None)
@given(st.text(max_size=200), st.text(max_size=60), st.integers(1, 65535))
def test_fuzz_no_proxy(no_proxy: str, host: str, port: int) -> None:
    assert NoProxy.parse(no_proxy).matches(host, port) in (True, False)


def test_app_proxy_env() -> None:
    env = app_proxy_env(15002, ["db.cluster.local", "10.0.0.0/8", "localhost"])
    assert env["HTTP_PROXY"] == env["http_proxy"] == "http://127.0.0.1:15002"
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://127.0.0.1:15002"
    assert env["ALL_PROXY"] == env["all_proxy"] == "socks5h://127.0.0.1:15002"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1,db.cluster.local,10.0.0.0/8"
    assert len(env) == 8


def test_merge_env_proxies_never_overwrites_either_spelling() -> None:
    resolved = ProxySettings("http://h:1", "http://s:2", None, "corp").to_env()
    assert resolved == {
        "http_proxy": "http://h:1",
        "HTTP_PROXY": "http://h:1",
        "https_proxy": "http://s:2",
        "HTTPS_PROXY": "http://s:2",
        "no_proxy": "corp",
        "NO_PROXY": "corp",
    }
    merged = merge_env_proxies({"HTTPS_PROXY": "http://mine:9", "PATH": "/bin"}, resolved)
    assert merged == {
        "HTTPS_PROXY": "http://mine:9",
        "PATH": "/bin",
        "http_proxy": "http://h:1",
        "HTTP_PROXY": "http://h:1",
        "no_proxy": "corp",
        "NO_PROXY": "corp",
    }


def _gsettings(env: dict[str, str], *args: str) -> None:
    subprocess.run(["gsettings", "set", *args], env=env, check=True, capture_output=True)


def test_desktop_settings_from_gsettings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("gsettings") is None:
        pytest.skip("gsettings is not installed")
    monkeypatch.setenv("GSETTINGS_BACKEND", "keyfile")  # a real settings store under tmp_path
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    probe = subprocess.run(["gsettings", "get", "org.gnome.system.proxy", "mode"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("the org.gnome.system.proxy schema is not installed")
    env = dict(os.environ)
    assert ProxySettings.from_desktop() is None  # mode 'none'

    _gsettings(env, "org.gnome.system.proxy", "mode", "manual")
    _gsettings(env, "org.gnome.system.proxy", "use-same-proxy", "false")
    _gsettings(env, "org.gnome.system.proxy.http", "host", "proxy.corp.example")
    _gsettings(env, "org.gnome.system.proxy.http", "port", "3128")
    _gsettings(env, "org.gnome.system.proxy.http", "use-authentication", "true")
    _gsettings(env, "org.gnome.system.proxy.http", "authentication-user", "me@corp")
    _gsettings(env, "org.gnome.system.proxy.http", "authentication-password", "p:w")
    _gsettings(env, "org.gnome.system.proxy.https", "host", "tls.corp.example")
    _gsettings(env, "org.gnome.system.proxy.https", "port", "3129")
    _gsettings(env, "org.gnome.system.proxy.socks", "host", "::1")
    _gsettings(env, "org.gnome.system.proxy.socks", "port", "1080")
    _gsettings(env, "org.gnome.system.proxy", "ignore-hosts", "['localhost', '.corp.example', '10.0.0.0/8']")
    assert ProxySettings.from_desktop() == ProxySettings(
        "http://me%40corp:p%3Aw@proxy.corp.example:3128",
        "http://tls.corp.example:3129",
        "socks5h://[::1]:1080",
        "localhost,.corp.example,10.0.0.0/8",
        source="desktop",
    )
    # The environment wins over the desktop; an environment without proxies falls back to it.
    assert ProxySettings.resolve({"https_proxy": "http://env:1"}).source == "environment"
    assert ProxySettings.resolve({"PATH": "/bin"}).source == "desktop"

    _gsettings(env, "org.gnome.system.proxy", "use-same-proxy", "true")
    desktop = ProxySettings.from_desktop()
    assert desktop is not None and desktop.https_proxy == desktop.http_proxy
