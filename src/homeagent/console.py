"""The daemon's console (stdout/stderr) that may vanish under it.

``homeagent run | tee log`` and then Ctrl-C: the terminal sends SIGINT to the
whole pipeline, tee dies first, and the daemon's next ``print`` raises
BrokenPipeError. Raised from the shutdown path, that skipped the orderly stop
and left the daemon hanging on its plugin tasks (forever with an MCP server).
So console writes go through here: the first write to a closed pipe points
the file descriptor at /dev/null (later writes, children started later and
the interpreter's final flush then succeed quietly) and the daemon carries on;
its log file still has everything.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import TextIO


def detach(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at /dev/null (its pipe is gone)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)


def say(text: str, stream: TextIO | None = None) -> None:
    """Print a line to the console; a closed pipe is not an error for a daemon."""
    out = stream or sys.stdout
    try:
        print(text, file=out, flush=True)
    except BrokenPipeError:
        detach(out)
    except ValueError:  # the stream object itself was closed
        pass


class ConsoleLogHandler(logging.StreamHandler[TextIO]):
    """A stderr log handler that goes quiet, instead of reporting errors, once stderr's pipe is gone."""

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], BrokenPipeError):
            detach(self.stream)
            return
        super().handleError(record)
