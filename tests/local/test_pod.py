"""Pods for real: a namespace with a veth to the host, processes inside it, and nothing left after."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from server.backends.local import Pod, PodError, PodHost
from server.backends.local.pod import NETNS_DIR

from .conftest import host_state, needs_root, pid_alive, run_in

pytestmark = needs_root()


async def wait_listening(host: str, port: int, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return


async def curl(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "curl",
        "-sS",
        "--max-time",
        "10",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


async def test_host_reaches_a_server_in_the_pod_and_destroy_leaves_nothing(
    pod_host: PodHost, tmp_path: Path
) -> None:
    pod = await Pod.create(pod_host)
    (tmp_path / "hello.txt").write_text("hello from the pod\n")
    server = await pod.spawn(
        ["python3", "-m", "http.server", "--bind", "::", "8000", "--directory", str(tmp_path)],
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    # A daemon that leaves the server's session must be found and stopped too.
    _, out = await run_in(pod, ["sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"])
    daemon = int(out.strip())

    await wait_listening(pod.pod_ip, 8000)
    assert await curl(f"http://{pod.pod_ip}:8000/hello.txt") == (0, "hello from the pod\n")
    assert pod.pod_ip6 is not None
    assert await curl("-g", f"http://[{pod.pod_ip6}]:8000/hello.txt") == (0, "hello from the pod\n")
    # The pod's default route is the host end of its veth.
    status, routes = await run_in(pod, ["ip", "route", "show", "default"])
    assert (status, routes.split()[:3]) == (0, ["default", "via", pod.host_ip])

    assert not host_state(pod_host.owner, pod_host.run_dir).empty
    await pod.destroy()
    assert host_state(pod_host.owner, pod_host.run_dir).empty
    assert not (NETNS_DIR / pod.name).exists()
    assert server.returncode is not None
    assert not pid_alive(daemon)
    await pod.destroy()  # idempotent
    with pytest.raises(PodError, match=f"pod {pod.name} is destroyed"):
        await pod.spawn(["true"])


async def test_processes_run_as_a_uid_and_get_the_socket_mark(pod: Pod) -> None:
    status, out = await run_in(
        pod, ["sh", "-c", 'id -u; id -G; echo "$CORNUS_SOCKET_MARK"'], uid=65534, mark=0x2A
    )
    assert status == 0
    assert out.split("\n")[:3] == ["65534", "65534", "42"]  # no supplementary groups of root's
    status, out = await run_in(pod, ["id", "-u"])
    assert (status, out) == (0, "0\n")


async def test_private_mounts_are_shared_by_the_pod_and_hidden_from_the_host(
    pod_host: PodHost, tmp_path: Path
) -> None:
    pod = await Pod.create(pod_host, private_mounts=True)
    target = tmp_path / "target"
    target.mkdir()
    status, out = await run_in(pod, ["mount", "-t", "tmpfs", "podfs", str(target)])
    assert status == 0, out
    status, out = await run_in(
        pod, ["sh", "-c", "echo inside > target/file && cat target/file"], cwd=str(tmp_path)
    )
    assert (status, out) == (0, "inside\n")
    assert not (target / "file").exists()  # the host sees its own, empty directory
    assert subprocess.run(["mountpoint", "-q", str(target)], check=False).returncode != 0
    # sysfs inside shows the pod's interfaces, not the host's.
    status, out = await run_in(pod, ["ls", "/sys/class/net"])
    assert (status, sorted(out.split())) == (0, ["eth0", "lo"])
    await pod.destroy()
    assert host_state(pod_host.owner, pod_host.run_dir).empty


PEER_ECHO = """
import socket
with socket.create_server(("0.0.0.0", 8001)) as server:
    while True:
        conn, (ip, _) = server.accept()
        conn.sendall(ip.encode())
        conn.close()
"""
ASK_PEER = """
import socket, sys
with socket.create_connection((sys.argv[1], 8001), timeout=3) as conn:
    print(conn.recv(100).decode())
"""


async def test_pods_reach_each_other_through_the_host_only_with_nat(pod_host: PodHost) -> None:
    plain, plain_peer, natted, natted_peer = await asyncio.gather(
        Pod.create(pod_host),
        Pod.create(pod_host),
        Pod.create(pod_host, nat=True),
        Pod.create(pod_host, nat=True),
    )
    addresses = [p.pod_ip for p in (plain, plain_peer, natted, natted_peer)]
    assert len(set(addresses)) == 4
    for peer in (plain_peer, natted_peer):
        await peer.spawn(["python3", "-c", PEER_ECHO])
        await wait_listening(peer.pod_ip, 8001)
    # Host forwarding is off: a pod without NAT reaches the host, not what lies beyond it.
    status, out = await run_in(plain, ["python3", "-c", ASK_PEER, plain_peer.pod_ip])
    assert status != 0, out
    # With NAT (forwarding on both pods' veths) the connection goes through, masqueraded as the host.
    status, out = await run_in(natted, ["python3", "-c", ASK_PEER, natted_peer.pod_ip])
    assert (status, out) == (0, f"{natted_peer.host_ip}\n")
    await asyncio.gather(plain.destroy(), plain_peer.destroy(), natted.destroy(), natted_peer.destroy())
    assert host_state(pod_host.owner, pod_host.run_dir).empty


async def test_a_pod_that_fails_half_way_is_undone(pod_host: PodHost) -> None:
    taken = f"{pod_host.owner}-0"  # the name the next pod will get
    subprocess.run(["ip", "netns", "add", taken], check=True, timeout=10)
    try:
        with pytest.raises(PodError, match=f"pod {taken}: network namespace: .*File exists"):
            await Pod.create(pod_host)
        assert pod_host.pods == {}
        assert host_state(pod_host.owner, pod_host.run_dir).empty
        pod = await Pod.create(pod_host)
        assert await run_in(pod, ["true"]) == (0, "")
    finally:
        subprocess.run(["ip", "netns", "delete", taken], check=False, capture_output=True, timeout=10)
