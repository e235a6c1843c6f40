"""A throwaway QEMU guest running the stock Debian kernel's v9fs client against a 9P server on this host.

The guest is built from Debian packages and cached under ``~/.cache/cornus-kernel9p`` (or
``$CORNUS_KERNEL9P_CACHE``): qemu and a static busybox are installed with apt, the kernel package is
only downloaded and unpacked, and an initramfs is written here (newc cpio, in Python) holding
busybox, the 9P and virtio-net modules and ``init.sh``. Each run appends a small archive with
``workload.sh`` and its settings; the guest reaches the host's 127.0.0.1:PORT as 10.0.2.2:PORT through
QEMU user networking and reports ``RESULT <step> ok|fail <detail>`` lines on its second serial port.

Run by hand: ``python -m tests.ninep.kernel.guest PORT rw|ro [mount,options]``.
"""

from __future__ import annotations

import fcntl
import gzip
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOP_MODULES = ("virtio_pci", "virtio_net", "9pnet_fd", "9p")
OPTIONAL_MODULES = ("9pnet_fd",)
APT_PACKAGES = ("qemu-system-x86", "busybox-static")
APT = ("apt-get", "-o", "DPkg::Lock::Timeout=600")
BUILD_VERSION = "2"  # bump when the layout of the base image (init.sh included) changes


def cache_dir() -> Path:
    base = os.environ.get("CORNUS_KERNEL9P_CACHE")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cornus-kernel9p"


@dataclass(frozen=True)
class Guest:
    kernel: Path
    initramfs: Path
    version: str


@dataclass
class RunResult:
    steps: dict[str, tuple[bool, str]] = field(default_factory=dict)
    console: str = ""
    returncode: int | None = None
    seconds: float = 0.0

    @property
    def ended(self) -> bool:
        return "end" in self.steps

    def failures(self) -> dict[str, str]:
        return {name: detail for name, (ok, detail) in self.steps.items() if not ok}


# ---------------------------------------------------------------------------- building
def _run(*cmd: str, cwd: Path | None = None) -> str:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return out.stdout


def _installed(package: str) -> bool:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return out.returncode == 0 and "install ok installed" in out.stdout


def _kernel_package() -> str:
    def depends() -> str:
        out = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            dep = line.strip().removeprefix("Depends: ")
            if dep.startswith("linux-image-") and dep[len("linux-image-")].isdigit():
                return dep
        return ""

    package = depends()
    if not package:
        _run(*APT, "update", "-qq")
        package = depends()
    if not package:
        raise RuntimeError("apt knows no linux-image-amd64 kernel package")
    return package


def _module_depends(ko: bytes) -> list[str]:
    """The ``depends=`` entry of a kernel module's .modinfo strings."""
    start = ko.find(b"\0depends=")
    if start < 0:
        return []
    value = ko[start + 9 : ko.index(b"\0", start + 9)].decode()
    return [d for d in value.split(",") if d]


def _read_module(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".zst"):
        return subprocess.run(["zstd", "-qdc", str(path)], capture_output=True, check=True).stdout
    return data


def _modules_in_load_order(moddir: Path, wanted: Iterable[str]) -> list[tuple[str, bytes]]:
    index = {}
    for p in moddir.rglob("*.ko*"):
        index[p.name.split(".ko")[0].replace("-", "_")] = p
    order: list[tuple[str, bytes]] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        key = name.replace("-", "_")
        if key in seen:
            return
        seen.add(key)
        if key not in index:
            raise RuntimeError(f"kernel module {name} is not in {moddir}")
        body = _read_module(index[key])
        for dep in _module_depends(body):
            visit(dep)
        order.append((key, body))

    for name in wanted:
        if name in OPTIONAL_MODULES and name.replace("-", "_") not in index:
            continue  # built into 9pnet on older kernels
        visit(name)
    return order


def _cpio(entries: Iterable[tuple[str, int, bytes]]) -> bytes:
    """A newc cpio archive of (path, mode, data) entries; symlinks carry their target as data."""
    out = bytearray()

    def add(name: str, mode: int, data: bytes, ino: int) -> None:
        raw = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(raw), 0)
        out.extend(b"070701" + b"".join(b"%08X" % v for v in fields) + raw)
        out.extend(b"\0" * (-len(out) % 4) + data)
        out.extend(b"\0" * (-len(out) % 4))

    ino = 1
    for name, mode, data in entries:
        add(name, mode, data, ino)
        ino += 1
    add("TRAILER!!!", 0, b"", 0)
    return bytes(out)


def _dirs(*paths: str) -> list[tuple[str, int, bytes]]:
    return [(p, 0o40755, b"") for p in paths]


def ensure_guest() -> Guest:
    """The cached guest, built first when missing (root and apt needed for that)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = root / "guest.ready"
        if stamp.exists():
            built, version = stamp.read_text().split()
            guest = _guest(root, version)
            if built == BUILD_VERSION and guest.kernel.exists() and guest.initramfs.exists():
                return guest
        return _build(root, stamp)


def _guest(root: Path, version: str) -> Guest:
    return Guest(root / f"vmlinuz-{version}", root / f"initramfs-{version}.cpio.gz", version)


def _build(root: Path, stamp: Path) -> Guest:
    missing = [p for p in APT_PACKAGES if not _installed(p)]
    if missing:
        _run(*APT, "update", "-qq")
        _run(*APT, "install", "-y", "-qq", "--no-install-recommends", *missing)
    package = _kernel_package()
    version = package.removeprefix("linux-image-")
    with tempfile.TemporaryDirectory(prefix="cornus-kernel9p-") as tmp:
        work = Path(tmp)
        _run("apt-get", "download", package, cwd=work)
        (deb,) = work.glob("*.deb")
        tree = work / "tree"
        _run("dpkg-deb", "-x", str(deb), str(tree))
        shutil.copyfile(tree / "boot" / f"vmlinuz-{version}", root / f"vmlinuz-{version}")
        modules = _modules_in_load_order(tree / "lib" / "modules" / version, TOP_MODULES)
    busybox = Path("/bin/busybox").read_bytes()
    entries = _dirs("bin", "modules")
    entries += [("bin/busybox", 0o100755, busybox), ("init", 0o100755, (HERE / "init.sh").read_bytes())]
    entries += [(f"modules/{name}.ko", 0o100644, body) for name, body in modules]
    entries += [("modules/order", 0o100644, "".join(f"{name}\n" for name, _ in modules).encode())]
    entries += [("GUEST_ROOT_MARKER", 0o100644, b"guest\n")]
    guest = _guest(root, version)
    guest.initramfs.write_bytes(gzip.compress(_cpio(entries), compresslevel=1))
    stamp.write_text(f"{BUILD_VERSION} {version}\n")
    return guest


# ---------------------------------------------------------------------------- running
def run_guest(
    guest: Guest,
    port: int,
    mode: str,
    *,
    options: str = "",
    fd_options: str = "",
    manifest: dict[str, str] | None = None,
    sizes: dict[str, int] | None = None,
    timeout: float = 600,
) -> RunResult:
    """Boot the guest against 127.0.0.1:``port`` and collect its step results."""
    config = "".join(f"{k}={v}\n" for k, v in (sizes or {}).items()).encode()
    extra = [
        ("workload.sh", 0o100755, (HERE / "workload.sh").read_bytes()),
        ("config.env", 0o100644, config),
        ("manifest", 0o100644, "".join(f"{p} {h}\n" for p, h in (manifest or {}).items()).encode()),
    ]
    with tempfile.TemporaryDirectory(prefix="cornus-kernel9p-run-") as tmp:
        work = Path(tmp)
        initrd = work / "initrd"
        # the kernel unpacks concatenated archives in order: the per-run one next to the cached base
        initrd.write_bytes(_cpio(extra) + guest.initramfs.read_bytes())
        console, results = work / "console.log", work / "results.log"
        kvm = (
            os.environ.get("CORNUS_KERNEL9P_KVM") == "1"
        )  # software emulation unless asked: nested KVM may hang
        accel = ["-accel", "kvm", "-cpu", "host"] if kvm else ["-accel", "tcg"]
        cmdline = "console=ttyS0 quiet loglevel=3 panic=-1"
        cmdline += f" cornus.port={port} cornus.mode={mode} cornus.opts={options}"
        if fd_options:  # mount over file descriptors 3 and 4 (trans=fd) instead of TCP
            cmdline += f" cornus.fdopts={fd_options}"
        cmd = [
            "qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            *accel, "-m", "512", "-kernel", str(guest.kernel), "-initrd", str(initrd), "-append", cmdline,
            "-serial", f"file:{console}", "-serial", f"file:{results}",
            "-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0",
        ]  # fmt: skip
        started = time.monotonic()
        result = RunResult()
        try:
            proc = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
            )
            result.returncode = proc.returncode
        except subprocess.TimeoutExpired:
            result.returncode = None
        result.seconds = time.monotonic() - started
        result.console = console.read_text(errors="replace") if console.exists() else ""
        text = results.read_text(errors="replace") if results.exists() else ""
        for line in text.replace("\r", "").splitlines():
            if not line.startswith("RESULT "):
                continue
            _, name, *rest = line.split(" ", 3)
            status = rest[0] if rest else "ok"
            result.steps[name] = (status == "ok", rest[1] if len(rest) > 1 else "")
        return result


def main(argv: list[str]) -> int:
    port, mode = int(argv[0]), argv[1]
    result = run_guest(ensure_guest(), port, mode, options=argv[2] if len(argv) > 2 else "")
    for name, (ok, detail) in result.steps.items():
        print(f"{name:14} {'ok' if ok else 'FAIL'} {detail}")
    print(f"{result.seconds:.1f} s, qemu exit {result.returncode}")
    return 0 if result.ended and not result.failures() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
