"""Load test of ``pyelmo serve``: requests/s, tokens/s and latency with batching on and off.

Starts the server as subprocesses on 127.0.0.1 (free ports; one with batching, one
without, idle while the other is measured), then, for each number of concurrent clients
and each server in turn, runs a load process (this script with ``--client``) that keeps that
many HTTP/1.1 keep-alive connections busy for a fixed time, each sending one sentence
of ``--tokens`` tokens per ``POST /v1/embed`` request (all layers, base64 float32) and
waiting for the answer before sending the next. Everything stops by itself.

    python benchmarks/serve_load.py                      # 1, 8, 32 clients; 5 s each; batching on and off
    python benchmarks/serve_load.py --duration 3 --clients 1,8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def sentences(n_tokens: int, count: int = 200) -> list[list[str]]:
    """``count`` different ``n_tokens``-token sentences cut from the sample corpus's running text."""
    from pyelmo.evaluation.senses import read_sense_examples
    from pyelmo.serve.neighbours import sample_corpus_path

    words = [t for e in read_sense_examples(sample_corpus_path()) for t in e.tokens]
    return [[words[(i * 7 + j) % len(words)] for j in range(n_tokens)] for i in range(count)]


# ---------------------------------------------------------------------------- the load process


async def _client(host: str, port: int, bodies: list[bytes], warm_until: float, stop_at: float,
                  offset: int, latencies: list[float], errors: list[str]) -> None:
    reader = writer = None
    i = offset
    while time.monotonic() < stop_at:
        body = bodies[i % len(bodies)]
        i += 1
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            sent = time.monotonic()
            writer.write(b"POST /v1/embed HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % (host.encode(), len(body)) + body)
            await writer.drain()
            status = int((await reader.readline()).split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            payload = await reader.readexactly(length)
            done = time.monotonic()
            if sent >= warm_until:
                if status == 200:
                    latencies.append(done - sent)
                else:
                    errors.append(f"HTTP {status}: {payload[:200]!r}")
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            errors.append(repr(exc))
            writer = None
    if writer is not None:
        writer.close()


async def _load(url: str, concurrency: int, duration: float, warmup: float, n_tokens: int) -> dict:
    host, port = url.removeprefix("http://").split(":")
    bodies = [json.dumps({"sentences": [s], "encoding": "base64"}).encode() for s in sentences(n_tokens)]
    latencies: list[float] = []
    errors: list[str] = []
    start = time.monotonic()
    warm_until, stop_at = start + warmup, start + warmup + duration
    await asyncio.gather(*(_client(host, int(port), bodies, warm_until, stop_at, k * 13, latencies, errors)
                           for k in range(concurrency)))
    elapsed = time.monotonic() - warm_until
    lat = np.array(latencies) * 1000 if latencies else np.array([float("nan")])
    return {"clients": concurrency, "requests": len(latencies), "errors": len(errors),
            "first_errors": errors[:3], "seconds": elapsed,
            "req_per_s": len(latencies) / elapsed, "tokens_per_s": len(latencies) * n_tokens / elapsed,
            "p50_ms": float(np.percentile(lat, 50)), "p95_ms": float(np.percentile(lat, 95)),
            "p99_ms": float(np.percentile(lat, 99))}


# ---------------------------------------------------------------------------- the driver


def _start_server(batching: bool, extra: list[str]) -> tuple[subprocess.Popen, str]:
    from pyelmo.serve.process import ServerStartError, start_server

    try:
        return start_server([*extra, *([] if batching else ["--no-batching"])], timeout=300)
    except ServerStartError as exc:
        raise SystemExit(str(exc)) from None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _uptime() -> str:
    try:
        return "load average " + ", ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "load average unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,8,32", help="concurrency levels (default 1,8,32)")
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per level (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first (default 1)")
    parser.add_argument("--tokens", type=int, default=20, help="tokens per sentence (default 20)")
    parser.add_argument("--modes", default="on,off", help="batching modes to run (default on,off)")
    parser.add_argument("--server-args", default="", help="extra `pyelmo serve` arguments, space-separated")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)  # internal: be the load process
    parser.add_argument("--concurrency", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.client:
        print(json.dumps(asyncio.run(_load(args.client, args.concurrency, args.duration, args.warmup, args.tokens))))
        return 0

    levels = [int(c) for c in args.clients.split(",")]
    print(f"# pyelmo serve load test: {args.tokens}-token sentences, POST /v1/embed (all layers, base64 float32),"
          f" {args.duration:g} s per level after {args.warmup:g} s warm-up")
    print(f"# CPU: {_cpu_model()}, {os.cpu_count()} logical CPUs; before: {_uptime()}")
    results = []
    modes = args.modes.split(",")
    servers = {mode: _start_server(mode == "on", args.server_args.split()) for mode in modes}
    try:
        for level in levels:  # the modes side by side at each level, under the same machine load
            for mode in modes:
                out = subprocess.run([sys.executable, __file__, "--client", servers[mode][1], "--concurrency",
                                      str(level), "--duration", str(args.duration), "--warmup", str(args.warmup),
                                      "--tokens", str(args.tokens)],
                                     capture_output=True, text=True, check=True, timeout=args.duration * 10 + 120)
                result = {"batching": mode, **json.loads(out.stdout)}
                results.append(result)
                print(f"  batching {mode:>3}, {level:>2} clients: {result['req_per_s']:7.1f} req/s, "
                      f"{result['tokens_per_s']:8.0f} tokens/s, p50 {result['p50_ms']:6.1f} ms, "
                      f"p95 {result['p95_ms']:6.1f} ms, p99 {result['p99_ms']:6.1f} ms, errors {result['errors']}",
                      flush=True)
    finally:
        for mode, (proc, _) in servers.items():
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=120)
            if code != 0:
                print(f"# the server (batching {mode}) exited with {code}", file=sys.stderr)
    print(f"# after: {_uptime()}")
    print()
    print("| batching | clients | req/s | tokens/s | p50 ms | p95 ms | p99 ms | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in sorted(results, key=lambda r: (r["batching"] != "on", r["clients"])):
        print(f"| {r['batching']} | {r['clients']} | {r['req_per_s']:.1f} | {r['tokens_per_s']:.0f} | "
              f"{r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['p99_ms']:.1f} | {r['errors']} |")
    on = {r["clients"]: r for r in results if r["batching"] == "on"}
    if 8 in on:
        print(f"\n8 clients, batching on: {on[8]['errors']} errors, p95 {on[8]['p95_ms']:.1f} ms (target < 250)")
    if 1 in on and 32 in on:
        print(f"tokens/s at 32 clients / at 1 client, batching on: "
              f"{on[32]['tokens_per_s'] / on[1]['tokens_per_s']:.2f}x (target >= 3)")
    if args.json:
        from pyelmo.fileio import write_json_atomic

        write_json_atomic(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
