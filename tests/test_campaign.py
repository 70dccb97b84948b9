"""The reliability campaign (bench/campaign, issue 22) in its bounded form: every part once, at `--size ci`.

It runs the real campaign the way `python -m bench.campaign --size ci` does:
real `homeagent run` processes, kill -9 with the write ledger, malformed frames
on the socket and from a subprocess plugin, schemathesis against the web API, a
load of concurrent clients. The table is printed (pytest -s shows it); each
part's row must meet its target. The full-size figures are in docs/RELIABILITY.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.campaign.__main__ import SIZES, campaign
from bench.campaign.api import schemathesis_command
from bench.campaign.report import table

pytestmark = [pytest.mark.xdist_group("processes"), pytest.mark.timeout(420)]


async def test_the_bounded_campaign_meets_its_targets(tmp_path: Path) -> None:
    parts = ["kill9", "socket", "rpc", "load"]
    if schemathesis_command() is not None:
        parts.append("api")
    rows = await campaign(parts, SIZES["ci"], tmp_path / "c", seed=22)
    print(table(rows, "ci"))
    failed = {row.surface: row.notes for row in rows if not row.ok}
    assert not failed, table(rows, "ci")
