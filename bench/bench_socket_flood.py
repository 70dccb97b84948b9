"""A client floods the local socket with RPCs and never reads: the daemon's RSS before, during and after.

    .venv/bin/python bench/bench_socket_flood.py                       # this tree
    .venv/bin/python bench/bench_socket_flood.py --before /tmp/old/src # also an older tree's src/, same flood
    .venv/bin/python bench/bench_socket_flood.py --rpcs 20000 --clients 1

For each tree a real ``homeagent run --no-web`` starts on a fresh data
directory. After it settles, ``--clients`` connections each write ``--rpcs``
``status`` RPCs without reading a byte (writes that would block are retried
until nothing has moved for 3 s). RSS (VmRSS) is sampled before, at the peak
while the flooders hold their connections, and 5 s after they disconnect;
another client's ``status`` round trip is timed during the flood. Issue 22
measured 503 → 965 MB for 20,000 RPCs, not returned after the disconnect.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    return sock


def status_rtt(path: Path) -> tuple[float, dict[str, Any]]:
    """Seconds for one status RPC on a fresh connection, and its result."""
    started = time.perf_counter()
    with connect(path) as sock:
        sock.settimeout(30)
        sock.sendall(b'{"type":"rpc","id":1,"method":"status","params":{}}\n')
        buf = b""
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError("daemon closed the connection")
            buf += chunk
            for line in buf.split(b"\n")[:-1]:
                frame = json.loads(line)
                if frame.get("type") == "rpc_result":
                    return time.perf_counter() - started, frame["result"]


def flood(sock: socket.socket, rpcs: int) -> int:
    """Write ``rpcs`` status RPCs, never reading; returns the bytes the daemon took before it stopped reading."""
    data = b"".join(b'{"type":"rpc","id":%d,"method":"status","params":{}}\n' % i for i in range(rpcs))
    sock.setblocking(False)
    sent, idle_since = 0, time.monotonic()
    while sent < len(data) and time.monotonic() - idle_since < 3.0:
        try:
            n = sock.send(data[sent : sent + (1 << 16)])
        except BlockingIOError:
            time.sleep(0.01)
            continue
        sent += n
        idle_since = time.monotonic()
    return sent


def settle(pid: int, *, quiet: float = 1.0, limit: float = 60.0) -> float:
    """RSS once it has not grown by more than 1 MB for ``quiet`` seconds (or after ``limit``)."""
    deadline = time.monotonic() + limit
    last, still_since = rss_mb(pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = rss_mb(pid)
        if now > last + 1.0:
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= quiet:
            return max(now, last)
    return rss_mb(pid)


def run_tree(label: str, src: Path, rpcs: int, clients: int) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="ha-flood-"))
    env = {**os.environ, "PYTHONPATH": str(src), "HOMEAGENT_DATA_DIR": str(data)}
    env.pop("HOMEAGENT_SOCKET", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "homeagent", "--data-dir", str(data), "run", "--no-web", "--log-level", "warn"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    path = data / "cli.sock"
    try:
        deadline = time.monotonic() + 60
        while not path.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{label}: daemon did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.1)
        status_rtt(path)
        time.sleep(3.0)  # memory and plugins finish loading in the background
        before = settle(proc.pid)
        socks = [connect(path) for _ in range(clients)]
        accepted = sum(flood(s, rpcs) for s in socks)
        during = settle(proc.pid)
        rtt, status = status_rtt(path)
        for s in socks:
            s.close()
        time.sleep(5.0)
        after = rss_mb(proc.pid)
        alive = proc.poll() is None
        return {
            "tree": label,
            "before": before,
            "during": during,
            "after": after,
            "accepted_kb": accepted / 1024,
            "sent_kb": clients * len(b'{"type":"rpc","id":10000,"method":"status","params":{}}\n') * rpcs / 1024,
            "rtt_ms": rtt * 1000,
            "busy": status["socket_clients"]["busy_refusals"] if "socket_clients" in status else None,
            "unread_kb": status["socket_clients"]["unread_bytes"] / 1024 if "socket_clients" in status else None,
            "alive": alive,
        }
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpcs", type=int, default=20_000, help="RPCs per flooding client")
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--before", type=Path, help="an older tree's src/ folder to measure the same way")
    args = parser.parse_args()
    rows = []
    if args.before:
        rows.append(run_tree("before", args.before.resolve(), args.rpcs, args.clients))
    rows.append(run_tree("this tree", ROOT / "src", args.rpcs, args.clients))
    print(f"\n{args.clients} client(s) × {args.rpcs} status RPCs, never reading (RSS of the daemon, MB)\n")
    print(
        "| tree | before | during flood | 5 s after disconnect | growth kept | RPC bytes written "
        "| answered busy | unread output held | other client's status | daemon up |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        busy = "—" if r["busy"] is None else f"{r['busy']:,}"
        unread = "—" if r["unread_kb"] is None else f"{r['unread_kb']:.0f} KiB"
        print(
            f"| {r['tree']} | {r['before']:.0f} | {r['during']:.0f} | {r['after']:.0f} | {r['after'] - r['before']:+.0f} "
            f"| {r['accepted_kb']:.0f} of {r['sent_kb']:.0f} KiB | {busy} | {unread} | {r['rtt_ms']:.1f} ms "
            f"| {'yes' if r['alive'] else 'NO'} |"
        )


if __name__ == "__main__":
    main()
