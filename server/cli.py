"""Entry point of cornus-server."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from cornus_core import aio

from .app import CornusServer
from .auth import Authenticator
from .backends.choose import CHOICES, choose_backend, start_backend, stop_backend
from .gateway import Gateway, GatewayConfigError


def _secret(data_dir: Path) -> bytes:
    """The server's HMAC secret for caretaker tokens, kept in the data dir across restarts."""
    path = data_dir / "server.secret"
    if path.exists():
        return path.read_bytes()
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = os.urandom(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secret)
    return secret


def _caller_token(args: argparse.Namespace) -> str:
    if args.token_file:
        return Path(args.token_file).read_text().strip()
    return os.environ.get("CORNUS_AUTH_TOKEN", "").strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="cornus-server",
        description="The cornus rendezvous: deploy-attach sessions, the egress relay and deploy backends.",
        epilog="The caller token comes from --token-file or CORNUS_AUTH_TOKEN. The gateway route needs "
        "CORNUS_EGRESS_GATEWAY=1; CORNUS_EGRESS_POLICY (a JSON egress spec) caps what it may dial.",
    )
    parser.add_argument("--listen", default="127.0.0.1:7420", metavar="HOST:PORT")
    parser.add_argument("--data-dir", default=os.path.expanduser("~/.local/share/cornus-server"))
    parser.add_argument("--token-file", help="file holding the caller bearer token")
    parser.add_argument("--advertise", metavar="URL", help="ws:// URL caretakers dial (default: the listen address)")
    parser.add_argument("--backend", choices=CHOICES, default="auto",
                        help="where workloads run: local pods (network namespaces, needs root), plain processes, "
                        "containers of the spec's image on this machine's Docker engine ($DOCKER_HOST; network "
                        "$CORNUS_DOCKER_NETWORK, default bridge), or auto (pods when this machine allows them)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)

    host, sep, port_text = args.listen.rpartition(":")
    if not sep or not port_text.isdigit():
        print(f"cornus-server: --listen {args.listen!r} is not HOST:PORT", file=sys.stderr)
        return 2
    try:
        token = _caller_token(args)
    except OSError as exc:
        print(f"cornus-server: cannot read --token-file: {exc.strerror}", file=sys.stderr)
        return 2
    if not token:
        print("cornus-server: no caller token: set CORNUS_AUTH_TOKEN or pass --token-file", file=sys.stderr)
        return 2
    try:
        gateway = Gateway.from_env()
    except GatewayConfigError as exc:
        print(f"cornus-server: {exc}", file=sys.stderr)
        return 2
    try:
        aio.run(_serve(args, token, gateway, host.strip("[]"), int(port_text)))
    except KeyboardInterrupt:
        pass
    return 0


async def _serve(args: argparse.Namespace, token: str, gateway: Gateway, host: str, port: int) -> None:
    backend = await choose_backend(args.backend)
    server = CornusServer(auth=Authenticator(token, _secret(Path(args.data_dir))), backend=backend,
                          gateway=gateway, advertise_url=args.advertise)
    try:
        url = await server.start(host, port)
        await start_backend(backend, server)
        print(f"cornus-server listening on {url} (backend {backend.name})", flush=True)
        await asyncio.Future()
    finally:
        await server.close()
        await stop_backend(backend)


if __name__ == "__main__":
    raise SystemExit(main())
