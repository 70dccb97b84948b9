"""Resource limits of a plugin process, and telling from its exit whether one was hit.

The limits are kernel rlimits set in the child between fork and exec, so
they hold whatever language the plugin is written in and whatever it
starts (grandchildren inherit them):

* memory: ``RLIMIT_DATA`` (heap and private writable mappings — what a
  leak grows; since Linux 4.7 anonymous ``mmap`` counts too). Not
  ``RLIMIT_AS``: that also counts address space that is only reserved
  (thread stacks, allocator arenas, file mappings) and breaks ordinary
  programs long before they use much memory. An allocation past the limit
  fails: Python raises ``MemoryError``, C code sees ``malloc`` return NULL.
* CPU time: ``RLIMIT_CPU``, seconds of CPU over the process's life. At the
  soft limit the kernel sends ``SIGXCPU`` (default: terminate); a plugin
  that ignores it gets ``SIGKILL`` at the hard limit, a few seconds later.

A plugin that hits a limit exits like any crashed plugin and is restarted
with the usual backoff; :func:`explain_exit` turns its exit into the reason
shown in ``homeagent plugin info`` and the web UI.
"""

from __future__ import annotations

import resource
import signal
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CPU_HARD_GRACE", "ResourceLimits", "explain_exit"]

CPU_HARD_GRACE = 5  # seconds of CPU between SIGXCPU and SIGKILL
_OOM_MARKERS = ("MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc", "failed to allocate")


@dataclass(frozen=True)
class ResourceLimits:
    """Limits of one plugin process; 0 means no limit."""

    max_memory_mb: int = 1024
    max_cpu_seconds: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"max_memory_mb": self.max_memory_mb, "max_cpu_seconds": self.max_cpu_seconds}

    def preexec(self) -> Callable[[], None] | None:
        """A function for the child (after fork, before exec) that sets these limits; None when there are none."""
        memory = self.max_memory_mb * 1024 * 1024 if self.max_memory_mb > 0 else 0
        cpu = self.max_cpu_seconds if self.max_cpu_seconds > 0 else 0
        if not memory and not cpu:
            return None

        def apply() -> None:
            # Only lowering: an unprivileged process cannot raise a hard limit above the daemon's own.
            if memory:
                _lower(resource.RLIMIT_DATA, memory, memory)
            if cpu:
                _lower(resource.RLIMIT_CPU, cpu, cpu + CPU_HARD_GRACE)

        return apply


def _lower(which: int, soft: int, hard: int) -> None:
    _, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def explain_exit(code: int, stderr_tail: tuple[str, ...] | list[str], limits: ResourceLimits) -> tuple[str, str]:
    """(``"cpu"`` | ``"memory"`` | ``""``, a sentence for the user) for a plugin process that exited with ``code``."""
    if code == -int(signal.SIGXCPU) and limits.max_cpu_seconds > 0:
        return "cpu", (
            f"it used up its CPU-time limit of {limits.max_cpu_seconds} s "
            "(core.plugin.max_cpu_seconds, or this plugin's entry in core.plugin.limits)"
        )
    if limits.max_memory_mb > 0:
        tail = "\n".join(stderr_tail[-15:])
        if code != 0 and any(marker in tail for marker in _OOM_MARKERS):
            return "memory", (
                f"it ran out of memory under its memory limit of {limits.max_memory_mb} MB "
                "(core.plugin.max_memory_mb, or this plugin's entry in core.plugin.limits)"
            )
        if code in (-int(signal.SIGABRT), -int(signal.SIGSEGV), -int(signal.SIGBUS)):
            return "", f"possibly an allocation refused under its memory limit of {limits.max_memory_mb} MB"
    if code == -int(signal.SIGKILL) and limits.max_cpu_seconds > 0:
        return "", "SIGKILL not sent by HomeAgent: the CPU-time hard limit, the kernel's out-of-memory killer or another process"
    return "", ""
