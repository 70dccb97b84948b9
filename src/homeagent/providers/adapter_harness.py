"""The trusted harness between an adapter script and the host, and what its answers mean.

The harness is Lua written by the host. It runs inside the adapter's sandbox,
under the same budget, calls the adapter's functions, checks what they return
and flattens it into a tuple of scalars, so one crossing brings a whole response
or stream chunk to Python. A wrong shape becomes an error that names the
adapter file and the line where the offending function is defined.

It is also the one place where token usage is normalised: an adapter may return
the unified ``{prompt, completion, total, cache_read, reasoning}`` or a vendor's
raw usage object, and ``usage5`` turns either into five integers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["HARNESS", "ParsedChunk", "ParsedResponse", "ParsedToolCall", "headers_from", "parsed_chunks",
           "parsed_response"]

Usage5 = tuple[int, int, int, int, int]  # prompt, completion, total, cache_read, reasoning


@dataclass
class ParsedToolCall:
    id: str
    name: str
    arguments: str


@dataclass
class ParsedResponse:
    content: str = ""
    reasoning: str = ""
    finish_reason: str = ""
    usage: Usage5 | None = None
    tool_calls: list[ParsedToolCall] = field(default_factory=list)
    error: str = ""
    error_kind: str = ""


@dataclass
class ParsedChunk:
    content: str = ""
    reasoning: str = ""
    finish_reason: str = ""
    done: bool = False
    usage: Usage5 | None = None
    error: str = ""
    error_kind: str = ""
    tool_calls: list[tuple[int, str, str, str]] = field(default_factory=list)  # (index, id, name, arguments)


HARNESS = r"""
local api, A, chunkname = ...
local decode, encode, fix_utf8, describe = api.decode, api.encode, api.fix_utf8, api.describe
local memo_begin, memo_end = api.memo_begin, api.memo_end
local type, tostring, tonumber, error, rawlen, select = type, tostring, tonumber, error, rawlen, select
local floor = math.floor
local unpack = table.unpack

local H = {}

local function defined(fname)
  local f = A[fname]
  if type(f) == "function" then return " (function defined at " .. describe(f) .. ")" end
  return ""
end

local function bad(fname, msg)
  error(chunkname .. ": " .. fname .. " " .. msg .. defined(fname), 0)
end

local function text(fname, r, key, alt)
  local v = r[key]
  if v == nil and alt then v = r[alt]; key = alt end
  if v == nil then return nil end
  local tv = type(v)
  if tv == "string" then return fix_utf8(v) end
  if tv == "number" then return tostring(v) end
  if v == api.null or v == false then return nil end
  bad(fname, "returned field '" .. key .. "' as a " .. tv .. ", expected a string")
end

local function int(v)
  if type(v) == "number" and v == v then return floor(v) end
  if type(v) == "string" then local n = tonumber(v); if n then return floor(n) end end
  return nil
end

local function pick(u, ...)
  for i = 1, select("#", ...) do
    local n = int(u[(select(i, ...))])
    if n then return n end
  end
  return nil
end

local function sub(u, key, field)
  local t = u[key]
  if type(t) == "table" then return int(t[field]) end
  return nil
end

-- The one usage normaliser. Accepts the unified shape {prompt, completion, total, cache_read,
-- reasoning} as well as the usual raw shapes (OpenAI, DeepSeek, Anthropic, Gemini, Ollama, gateways);
-- a missing total is prompt + completion. Returns -1 as the prompt when there is no usage.
local function usage5(fname, u)
  if u == nil or u == api.null then return -1, 0, 0, 0, 0 end
  if type(u) ~= "table" then bad(fname, "returned 'usage' as a " .. type(u) .. ", expected a table") end
  local p = pick(u, "prompt", "prompt_tokens", "input_tokens", "promptTokenCount", "prompt_eval_count") or 0
  local c = pick(u, "completion", "completion_tokens", "output_tokens", "candidatesTokenCount", "eval_count") or 0
  local cr = pick(u, "cache_read") or sub(u, "prompt_tokens_details", "cached_tokens")
             or pick(u, "cached_tokens", "prompt_cache_hit_tokens", "cache_read_input_tokens", "cachedContentTokenCount")
             or 0
  local rs = pick(u, "reasoning") or sub(u, "completion_tokens_details", "reasoning_tokens")
             or pick(u, "reasoning_tokens", "thoughtsTokenCount") or 0
  local t = pick(u, "total", "total_tokens", "totalTokenCount") or (p + c)
  return p, c, t, cr, rs
end

local function args_text(fname, v)
  if v == nil or v == api.null then return "" end
  if type(v) == "string" then return fix_utf8(v) end
  if type(v) == "table" then return encode(v) end
  bad(fname, "returned tool call arguments as a " .. type(v) .. ", expected a string or table")
end

local function error_of(r)
  local err, kind = r.error, r.error_kind
  if err == nil or err == api.null or err == false then
    err = ""
  elseif type(err) == "table" then
    err = tostring(err.message or encode(err))
  else
    err = tostring(err)
  end
  if type(kind) ~= "string" then kind = "" end
  return err, kind
end

-- Appends the tool calls to out (from position n + 1): id, name, arguments, and with `indexed`
-- the stream index first. Returns the new length and the number of calls.
local function calls_into(fname, calls, out, n, indexed)
  if calls == nil or calls == api.null then return n, 0 end
  if type(calls) ~= "table" then bad(fname, "returned 'tool_calls' as a " .. type(calls) .. ", expected a list") end
  local count = rawlen(calls)
  for i = 1, count do
    local tc = calls[i]
    if type(tc) ~= "table" then bad(fname, "returned tool_calls[" .. i .. "] as a " .. type(tc) .. ", expected a table") end
    local fn = type(tc["function"]) == "table" and tc["function"] or tc
    local name = fn.name
    if type(name) ~= "string" then
      if not indexed then bad(fname, "returned tool_calls[" .. i .. "] without a name") end
      name = ""
    elseif name == "" and not indexed then
      bad(fname, "returned tool_calls[" .. i .. "] without a name")
    end
    local id = tc.id
    if type(id) ~= "string" then id = (id ~= nil and id ~= api.null) and tostring(id) or "" end
    local a = fn.arguments
    if a == nil then a = fn.raw_arguments end
    if indexed then
      n = n + 1
      out[n] = int(tc.index) or int(tc.stream_index) or (i - 1)
    end
    out[n + 1], out[n + 2], out[n + 3] = id, name, args_text(fname, a)
    n = n + 3
  end
  return n, count
end

-- checked: false leaves invalid UTF-8 in the body for the host to notice (it then asks
-- again with checked = true, which replaces it): checking in Lua costs ~1 ns a byte.
function H.request(req_json, messages_json, tools_json, ctx, message_sizes, checked)
  memo_begin() -- strings of the host's request JSON are re-encoded without a scan
  local pending = {messages = messages_json}
  if tools_json ~= "" then pending.tools = tools_json end
  local sizes = nil
  if message_sizes and message_sizes ~= "" then sizes = {messages = message_sizes} end
  local req = api.lazy_object(decode(req_json, true), pending, sizes)
  local body = A.transform_request(req, ctx)
  if type(body) == "string" then memo_end(); return checked and fix_utf8(body) or body end
  if type(body) ~= "table" then memo_end(); bad("transform_request", "returned a " .. type(body) .. ", expected a table or a JSON string") end
  local text = encode(body, not checked, messages_json, tools_json)
  memo_end()
  if type(text) == "table" then return unpack(text) end
  return text
end

-- content, reasoning, finish_reason, usage (5), error, error_kind, call count, then per call
-- id, name, arguments
function H.response(raw, ctx)
  local fname = "transform_response"
  local r = A.transform_response(raw, ctx)
  if type(r) ~= "table" then bad(fname, "returned a " .. type(r) .. ", expected a table") end
  local out = {
    text(fname, r, "content") or "",
    text(fname, r, "reasoning_content", "reasoning") or "",
    text(fname, r, "finish_reason") or "",
  }
  out[4], out[5], out[6], out[7], out[8] = usage5(fname, r.usage or r.token_usage)
  out[9], out[10] = error_of(r)
  local n, count = calls_into(fname, r.tool_calls, out, 11, false)
  out[11] = count
  return unpack(out, 1, n)
end

-- Stream payloads, as many as arrived together: one crossing for all of them. Per chunk
-- content, reasoning, finish_reason, done, usage (5), error, error_kind, call count, then per
-- call index, id, name, arguments; skipped payloads add nothing; a `done` chunk ends the batch.
local at = 0 -- the payload being parsed: where() names it after an error

function H.chunks(state, ctx, ...)
  local fname = "transform_stream_chunk"
  local lines, out, n = {...}, {}, 0
  for i = 1, #lines do
    at = i
    local r = A.transform_stream_chunk(lines[i], state, ctx)
    if r ~= nil and r ~= "" and r ~= false and r ~= api.null then
      if type(r) ~= "table" then bad(fname, "returned a " .. type(r) .. ", expected a table, nil or \"\"") end
      out[n + 1] = text(fname, r, "content") or ""
      out[n + 2] = text(fname, r, "reasoning", "reasoning_content") or ""
      out[n + 3] = text(fname, r, "finish_reason") or ""
      out[n + 4] = r.done and true or false
      out[n + 5], out[n + 6], out[n + 7], out[n + 8], out[n + 9] = usage5(fname, r.usage or r.token_usage)
      out[n + 10], out[n + 11] = error_of(r)
      local last, count = calls_into(fname, r.tool_calls, out, n + 12, true)
      out[n + 12] = count
      n = last
      if r.done then break end
    end
  end
  return unpack(out, 1, n)
end

function H.where()
  return at
end

function H.endpoint(ctx)
  local e = A.endpoint
  if type(e) == "function" then e = e(ctx) end
  if type(e) ~= "string" then bad("endpoint", "returned a " .. type(e) .. ", expected a string") end
  return e
end

function H.headers(api_key, ctx)
  local h = A.headers
  if type(h) == "function" then h = h(api_key, ctx) end
  if h == nil then return end
  if type(h) ~= "table" then bad("headers", "returned a " .. type(h) .. ", expected a table") end
  local out, n = {}, 0
  for k, v in pairs(h) do
    if type(k) ~= "string" then bad("headers", "returned a non-string header name") end
    if type(v) ~= "string" and type(v) ~= "number" then bad("headers", "returned header '" .. k .. "' as a " .. type(v)) end
    out[n + 1], out[n + 2] = k, tostring(v)
    n = n + 2
  end
  return unpack(out, 1, n)
end

function H.ctx(model, stream, thinking, base_url, source)
  return {model = model, stream = stream, thinking = thinking, base_url = base_url, source = source}
end

return H
"""


def _usage(v: tuple[Any, ...], at: int) -> Usage5 | None:
    if v[at] < 0:
        return None
    p, c, t, cr, rs = v[at:at + 5]
    return int(p), int(c), int(t), int(cr), int(rs)


def parsed_response(v: tuple[Any, ...]) -> ParsedResponse:
    """What ``H.response`` returned."""
    out = ParsedResponse(content=v[0], reasoning=v[1], finish_reason=v[2], usage=_usage(v, 3),
                         error=v[8], error_kind=v[9])
    for base in range(11, 11 + 3 * int(v[10]), 3):
        out.tool_calls.append(ParsedToolCall(id=v[base], name=v[base + 1], arguments=v[base + 2]))
    return out


def parsed_chunks(v: tuple[Any, ...]) -> list[ParsedChunk]:
    """What ``H.chunks`` returned: the batch's chunks in order."""
    out: list[ParsedChunk] = []
    at, end = 0, len(v)
    while at < end:
        chunk = ParsedChunk(content=v[at], reasoning=v[at + 1], finish_reason=v[at + 2], done=bool(v[at + 3]),
                            usage=_usage(v, at + 4), error=v[at + 9], error_kind=v[at + 10])
        calls_end = at + 12 + 4 * int(v[at + 11])
        for base in range(at + 12, calls_end, 4):
            chunk.tool_calls.append((int(v[base]), v[base + 1], v[base + 2], v[base + 3]))
        out.append(chunk)
        at = calls_end
    return out


def headers_from(v: tuple[Any, ...]) -> dict[str, str]:
    """What ``H.headers`` returned: name, value, name, value, …"""
    return {str(v[i]): str(v[i + 1]) for i in range(0, len(v) - 1, 2) if v[i] is not None}
