"""The data-directory lock as a real second process sees it: held while the owner lives, gone after kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from homeagent.datalock import AlreadyRunning, DataDirLock, lock_holder

HOLDER = """
import sys, time
from pathlib import Path
from homeagent.datalock import DataDirLock
DataDirLock(Path(sys.argv[1])).acquire()
print("locked", flush=True)
time.sleep(60)
"""


def test_the_lock_names_its_owner_and_dies_with_it_even_by_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "daemon.lock"
    assert lock_holder(path) is None and not path.exists()  # probing never creates the file
    owner = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ})
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "locked"
        assert lock_holder(path) == str(owner.pid)
        with pytest.raises(AlreadyRunning, match=rf"pid {owner.pid}\) is already running on {tmp_path}"):
            DataDirLock(path).acquire()
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    deadline = time.monotonic() + 5
    while lock_holder(path) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lock_holder(path) is None  # no stale lock: the kernel dropped it with the process
    lock = DataDirLock(path)
    lock.acquire()
    assert path.read_text().strip() == str(os.getpid())
    lock.release()
