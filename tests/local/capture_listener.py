"""A stand-in caretaker for the capture tests, run inside a pod: listens where the capture rules
redirect to (127.0.0.1 and ::1), answers each connection with JSON saying where it was going, and on
``GET /relay`` also fetches ``/`` from that original destination over a socket of its own, exempted
from capture by a socket mark (``mark:N``) or by the uid it drops to (``uid:N``)."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading

from cornus_core.proxy.transparent import NotRedirectedError, original_dst, set_socket_mark


def fetch(dst: tuple[str, int], mark: int | None) -> str:
    family = socket.AF_INET6 if ":" in dst[0] else socket.AF_INET
    with socket.socket(family) as sock:
        if mark is not None:
            set_socket_mark(sock, mark)
        sock.settimeout(5)
        sock.connect(dst)
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data.partition(b"\r\n\r\n")[2].decode()


def serve(conn: socket.socket, mark: int | None) -> None:
    with conn:
        head = b""
        while b"\r\n\r\n" not in head and (chunk := conn.recv(4096)):
            head += chunk
        path = head.split(b" ", 2)[1].decode() if head.count(b" ") >= 2 else ""
        try:
            dst = original_dst(conn)
        except NotRedirectedError as exc:
            answer: dict[str, object] = {"redirected": False, "error": str(exc)}
        else:
            answer = {"redirected": True, "dst": list(dst)}
            if path == "/relay":
                try:
                    answer["relayed"] = fetch(dst, mark)
                except OSError as exc:
                    answer["relayed_error"] = str(exc)
        body = json.dumps(answer).encode()
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


def accept_forever(server: socket.socket, mark: int | None) -> None:
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn, mark), daemon=True).start()


def main() -> None:
    port, exemption = int(sys.argv[1]), sys.argv[2]
    kind, _, number = exemption.partition(":")
    servers = [
        socket.create_server(("127.0.0.1", port)),
        socket.create_server(("::1", port), family=socket.AF_INET6),
    ]
    mark = None
    if kind == "uid":  # the caretaker's own uid: sockets made from here on carry it
        os.setgroups([])
        os.setgid(int(number))
        os.setuid(int(number))
    else:
        mark = int(number)
    threading.Thread(target=accept_forever, args=(servers[1], mark), daemon=True).start()
    print("READY", flush=True)
    accept_forever(servers[0], mark)


if __name__ == "__main__":
    main()
