"""schemathesis against the running web UI's OpenAPI document, with the API token.

The daemon runs with its web UI on a free loopback port; the token is the one
printed at first start. schemathesis (its CLI, the way a user runs it) checks
`not_a_server_error` and `response_schema_conformance` on every operation; the
live event stream (`GET /api/v1/events`, never ends) is left out. Its report is
read back into distinct failures: (operation, what failed).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import time
from pathlib import Path

from bench.campaign.daemon import DaemonProc, configure, free_port
from bench.campaign.report import Row

_OPERATION = re.compile(r"^_{3,} (\S+ \S+) _{3,}$")
_FAILURE = re.compile(r"^- (.+)$")
_GENERATED = re.compile(r"(\d[\d,]*) generated")


def schemathesis_command() -> list[str] | None:
    exe = Path(sys.executable).with_name("schemathesis")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("schemathesis") or shutil.which("st")
    return [found] if found else None


def parse(output: str) -> tuple[int, list[tuple[str, str]], list[tuple[str, str]]]:
    """Test cases generated, distinct failures (operation, check) and schemathesis' own runtime errors."""
    generated = sum(int(m.replace(",", "")) for m in _GENERATED.findall(output)[-1:])
    failures: list[tuple[str, str]] = []
    errors: list[tuple[str, str]] = []
    section = ""
    operation = ""
    for line in output.splitlines():
        stripped = line.strip()
        if stripped.startswith("=====") and "FAILURES" in stripped:
            section = "failures"
        elif stripped.startswith("=====") and "ERRORS" in stripped:
            section = "errors"
        elif stripped.startswith("=====") and section:
            section = ""
        found = _OPERATION.match(stripped)
        if found:
            operation = found.group(1)
            continue
        if section == "failures":
            failure = _FAILURE.match(stripped)
            if failure and (operation, failure.group(1)) not in failures:
                failures.append((operation, failure.group(1)))
        elif section == "errors" and operation and stripped and not any(e[0] == operation for e in errors):
            errors.append((operation, stripped))
    return generated, failures, errors


async def _authorised(url: str, token: str, seconds: float = 15) -> int:
    """The status of an authorised GET, polled until 200 or time is up (the web UI starts after the socket)."""
    import httpx

    deadline = time.monotonic() + seconds
    status = 0
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() < deadline:
            try:
                status = (await client.get(url, headers={"Authorization": f"Bearer {token}"})).status_code
            except httpx.HTTPError:
                status = 0
            if status == 200:
                break
            await asyncio.sleep(0.2)
    return status


async def run(workdir: Path, examples: int, seconds: int, seed: int) -> Row:
    row = Row("schemathesis (web API)")
    command = schemathesis_command()
    if command is None:
        row.fail("schemathesis is not installed (pip install -e '.[dev]')")
        return row
    data = workdir / "api"
    data.mkdir(parents=True)
    port = free_port()
    configure(data, {"webui.listen_addr": f"127.0.0.1:{port}"})
    daemon = DaemonProc(data, web=True)
    started = time.monotonic()
    await daemon.start()
    try:
        if daemon.token is None:
            row.fail(f"no web UI token in the daemon's output:\n{daemon.tail(20)}")
            return row
        status = await _authorised(f"http://127.0.0.1:{port}/api/v1/status", daemon.token)
        if status != 200:
            row.fail(f"GET /api/v1/status with the token answers {status}:\n{daemon.tail(20)}")
            return row
        args = [
            *command, "run", f"http://127.0.0.1:{port}/api/v1/openapi.json",
            "-H", f"Authorization: Bearer {daemon.token}",
            "--checks", "not_a_server_error,response_schema_conformance",
            "--max-examples", str(examples), "--seed", str(seed), "--workers", "2",
            "--exclude-path", "/api/v1/events", "--request-timeout", "60", "--no-shrink",
            "--phases", "examples,coverage,fuzzing",
        ]
        proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT, cwd=workdir)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), seconds)
        except TimeoutError:
            proc.kill()
            out, _ = await proc.communicate()
            row.notes.append(f"schemathesis stopped after its {seconds} s budget")
        output = out.decode(errors="replace")
        (workdir / "schemathesis.out").write_text(output)
        alive = await daemon.status_ok()
    finally:
        await daemon.stop()
    generated, failures, errors = parse(output)
    server_errors = [f for f in failures if "server error" in f[1].lower()]
    mismatches = [f for f in failures if f not in server_errors]
    row.figures = {
        "test cases": generated,
        "server errors (5xx)": len(server_errors),
        "schema mismatches": len(mismatches),
        "schemathesis runtime errors": len(errors),
    }
    for operation, what in failures:
        row.fail(f"{operation}: {what}")
    for operation, what in errors:
        row.notes.append(f"schemathesis itself failed on {operation}: {what[:160]}")
    if generated == 0:
        row.fail(f"schemathesis generated no test cases:\n{output[-1500:]}")
    if not alive:
        row.fail("the daemon did not answer status after the run")
    row.seconds = time.monotonic() - started
    return row
