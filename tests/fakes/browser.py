"""What the browser tests share: Debian's chromium and its flags, the skip when it is missing, screenshots.

Playwright drives the system's chromium (installed by scripts/test), never a downloaded one.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.async_api import Page

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
MISSING = "browser tests need Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
SHOTS = os.environ.get("HOMEAGENT_SCREENSHOTS", "")


async def shot(page: Page, name: str) -> None:
    """Saved under $HOMEAGENT_SCREENSHOTS (e.g. docs/screenshots) when it is set."""
    if SHOTS:
        await asyncio.to_thread(Path(SHOTS).mkdir, parents=True, exist_ok=True)
        await page.wait_for_timeout(150)
        await page.screenshot(path=str(Path(SHOTS) / f"{name}.png"))
