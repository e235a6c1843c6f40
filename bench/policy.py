"""Policy benchmark: decisions per second of the egress policy engine.

Measures, on 10,000 distinct destinations:
  - a ~30-line corporate PAC, uncached (every decision evaluates the script in the in-process sandbox),
    cached (the same destinations again), and uncached in the isolated worker process;
  - a 50-rule list, uncached;
  - baseline: the same PAC in pacparser (when the package is installed), in the same run, with the
    same answers checked destination by destination.

Usage: python bench/policy.py [--hosts 10000] [--runs 3]
Each figure is the median of --runs runs; CPU-seconds count this process and its PAC worker process.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from cornus_core.policy import Destination, Policy, compile_policy
from cornus_core.policy._worker import worker_for_thread

CORPORATE_PAC = r"""
var BYPASS = [".corp.example", ".intranet.example", ".svc.cluster.local", ".internal"];
var CLIENT_SUFFIXES = [".vpn.example", ".partner.example", ".git.example"];

function endsWithAny(host, suffixes) {
    for (var i = 0; i < suffixes.length; i++) {
        if (dnsDomainIs(host, suffixes[i])) return true;
    }
    return false;
}

function FindProxyForURL(url, host) {
    host = host.toLowerCase();
    if (isPlainHostName(host) || host === "localhost") return "DIRECT";
    if (endsWithAny(host, BYPASS)) return "DIRECT";
    if (isInNet(host, "10.0.0.0", "255.0.0.0") || isInNet(host, "172.16.0.0", "255.240.0.0") ||
        isInNet(host, "192.168.0.0", "255.255.0.0")) return "DIRECT";
    if (endsWithAny(host, CLIENT_SUFFIXES)) return "PROXY client";
    if (shExpMatch(host, "*.blocked.example") || shExpMatch(host, "ads.*")) return "BLOCK";
    if (shExpMatch(url, "http://*") && localHostOrDomainIs(host, "legacy")) return "PROXY gateway";
    if (url.substring(0, 6) === "ftp://") return "PROXY proxy.corp.example:2121";
    if (dnsDomainLevels(host) > 5) return "PROXY gateway";
    if (shExpMatch(host, "*.cdn.example") || shExpMatch(host, "static?.example")) return "DIRECT";
    return "PROXY proxy.corp.example:8080; DIRECT";
}
"""

# pacparser asks the real DNS in dnsResolve; give it ours: IP literals only, names resolve to nothing.
PACPARSER_PRELUDE = r"function dnsResolve(h) { return /^\d+\.\d+\.\d+\.\d+$/.test(h) ? h : null; }" + "\n"


def destinations(count: int) -> list[Destination]:
    """Distinct destinations shaped like real traffic: names of every kind, some bare IPs."""
    shapes: list[Callable[[int], Destination]] = [
        lambda i: Destination(f"svc{i}.corp.example", None, 443),
        lambda i: Destination(f"www.site{i}.example", None, 443, url=f"https://www.site{i}.example/"),
        lambda i: Destination(f"repo{i}.git.example", None, 22),
        lambda i: Destination(None, f"10.{i % 250}.{i // 250 % 250}.{i % 7 + 1}", 8080),
        lambda i: Destination(f"ads.tracker{i}.example", None, 443),
        lambda i: Destination(f"host{i}", None, 80),
        lambda i: Destination(f"a.b.c.d.e.deep{i}.example", None, 443),
        lambda i: Destination(f"img{i}.cdn.example", None, 443),
        lambda i: Destination(
            f"api{i}.example.com", None, 443, url=f"http://api{i}.example.com/v1/items?page={i}"
        ),
        lambda i: Destination(None, f"203.0.{i % 250}.{i // 250 % 250 + 1}", 443),
    ]
    return [shapes[i % len(shapes)](i) for i in range(count)]


def fifty_rules() -> dict[str, Any]:
    rules: list[dict[str, str]] = []
    for i in range(20):
        rules.append({"pattern": f"*.team{i}.corp.example", "route": "client"})
    for i in range(10):
        rules.append({"pattern": f"10.{i}.0.0/16", "route": "gateway"})
    for i in range(10):
        rules.append({"pattern": f"svc{i}?.example:{8000 + i}", "route": "deny"})
    for i in range(9):
        rules.append({"pattern": f"[fd{i:02x}::/16]", "route": "client"})
    rules.append({"pattern": "*:25", "route": "deny"})
    return {"default": "cluster", "rules": rules}


def process_cpu(pid: int) -> float:
    """User + system CPU-seconds of another process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(work: Callable[[], None]) -> tuple[float, float]:
    """(wall seconds, CPU-seconds of this process and of this thread's PAC worker) for one call."""
    worker = worker_for_thread().pid
    wall, cpu, worker_cpu = time.perf_counter(), time.process_time(), process_cpu(worker) if worker else 0.0
    work()
    worker_cpu = (process_cpu(worker) - worker_cpu) if worker else 0.0
    return time.perf_counter() - wall, time.process_time() - cpu + worker_cpu


def route_all(policy: Policy, dests: list[Destination]) -> Callable[[], None]:
    def run() -> None:
        for dest in dests:
            policy.route(dest)

    return run


def measure(runs: int, make: Callable[[], Callable[[], None]], count: int) -> tuple[float, float]:
    """Median decisions/s and median CPU-seconds over the runs."""
    rates, cpus = [], []
    for _ in range(runs):
        wall, cpu = timed(make())
        rates.append(count / wall)
        cpus.append(cpu)
    return statistics.median(rates), statistics.median(cpus)


def pacparser_baseline(runs: int, dests: list[Destination], ours: list[str | None]) -> dict[str, Any]:
    try:
        import pacparser  # type: ignore[import-not-found]
    except ImportError:
        return {"pacparser_per_s": None, "pacparser_cpu_s": None, "pacparser_disagreements": None}
    pacparser.init()
    pacparser.parse_pac_string(PACPARSER_PRELUDE + CORPORATE_PAC)
    calls = [(dest.pac_url(), dest.pac_host()) for dest in dests]

    def run() -> None:
        for url, host in calls:
            pacparser.find_proxy(url, host)

    rate, cpu = measure(runs, lambda: run, len(calls))
    theirs = [pacparser.find_proxy(url, host) for url, host in calls]
    pacparser.cleanup()
    disagreements = sum(1 for a, b in zip(ours, theirs, strict=True) if a != b)
    return {"pacparser_per_s": rate, "pacparser_cpu_s": cpu, "pacparser_disagreements": disagreements}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    dests = destinations(args.hosts)
    n = len(dests)
    spec = {"script": CORPORATE_PAC}

    uncached = compile_policy(spec, cache_size=0)
    route_all(uncached, dests[:200])()  # every thread-local sandbox built, code paths warm
    pac_uncached, pac_uncached_cpu = measure(args.runs, lambda: route_all(uncached, dests), n)

    def cached_run() -> Callable[[], None]:
        policy = compile_policy(spec, cache_size=2 * n)
        route_all(policy, dests)()  # fill
        return route_all(policy, dests)

    pac_cached, pac_cached_cpu = measure(args.runs, cached_run, n)

    isolated = compile_policy(spec, cache_size=0, pac_isolation="process")
    route_all(isolated, dests[:200])()
    pac_isolated, pac_isolated_cpu = measure(max(1, args.runs // 2), lambda: route_all(isolated, dests), n)

    rules = compile_policy(fifty_rules(), cache_size=0)
    rules_per_s, rules_cpu = measure(args.runs, lambda: route_all(rules, dests), n)

    assert uncached.script is not None
    ours = [uncached.script.find_proxy(dest.pac_url(), dest.pac_host(), dest.ip) for dest in dests]
    baseline = pacparser_baseline(args.runs, dests, ours)

    figures: dict[str, Any] = {
        "hosts": n,
        "pac_uncached_per_s": round(pac_uncached),
        "pac_uncached_cpu_s": round(pac_uncached_cpu, 3),
        "pac_cached_per_s": round(pac_cached),
        "pac_cached_cpu_s": round(pac_cached_cpu, 3),
        "pac_isolated_per_s": round(pac_isolated),
        "pac_isolated_cpu_s": round(pac_isolated_cpu, 3),
        "rules_per_s": round(rules_per_s),
        "rules_cpu_s": round(rules_cpu, 3),
        "pacparser_per_s": None
        if baseline["pacparser_per_s"] is None
        else round(baseline["pacparser_per_s"]),
        "pacparser_cpu_s": None
        if baseline["pacparser_cpu_s"] is None
        else round(baseline["pacparser_cpu_s"], 3),
        "pacparser_disagreements": baseline["pacparser_disagreements"],
    }
    figures["pac_uncached_vs_pacparser"] = (
        None if baseline["pacparser_per_s"] is None else round(pac_uncached / baseline["pacparser_per_s"], 2)
    )

    print(f"medians of {args.runs} runs over {n} distinct destinations (CPU-seconds per {n} decisions):")
    print(f"  PAC, uncached, in-process     {pac_uncached:10.0f} decisions/s  {pac_uncached_cpu:.3f} CPU-s")
    print(f"  PAC, cached                   {pac_cached:10.0f} decisions/s  {pac_cached_cpu:.3f} CPU-s")
    print(f"  PAC, uncached, worker process {pac_isolated:10.0f} decisions/s  {pac_isolated_cpu:.3f} CPU-s")
    print(f"  50 rules, uncached            {rules_per_s:10.0f} decisions/s  {rules_cpu:.3f} CPU-s")
    if baseline["pacparser_per_s"] is None:
        print("  pacparser                     not installed (pip install pacparser)")
    else:
        print(
            f"  pacparser (baseline)          {baseline['pacparser_per_s']:10.0f} decisions/s  "
            f"{baseline['pacparser_cpu_s']:.3f} CPU-s"
        )
        print(
            f"  in-process PAC / pacparser = {figures['pac_uncached_vs_pacparser']:.2f}; "
            f"answers differing: {baseline['pacparser_disagreements']} of {n}"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
