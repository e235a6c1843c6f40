"""The caretaker process: load the role config, connect to the server, run the roles, report READY."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from cornus_core import aio
from cornus_core.credentials import CredentialError
from cornus_core.events import Log, PolicyApplied
from cornus_core.policy import PolicyError, compile_policy
from cornus_core.proxy.transparent import CaptureError, socket_mark_from_env
from cornus_core.spec import EgressSpec
from cornus_core.streams import TAG_POLICY
from cornus_core.wire import OK, Mux, Verdict, VerdictKind, WireError, read_header, write_verdict

from .config import CaretakerConfig, ConfigError, DnsRoleConfig, load_config
from .link import ServerLink
from .net import check_mark
from .roles.credential import CredentialRole
from .roles.dns import DnsRole, UpstreamError, upstreams_from
from .roles.egress import EgressRole
from .supervisor import Supervisor
from .telemetry import Telemetry

log = logging.getLogger("caretaker")
READY_PREFIX = "READY "
LINK_READY_TIMEOUT = 20.0
MAX_POLICY_LINE = 1024 * 1024


class StartError(Exception):
    """A role could not start; the caretaker exits with `code` after undoing what did start."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


if TYPE_CHECKING:
    from .roles.mount import MountRole

    Role = EgressRole | CredentialRole | MountRole | DnsRole


async def run(config: CaretakerConfig, server_url: str, token: str) -> int:
    telemetry = Telemetry()
    roles: list[Role] = []
    egress: EgressRole | None = None
    accepting: set[asyncio.Task[None]] = set()

    async def on_connect(mux: Mux) -> None:
        await telemetry.attach(mux)
        accepting.clear()  # the previous connection's acceptor ended with it
        accepting.add(asyncio.create_task(serve_server_streams(mux, lambda: egress, telemetry)))

    try:
        mark = socket_mark_from_env()
        if mark is not None:
            check_mark(mark)
    except CaptureError as exc:
        print(f"cornus-caretaker: {exc}", file=sys.stderr)
        return 2
    supervisor = Supervisor(lambda line: telemetry.emit(Log(source="caretaker", line=line, stream="stderr")))
    link = ServerLink(server_url, token, on_connect=on_connect, mark=mark, supervisor=supervisor)
    try:
        ready, egress = await start_roles(config, link, telemetry, roles, mark, supervisor)
        print(READY_PREFIX + json.dumps(ready), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        return 0
    except StartError as exc:
        print(f"cornus-caretaker: {exc}", file=sys.stderr)
        return exc.code
    finally:
        for role in reversed(roles):  # mounts go before the link that carries them
            await role.aclose()
        await link.aclose()
        await supervisor.aclose()


async def start_roles(
    config: CaretakerConfig, link: ServerLink, telemetry: Telemetry, roles: list[Role], mark: int | None,
    supervisor: Supervisor,
) -> tuple[dict[str, object], EgressRole | None]:
    """Start every configured role (appending it to `roles`); returns the READY report and the egress role.

    The READY line is the readiness gate: the backend starts the workload only after it, so every
    mount is live and every credential file written by then.
    """
    ready: dict[str, object] = {"deployment": config.deployment}
    app_env: dict[str, str] = {}
    egress: EgressRole | None = None
    if config.egress is not None or config.credentials or config.mounts:
        link.start()
        try:
            await link.wait_up(LINK_READY_TIMEOUT)
        except TimeoutError:
            raise StartError(f"no connection to {link.url} within {LINK_READY_TIMEOUT:.0f} s") from None
    dns: DnsRole | None = None
    dns_config = config.dns
    if dns_config is None and config.egress is not None and config.egress.mode == "transparent":
        dns_config = DnsRoleConfig()  # captured DNS needs a resolver here
    if dns_config is not None:
        dns = await start_dns(dns_config, mark)
        roles.append(dns)
        ready["dns_port"] = dns.port
    if config.egress is not None:
        try:
            policy = compile_policy(config.egress.policy)
        except PolicyError as exc:
            raise StartError(f"the egress policy does not compile: {exc}", 2) from None
        egress = EgressRole(policy, link, telemetry, host=config.egress.listen_host,
                            port=config.egress.listen_port, mode=config.egress.mode, mark=mark,
                            names=dns.names if dns is not None else None)
        try:
            host, port = await egress.start()
        except OSError as exc:
            raise StartError(f"cannot listen for the egress role on port {config.egress.listen_port}: "
                             f"{exc.strerror or exc}") from None
        roles.append(egress)
        if dns is not None:
            dns.relayed = egress.relays_name  # follows live policy updates
        ready["egress"] = f"{host}:{port}"
        if config.egress.mode == "proxy":
            app_env.update(egress.app_env(config.egress.policy))
        else:  # the deploying backend points the pod's capture rules at this port
            ready["capture_port"] = port
    if config.mounts:
        from .roles.mount import MountError, MountRole  # the 9P client loads only for pods with mounts

        mounts = MountRole(config.mounts, link, telemetry)
        try:
            await mounts.start()
        except MountError as exc:
            raise StartError(str(exc)) from None
        roles.append(mounts)
        ready["mounts"] = [m.target for m in config.mounts]
    if config.credentials:
        credentials = CredentialRole(config.credentials, link, telemetry, supervisor)
        roles.append(credentials)
        try:
            app_env.update(await credentials.start())
        except CredentialError as exc:
            raise StartError(f"credentials not ready: {exc}") from None
    ready["app_env"] = app_env
    return ready, egress


async def start_dns(config: DnsRoleConfig, mark: int | None) -> DnsRole:
    """The pod's resolver, listening before READY so that captured DNS finds it."""
    try:
        dns = DnsRole(upstreams_from(config.upstream), port=config.listen_port, mark=mark, timeout=config.timeout)
    except UpstreamError as exc:
        raise StartError(f"the dns role: {exc}", 2) from None
    try:
        await dns.start()
    except OSError as exc:
        raise StartError(f"cannot listen for the dns role on port {config.listen_port}: "
                         f"{exc.strerror or exc}") from None
    if not dns.upstreams:
        log.warning("dns role: no upstream resolver (none configured, none usable in /etc/resolv.conf)")
    return dns


async def serve_server_streams(
    mux: Mux, current_egress: Callable[[], EgressRole | None], telemetry: Telemetry
) -> None:
    """Streams the server opens to us: live policy updates."""
    with contextlib.suppress(WireError):
        while True:
            stream = await mux.accept_stream()
            try:
                header = await read_header(stream)
                egress = current_egress()  # roles start after the first connect
                if header.tag != TAG_POLICY or egress is None:
                    stream.reset()
                    continue
                line = await stream.readuntil(b"\n", limit=MAX_POLICY_LINE)
                try:
                    version = egress.apply_policy(EgressSpec.model_validate_json(line))
                except (ValueError, PolicyError) as exc:
                    await write_verdict(stream, Verdict(VerdictKind.ERROR, str(exc)))
                else:
                    telemetry.emit(PolicyApplied(hop="caretaker", version=version))
                    await write_verdict(stream, OK)
                await stream.aclose()
            except WireError:
                stream.reset()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="cornus-caretaker", description="The per-pod sidecar of cornus.")
    parser.add_argument("--config", help="role config file (default: $CORNUS_CARETAKER_CONFIG)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        config, server_url, token = load_config(path=args.config)
    except ConfigError as exc:
        print(f"cornus-caretaker: {exc}", file=sys.stderr)
        return 2
    return aio.run(run(config, server_url, token))
