"""Shared parts of the tests that compare a host-built request body with its adapter's Lua.

The Lua side is the very same shipped file loaded as a user's adapter (a user's file
always runs its Lua), so both sides are real adapters over real interfaces.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from hypothesis import strategies as st

from homeagent.providers.adapter_loader import BUILTIN_DIR, Adapter, AdapterLoader, RequestContext, request_parts
from homeagent.providers.native_common import Native


def user_adapter(tmp_path_factory: pytest.TempPathFactory, name: str) -> Adapter:
    """The shipped ``<name>.lua`` loaded from a user's adapters folder: its Lua always runs."""
    user = tmp_path_factory.mktemp("adapters")
    shutil.copy(BUILTIN_DIR / f"{name}.lua", user / f"{name}.lua")
    adapter = AdapterLoader(user_dir=user).get(name)
    assert not adapter.builtin
    return adapter


def lua_body(lua: Adapter, request: dict[str, Any]) -> Any:
    ctx = RequestContext(model=str(request.get("model")), stream=bool(request.get("stream")),
                         thinking=bool(request.get("thinking")))
    return json.loads(lua.build_request_sync(request_parts(request), lua.context(ctx)))


def host_body(native: Native, request: dict[str, Any]) -> Any:
    """The host's body, or None when it declined (the Lua builds that one)."""
    body = native.build(request_parts(request))
    return None if body is None else json.loads(body)


texts = st.text(max_size=12)
big_ints = st.integers(-(2**63), 2**64 - 1)  # what orjson writes; beyond int64 the sandbox reads floats
scalars = st.one_of(st.booleans(), big_ints, st.floats(allow_nan=False, allow_infinity=False), texts, st.none())
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(["a", "text", "type", "url"]), inner, max_size=3), max_leaves=6)
# what the daemon's own requests hold: no nulls inside objects, integers well inside int64
plain_values = st.recursive(
    st.one_of(st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False), texts),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "text", "type"]), inner, max_size=3),
    max_leaves=6)
