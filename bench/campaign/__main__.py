"""`python -m bench.campaign`: run the parts asked for at one size and print the table (exit 1 if a target is missed)."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.campaign.report import Row, table

PARTS = ("kill9", "socket", "rpc", "api", "load")


@dataclass(frozen=True)
class Size:
    """How much of each part: `full` is the issue's targets, `ci` fits the test suite's minute on 2 cores."""

    kills: int
    max_life: float  # a kill lands within this many seconds of a start
    cli_writes: bool  # CLI writers (~0.7 s a start each) alongside the socket ones
    socket_frames: int
    rpc_frames: int
    api_examples: int
    api_seconds: int
    load_clients: int
    load_seconds: float


SIZES = {
    "ci": Size(kills=2, max_life=1.5, cli_writes=True, socket_frames=3_000, rpc_frames=3_000,
               api_examples=3, api_seconds=60, load_clients=10, load_seconds=3),
    "small": Size(kills=12, max_life=3.0, cli_writes=True, socket_frames=20_000, rpc_frames=20_000,
                  api_examples=20, api_seconds=90, load_clients=30, load_seconds=20),
    "full": Size(kills=100, max_life=4.0, cli_writes=True, socket_frames=100_000, rpc_frames=100_000,
                 api_examples=100, api_seconds=900, load_clients=100, load_seconds=90),
}


async def campaign(parts: list[str], size: Size, workdir: Path, seed: int) -> list[Row]:
    rows: list[Row] = []
    for part in parts:
        started = time.monotonic()
        try:
            if part == "kill9":
                from bench.campaign import kill9

                row = await kill9.run(workdir, size.kills, seed, size.max_life, size.cli_writes)
            elif part == "socket":
                from bench.campaign import socketfuzz

                row = await socketfuzz.run(workdir, size.socket_frames, seed)
            elif part == "rpc":
                from bench.campaign import rpcfuzz

                row = await rpcfuzz.run(workdir, size.rpc_frames, seed)
            elif part == "api":
                from bench.campaign import api

                row = await api.run(workdir, size.api_examples, size.api_seconds, seed)
            else:
                from bench.campaign import load

                row = await load.run(workdir, size.load_clients, size.load_seconds, seed)
        except Exception as exc:  # a part that could not run is a failed row, and the others still run
            row = Row(part)
            row.fail(f"{exc.__class__.__name__}: {str(exc)[-1500:]}")
            row.seconds = time.monotonic() - started
        rows.append(row)
        print(f"[{part}] {'ok' if row.ok else 'FAIL'} in {row.seconds:.0f} s", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.campaign", description=__doc__)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated parts: " + ",".join(PARTS))
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--keep", action="store_true", help="keep the data dirs and daemon logs (printed)")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown parts: {', '.join(unknown)}")
    workdir = Path(tempfile.mkdtemp(prefix="hacamp-"))
    try:
        rows = asyncio.run(campaign(parts, SIZES[args.size], workdir, args.seed))
    finally:
        if args.keep:
            print(f"data dirs and daemon logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(table(rows, f"{args.size} (seed {args.seed})"))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
