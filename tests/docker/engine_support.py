"""A private Docker engine for the dockerhost tests and benchmark: its own socket, data and exec roots, no
bridge and no firewall rules (this machine's networking stays as it is), stopped when done. Images come
from ``docker import`` of a busybox root filesystem: there is no registry."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

IMAGE = "cornus-test/busybox:1"
IMAGE_WITH_CMD = "cornus-test/busybox:with-cmd"  # the same files, with an entrypoint and a command of its own
APPLETS = ("sh", "cat", "echo", "wget", "ls", "env", "sleep", "grep", "true", "false", "nslookup")


def missing_tools() -> str | None:
    """Why a private engine cannot run here, or None."""
    if os.geteuid() != 0:
        return "a Docker engine needs root"
    for tool in ("dockerd", "busybox", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/bootstrap.sh installs docker.io and busybox-static)"
    return None


@contextlib.contextmanager
def private_dockerd() -> Iterator[str]:
    """``unix://...`` of a Docker engine started for the caller, with the busybox images imported."""
    base = Path(tempfile.mkdtemp(prefix="cornus-dockerd-"))
    sock = base / "docker.sock"
    log = (base / "dockerd.log").open("w")
    proc = subprocess.Popen(
        ["dockerd", "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-forward=false",
         "--ip-masq=false", f"--data-root={base / 'data'}", f"--exec-root={base / 'exec'}",
         f"--pidfile={base / 'dockerd.pid'}", f"--host=unix://{sock}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError), docker_api(f"unix://{sock}") as c:
                if c.get("/_ping").status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("dockerd did not start: " + (base / "dockerd.log").read_text()[-2000:])
            time.sleep(0.1)
        import_busybox(f"unix://{sock}")
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        subprocess.run(["umount", "-R", "-l", str(base / "data"), str(base / "exec")], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def docker_api(host: str) -> httpx.Client:
    """A plain client of the engine, for what is set up around the backend."""
    return httpx.Client(transport=httpx.HTTPTransport(uds=host.removeprefix("unix://")), base_url="http://docker",
                        timeout=60)


def import_busybox(host: str) -> None:
    """2 MB images: /bin/busybox and its applets, as ``docker import`` makes them."""
    buf = io.BytesIO()
    busybox = shutil.which("busybox")
    assert busybox is not None
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for folder in ("bin", "etc", "tmp", "data"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
            tar.addfile(info)
        tar.add(os.path.realpath(busybox), arcname="bin/busybox")
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    changes = ['ENTRYPOINT ["/bin/sh", "-c"]', 'CMD ["echo from the image itself"]']
    with docker_api(host) as c:
        for image, change in ((IMAGE, []), (IMAGE_WITH_CMD, changes)):
            repo, tag = image.split(":")
            response = c.post("/images/create", params={"fromSrc": "-", "repo": repo, "tag": tag, "changes": change},
                              content=buf.getvalue(), headers={"Content-Type": "application/x-tar"})
            if response.status_code != 200:
                raise RuntimeError(f"docker import of {image} failed: {response.text}")
