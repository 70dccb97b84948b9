"""Subprocess plugins: crash-isolated plugins in any language, over NDJSON JSON-RPC (protocol v1).

Modules: ``protocol`` (the wire format, shared with the Python SDK), ``connection``
(one child's RPC endpoint), ``host`` (the methods a plugin may call and the proxies
for what it registers), ``stagewire`` (stage contexts as snapshots and changes),
``capabilities`` (what a manifest allows), ``supervisor`` (processes and their
lifetime), ``plugin`` (the registry's view: restarts, circuit breaker, health).
This package imports nothing at import time, so the plugin-side runtime can use
``protocol`` without loading the host. The protocol is specified in docs/protocol.md.
"""
