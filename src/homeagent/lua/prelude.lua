-- The trusted prelude of every Lua sandbox (loaded by homeagent/lua/runtime.py). It runs once per runtime in the
-- real global environment and returns the host's private API; sandboxed code never sees that table.
local pylog = ...

local type, pairs, next, select, tostring, tonumber, error, pcall, xpcall, assert =
      type, pairs, next, select, tostring, tonumber, error, pcall, xpcall, assert
local rawget, rawset, rawlen, rawequal = rawget, rawset, rawlen, rawequal
local raw_getmetatable, raw_setmetatable = getmetatable, setmetatable
local raw_load = load
local sethook, getinfo, traceback, dgetmetatable = debug.sethook, debug.getinfo, debug.traceback, debug.getmetatable
local dsetmetatable = debug.setmetatable
local cocreate, coresume, costatus, coyield = coroutine.create, coroutine.resume, coroutine.status, coroutine.yield
local gc = collectgarbage
local byte, sub, find, char, gsub, format, strrep = string.byte, string.sub, string.find, string.char, string.gsub, string.format, string.rep
local concat, unpack = table.concat, table.unpack
local mtype, floor, huge = math.type, math.floor, math.huge
local utf8char, utf8len = utf8.char, utf8.len

-- string values' metatable exposes the real string table: take bytecode out of it
string.dump = nil

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

------------------------------------------------------------------------ json
local json = {}
local array_mt = {__jsontype = "array", __metatable = "json.array"}
local object_mt = {__jsontype = "object", __metatable = "json.object"}
local null = raw_setmetatable({}, {__jsontype = "null", __metatable = "json.null",
                                   __tostring = function() return "json.null" end})
json.null = null

local function jsontype(v)
  local mt = dgetmetatable(v)
  return mt and rawget(mt, "__jsontype")
end

function json.array(t)
  if t == nil then t = {} end
  if type(t) ~= "table" then error("json.array: table expected, got " .. type(t), 2) end
  return raw_setmetatable(t, array_mt)
end
local raw_mt = {__jsontype = "raw", __metatable = "json.raw"}

-- JSON text the encoder copies verbatim (for passing through what was never decoded).
function json.raw(text)
  if type(text) ~= "string" then error("json.raw: string expected, got " .. type(text), 2) end
  return raw_setmetatable({text}, raw_mt)
end

function json.object(t)
  if t == nil then t = {} end
  if type(t) ~= "table" then error("json.object: table expected, got " .. type(t), 2) end
  return raw_setmetatable(t, object_mt)
end

local esc = { [34] = '"', [92] = "\\", [47] = "/", [98] = "\b", [102] = "\f", [110] = "\n", [114] = "\r", [116] = "\t" }

local JSON_ERR = "json.decode: "
-- Decoder state lives in upvalues shared by the helpers (no closures per call;
-- decoding never yields or re-enters, and every call resets the state).
local s, pos, len = "", 1, 0
local nb = 0 -- position of the next backslash at/after the scan point; -1 = none left
local value
-- While the host's own JSON (the request) is decoded, every string is noted in
-- `memo` with its JSON form (true = needs only quotes), so the encoder copies it
-- back instead of scanning it for characters to escape. Untrusted text (what
-- adapters decode themselves) is never memoised: the lenient decoder accepts raw
-- control characters that must not reach the output unescaped.
local request_memo = false -- the current request's memo, or false
local mo = false           -- request_memo while decoding host text, else false
local NOMEMO = {}          -- stays empty
local MEMO_MIN = 12        -- shorter strings are cheap to scan
local rk = false           -- keys whose values stay JSON text (json.decode's `raw` option)
-- The element texts json.items handed out during the current request, by size:
-- json.decode of one of them is a decode of host JSON (memoised like the request).
-- By size, not by text: a long string is hashed byte by byte, a size compares at once.
local host_texts = false

  local function fail(what, at)
    local snippet = sub(s, (at or pos), (at or pos) + 15)
    error(format("%s%s at byte %d near %q", JSON_ERR, what, at or pos, snippet), 0)
  end

  local function str()
    local i = pos + 1
    local e = find(s, '"', i, true)
    if not e then fail("unterminated string") end
    if nb ~= -1 and nb < i then nb = find(s, "\\", i, true) or -1 end
    if nb == -1 or nb > e then
      pos = e + 1
      local v = sub(s, i, e - 1)
      if mo and e - i >= MEMO_MIN then mo[v] = true end
      return v
    end
    local i0 = i
    local parts, n = {}, 0
    e = nb
    while true do
      if byte(s, e) == 34 then
        n = n + 1; parts[n] = sub(s, i, e - 1)
        pos = e + 1
        local v = concat(parts)
        if mo then mo[v] = sub(s, i0 - 1, e) end
        return v
      end
      n = n + 1; parts[n] = sub(s, i, e - 1)
      local x = byte(s, e + 1)
      if x == 117 then
        local hex = sub(s, e + 2, e + 5)
        local cp = #hex == 4 and tonumber(hex, 16)
        if not cp then fail("bad \\u escape", e) end
        local nxt = e + 6
        if cp >= 0xD800 and cp <= 0xDBFF and byte(s, nxt) == 92 and byte(s, nxt + 1) == 117 then
          local lo = tonumber(sub(s, nxt + 2, nxt + 5), 16)
          if lo and lo >= 0xDC00 and lo <= 0xDFFF then
            cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
            nxt = nxt + 6
          end
        end
        if cp >= 0xD800 and cp <= 0xDFFF then cp = 0xFFFD end
        n = n + 1; parts[n] = utf8char(cp)
        i = nxt
      else
        local r = esc[x]
        if not r then fail("bad escape", e) end
        n = n + 1; parts[n] = r
        i = e + 2
      end
      e = find(s, '["\\]', i)
      if not e then fail("unterminated string") end
    end
  end

  function value()
    local c = byte(s, pos)
    if c == 32 or c == 10 or c == 13 or c == 9 then
      pos = find(s, "[^ \t\r\n]", pos) or (len + 1)
      c = byte(s, pos)
    end
    if c == 34 then
      return str()
    elseif c == 123 then
      pos = pos + 1
      local t = raw_setmetatable({}, object_mt)
      c = byte(s, pos)
      if c == 32 or c == 10 or c == 13 or c == 9 then pos = find(s, "[^ \t\r\n]", pos) or (len + 1); c = byte(s, pos) end
      if c == 125 then pos = pos + 1; return t end
      while true do
        -- fast path: a plain key directly followed by ':' (one C call)
        local _, e, k = find(s, '^"([^"\\]*)":', pos)
        if e then
          pos = e + 1
        else
          if c ~= 34 then fail("expected a string key") end
          k = str()
          c = byte(s, pos)
          if c ~= 58 then
            if c == 32 or c == 10 or c == 13 or c == 9 then pos = find(s, "[^ \t\r\n]", pos) or (len + 1); c = byte(s, pos) end
            if c ~= 58 then fail("expected ':'") end
          end
          pos = pos + 1
        end
        local v
        if rk and rk[k] then
          local st = pos
          v = value()
          if v ~= null then v = raw_setmetatable({sub(s, st, pos - 1)}, raw_mt) end
        else
          v = value()
        end
        if v ~= null then t[k] = v end
        c = byte(s, pos)
        if c == 32 or c == 10 or c == 13 or c == 9 then pos = find(s, "[^ \t\r\n]", pos) or (len + 1); c = byte(s, pos) end
        pos = pos + 1
        if c == 125 then return t end
        if c ~= 44 then fail("expected ',' or '}'", pos - 1) end
        c = byte(s, pos)
        if c == 32 or c == 10 or c == 13 or c == 9 then pos = find(s, "[^ \t\r\n]", pos) or (len + 1); c = byte(s, pos) end
      end
    elseif c == 91 then
      pos = pos + 1
      local t, n = raw_setmetatable({}, array_mt), 0
      c = byte(s, pos)
      if c == 32 or c == 10 or c == 13 or c == 9 then pos = find(s, "[^ \t\r\n]", pos) or (len + 1); c = byte(s, pos) end
      if c == 93 then pos = pos + 1; return t end
      while true do
        n = n + 1
        t[n] = value() -- null stays as json.null so positions survive
        c = byte(s, pos)
        if c == 32 or c == 10 or c == 13 or c == 9 then pos = find(s, "[^ \t\r\n]", pos) or (len + 1); c = byte(s, pos) end
        pos = pos + 1
        if c == 93 then return t end
        if c ~= 44 then fail("expected ',' or ']'", pos - 1) end
      end
    elseif c == 116 then
      if sub(s, pos, pos + 3) == "true" then pos = pos + 4; return true end
    elseif c == 102 then
      if sub(s, pos, pos + 4) == "false" then pos = pos + 5; return false end
    elseif c == 110 then
      if sub(s, pos, pos + 3) == "null" then pos = pos + 4; return null end
    elseif c then
      local a, b = find(s, "^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
      if a then
        local num = tonumber(sub(s, a, b))
        if num then pos = b + 1; return num end
      end
    end
    fail(c and "unexpected character" or "unexpected end of input")
  end

local function decode_impl(text, trusted, raw_keys)
  s, pos, len, nb = text, 1, #text, 0
  mo = trusted and request_memo
  rk = raw_keys or false
  local v = value()
  mo, rk = false, false
  if pos <= len then
    pos = find(s, "[^ \t\r\n]", pos) or (len + 1)
    if pos <= len then fail("trailing characters") end
  end
  s = ""
  if v == null then return nil end
  return v
end

-- The JSON codec is trusted code doing most of an adapter's work. It runs on a
-- helper coroutine created here, in the host's main state, so it carries no
-- count hook (a count hook makes Lua 5.4 trap every instruction: ~1.5x slower).
-- Its cost is charged to the calling job's instruction budget instead, in
-- proportion to the bytes handled, so loops over json calls still run out.
local corunning = coroutine.running
local charge -- charge(cost): defined with the job runner below
-- tripped(): the running job has exhausted its instruction or memory budget (defined below).
local tripped
-- Metatables of the host's lazy objects: only these are trusted to carry `__lazy`/`__sizes`
-- (a script can put those keys on its own metatables; host walks must never run its code).
local lazy_mts = raw_setmetatable({}, {__mode = "k"})
local helper
local function helper_loop(f, a, b, c)
  while true do
    f, a, b, c = coyield(pcall(f, a, b, c))
  end
end
local function unhooked(f, a, b, c)
  local h = helper
  if h == nil or costatus(h) ~= "suspended" then
    if h ~= nil and costatus(h) ~= "dead" then return pcall(f, a, b, c) end -- re-entered: run here
    h = cocreate(helper_loop)
    sethook(h) -- a coroutine inherits its creator's hook
    helper = h
  end
  local _, ok, v = coresume(h, f, a, b, c)
  return ok, v
end

-- json.decode(text [, {raw = {"key", ...}}]): values of the named keys (at any
-- depth) stay JSON text, as json.raw values the encoder copies verbatim.
function json.decode(s, opts)
  if type(s) ~= "string" then error("json.decode: string expected, got " .. type(s), 2) end
  local raw_keys = false
  if opts ~= nil then
    if type(opts) ~= "table" then error("json.decode: options must be a table", 2) end
    local keys = opts.raw
    if keys ~= nil then
      if type(keys) ~= "table" then error("json.decode: option 'raw' must be a list of keys", 2) end
      raw_keys = {}
      for _, key in ipairs(keys) do raw_keys[key] = true end
    end
  end
  charge(32 + #s // 2)
  local ok, v = unhooked(decode_impl, s, host_texts and host_texts[#s] == s, raw_keys)
  if not ok then error(v, 2) end
  return v
end

-- Host entry points: decode ``text`` (``trusted``: the host's own JSON) / encode, unhooked.
local function decode_host(text, trusted)
  charge(32 + #text // 2)
  local ok, v = unhooked(decode_impl, text, trusted)
  if not ok then error(v, 0) end
  return v
end

-- An object some of whose fields stay JSON text until first read (the request's
-- messages and tools): adapters that pass them through never pay for decoding.
-- `sizes` maps a field to the byte sizes of its array elements (packed "<I4"), so
-- json.items can cut the text into elements without scanning it.
local function lazy_object(t, pending, sizes)
  local mt = {__jsontype = "object", __metatable = "json.object", __lazy = pending, __sizes = sizes}
  mt.__index = function(tt, k)
    local text = pending[k]
    if text == nil then return nil end
    pending[k] = nil
    local v = decode_host(text, true)
    rawset(tt, k, v)
    return v
  end
  mt.__pairs = function(tt)
    for k in next, pending do
      if rawget(tt, k) ~= nil then pending[k] = nil else local _ = tt[k] end
    end
    return next, tt, nil
  end
  lazy_mts[mt] = true
  dsetmetatable(t, mt)
  return t
end

-- The undecoded JSON text of a lazy field (nil once it was read or when there is none).
function json.pending(t, key)
  if type(t) ~= "table" then return nil end
  local mt = dgetmetatable(t)
  local pending = mt and rawget(mt, "__lazy")
  if not pending or rawget(t, key) ~= nil then return nil end
  return pending[key]
end

-- json.items(req, key): the JSON texts of the elements of the request's array field
-- `key` ("messages"), exactly as the host wrote them, cut without a scan; nil once the
-- field was read (req.messages) or replaced, or when the host gave no sizes. Keying a
-- cache by these texts lets an adapter convert each message once per conversation;
-- json.decode of one of them is as cheap to re-encode as the request itself.
local unpack_sizes, ITEM_FMT = string.unpack, {}
local function split_impl(text, sizes, known)
  local count = #sizes // 4
  local list = raw_setmetatable({}, array_mt)
  if count == 0 then return text == "[]" and list or false end
  local sz
  if count <= 4096 then
    local fmt = ITEM_FMT[count]
    if not fmt then fmt = "<" .. strrep("I4", count); if count <= 256 then ITEM_FMT[count] = fmt end end
    sz = {unpack_sizes(fmt, sizes)}
  end
  local p = 2
  for i = 1, count do
    local n = sz and sz[i] or unpack_sizes("<I4", sizes, 4 * i - 3)
    local e = p + n
    local piece = sub(text, p, e - 1)
    list[i] = piece
    if known then known[n] = piece end
    p = e + 1
  end
  if p ~= #text + 1 then return false end -- sizes do not match the text: never cut wrongly
  return list
end

function json.items(t, key)
  if type(t) ~= "table" then return nil end
  local mt = dgetmetatable(t)
  local all = mt and rawget(mt, "__sizes")
  local sizes = all and all[key]
  if not sizes or rawget(t, key) ~= nil then return nil end
  local text = rawget(mt, "__lazy")[key]
  if type(text) ~= "string" or type(sizes) ~= "string" then return nil end
  charge(32 + #sizes + #text // 64)
  local ok, list = unhooked(split_impl, text, sizes, host_texts)
  if not ok then error(list, 2) end
  return list or nil
end

local escmap = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
for i = 0, 31 do
  local ch = char(i)
  if not escmap[ch] then escmap[ch] = format("\\u%04x", i) end
end
escmap["\127"] = "\\u007f"

local function is_sequence(v, kind)
  if kind == "array" then return true end
  if kind == "object" then return false end
  local n = rawlen(v)
  if n == 0 then return false end
  local c = 0
  for _ in next, v do c = c + 1 end
  return c == n
end

local function fix_utf8(s)
  if utf8len(s) then return s end
  local out, n, i, len = {}, 0, 1, #s
  while i <= len do
    local ok, nxt = utf8len(s, i)
    if ok then n = n + 1; out[n] = sub(s, i); break end
    -- nxt is the position of the first invalid byte
    n = n + 1; out[n] = sub(s, i, nxt - 1)
    n = n + 1; out[n] = "\239\191\189"
    i = nxt + 1
  end
  return concat(out)
end

local buf, n, seen = {}, 0, {}
-- Splicing: while the host encodes a request body, its own big texts (the request's
-- messages and tools JSON, passed through untouched) are not copied into the output.
-- Their places are noted in `splices` (buffer index, 1 = messages / 2 = tools) and
-- the host, which has those texts already, joins the pieces: a 30 KB history is then
-- neither concatenated in Lua nor converted back to Python.
local host_a, host_b, splices = false, false, false
local SPLICE_MIN = 256
local function spliced(t)
  if splices and type(t) == "string" and #t >= SPLICE_MIN and (t == host_a or t == host_b) then
    n = n + 1; buf[n] = ""
    local k = #splices
    splices[k + 1], splices[k + 2] = n, (t == host_a) and 1 or 2
    return true
  end
  return false
end
local em = NOMEMO -- the memo of the request being encoded (see request_memo)
-- Short strings known to need no escaping (keys, roles, types): a bounded cache.
local plain, nplain = {}, 0
local function quote(v)
  local len = #v
  if len > 24 then
    -- %q escapes exactly the quote, the backslash and control characters (one C pass,
    -- ~5x faster than a pattern scan): when it adds nothing but the quotes, v is plain
    if #format("%q", v) ~= len + 2 then return (gsub(v, '[%c"\\]', escmap)) end
  elseif find(v, '[%c"\\]') then
    return (gsub(v, '[%c"\\]', escmap))
  end
  if len <= 40 then
    if nplain >= 1024 then plain, nplain = {}, 0 end
    plain[v] = true; nplain = nplain + 1
  end
  return v
end

-- An object key as JSON text without its quotes.
local function key_text(k)
  local tk = type(k)
  if tk == "number" then k = tostring(k)
  elseif tk ~= "string" then error("json.encode: cannot use a " .. tk .. " as an object key", 0) end
  if plain[k] or em[k] == true then return k end
  return quote(k)
end

local function number_text(v)
  if mtype(v) == "integer" then return format("%d", v) end
  if v ~= v or v == huge or v == -huge then error("json.encode: cannot encode " .. tostring(v), 0) end
  if v == floor(v) and v > -1e15 and v < 1e15 then return format("%d", v) end
  return format("%.17g", v)
end

-- Strings (the bulk of a request) are written inline by the container loops:
-- a memo hit or a cached plain string costs one table lookup, no scan.
local enc
function enc(v, depth)
    local tv = type(v)
    if tv == "string" then
      local m = em[v]
      if m == nil then
        if not plain[v] then v = quote(v) end
        buf[n + 1] = '"'; buf[n + 2] = v; buf[n + 3] = '"'; n = n + 3
      elseif m == true then
        buf[n + 1] = '"'; buf[n + 2] = v; buf[n + 3] = '"'; n = n + 3
      else
        n = n + 1; buf[n] = m
      end
    elseif tv == "number" then
      n = n + 1; buf[n] = number_text(v)
    elseif tv == "boolean" then
      n = n + 1; buf[n] = v and "true" or "false"
    elseif tv == "table" then
      local mt = dgetmetatable(v)
      local kind, pending
      if mt == object_mt then kind = "object"
      elseif mt == array_mt then kind = "array"
      elseif mt ~= nil then
        kind = rawget(mt, "__jsontype")
        if kind == "null" then n = n + 1; buf[n] = "null"; return end
        if kind == "raw" then
          local t = rawget(v, 1)
          if not spliced(t) then n = n + 1; buf[n] = t end
          return
        end
        if lazy_mts[mt] then pending = rawget(mt, "__lazy") end
      end
      if seen[v] then error("json.encode: cycle in table", 0) end
      if depth > 200 then error("json.encode: nested too deep", 0) end
      seen[v] = true
      depth = depth + 1
      if is_sequence(v, kind) then
        n = n + 1; buf[n] = "["
        for i = 1, rawlen(v) do
          if i > 1 then n = n + 1; buf[n] = "," end
          local x = rawget(v, i)
          if type(x) == "string" then
            local m = em[x]
            if m == nil then
              if not plain[x] then x = quote(x) end
              buf[n + 1] = '"'; buf[n + 2] = x; buf[n + 3] = '"'; n = n + 3
            elseif m == true then
              buf[n + 1] = '"'; buf[n + 2] = x; buf[n + 3] = '"'; n = n + 3
            else
              n = n + 1; buf[n] = m
            end
          elseif x == nil then n = n + 1; buf[n] = "null"
          else enc(x, depth) end
        end
        n = n + 1; buf[n] = "]"
      else
        n = n + 1; buf[n] = "{"
        local first = true
        if pending then
          for k, text in next, pending do
            if rawget(v, k) ~= nil then goto continue end -- replaced by the adapter
            if first then first = false else n = n + 1; buf[n] = "," end
            buf[n + 1] = '"'; buf[n + 2] = k; buf[n + 3] = '":'; n = n + 3
            if not spliced(text) then n = n + 1; buf[n] = text end
            ::continue::
          end
        end
        for k, x in next, v do
          if first then first = false else n = n + 1; buf[n] = "," end
          if not plain[k] then k = key_text(k) end
          if type(x) == "string" then
            local m = em[x]
            if m == nil then
              if not plain[x] then x = quote(x) end
              buf[n + 1] = '"'; buf[n + 2] = k; buf[n + 3] = '":"'; buf[n + 4] = x; buf[n + 5] = '"'; n = n + 5
            elseif m == true then
              buf[n + 1] = '"'; buf[n + 2] = k; buf[n + 3] = '":"'; buf[n + 4] = x; buf[n + 5] = '"'; n = n + 5
            else
              buf[n + 1] = '"'; buf[n + 2] = k; buf[n + 3] = '":'; buf[n + 4] = m; n = n + 4
            end
          else
            buf[n + 1] = '"'; buf[n + 2] = k; buf[n + 3] = '":'; n = n + 3
            enc(x, depth)
          end
        end
        n = n + 1; buf[n] = "}"
      end
      seen[v] = nil
    elseif v == nil then
      n = n + 1; buf[n] = "null"
    else
      error("json.encode: cannot encode a " .. tv, 0)
    end
  end
local seen_dirty = false -- an error left tables in `seen` (a success leaves it empty)
local function encode_impl(root, unchecked)
  n = 0
  if seen_dirty then seen = {} end
  seen_dirty = true
  em = request_memo or NOMEMO
  enc(root, 0)
  seen_dirty = false
  local out
  if splices and #splices > 0 then -- pieces of text and the codes of the host's texts between them
    out = {}
    local from, m = 1, 0
    for k = 1, #splices, 2 do
      local at = splices[k]
      local piece = concat(buf, "", from, at - 1)
      out[m + 1], out[m + 2] = unchecked and piece or fix_utf8(piece), splices[k + 1]
      m, from = m + 2, at + 1
    end
    local piece = concat(buf, "", from, n)
    out[m + 1] = unchecked and piece or fix_utf8(piece)
  else
    out = concat(buf, "", 1, n)
    if not unchecked then out = fix_utf8(out) end
  end
  if n > 4096 then buf = {} end -- slots past n are ignored: a small buffer is reused as is
  return out
end

-- json.encode_each(list): the JSON text of each element, in one call (an adapter that
-- keeps converted messages as text encodes a request's new ones together).
local each_bytes = 0
local function encode_each_impl(list)
  local out, total = {}, 0
  for i = 1, rawlen(list) do
    local text = encode_impl(rawget(list, i))
    out[i] = text
    total = total + #text
  end
  each_bytes = total
  return out
end

function json.encode_each(list)
  if type(list) ~= "table" then error("json.encode_each: table expected, got " .. type(list), 2) end
  local ok, out = unhooked(encode_each_impl, list)
  if not ok then error(out, 2) end
  charge(32 + 8 * #out + each_bytes // 2)
  return raw_setmetatable(out, array_mt)
end

function json.encode(v)
  local ok, s = unhooked(encode_impl, v)
  if not ok then error(s, 2) end
  charge(32 + #s // 2)
  return s
end

-- unchecked: invalid UTF-8 is left in (the host validates the text; Python does it ~10x faster)
-- a, b: the request's messages / tools JSON; where the body holds them unchanged the
-- result is a list {text, code, text, ...} (see `splices`) instead of one string.
local function encode_host(v, unchecked, a, b)
  host_a, host_b, splices = a or false, b or false, (a or b) and {} or false
  local ok, s = unhooked(encode_impl, v, unchecked)
  host_a, host_b, splices = false, false, false
  if not ok then error(s, 0) end
  local size = 0
  if type(s) == "table" then
    for k = 1, #s, 2 do size = size + #s[k] end
  else
    size = #s
  end
  charge(32 + size // 2)
  return s
end

------------------------------------------------------------- sandbox environment
local HTTP = {}  -- unique marker for host-handled yields

local safe_string = copy(string)
local safe_table = copy(table)
local safe_math = copy(math)
local safe_utf8 = copy(utf8)

local function safe_getmetatable(v)
  if type(v) ~= "table" then return nil end
  return raw_getmetatable(v)
end

local function safe_setmetatable(t, mt)
  if type(t) ~= "table" then error("bad argument #1 to 'setmetatable' (table expected, got " .. type(t) .. ")", 2) end
  if mt ~= nil then
    if type(mt) ~= "table" then error("bad argument #2 to 'setmetatable' (nil or table expected)", 2) end
    if rawget(mt, "__gc") ~= nil then error("setmetatable: __gc metamethods are not allowed in the sandbox", 2) end
  end
  return raw_setmetatable(t, mt)
end

local function to_text(...)
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do parts[i] = tostring((select(i, ...))) end
  return concat(parts, "\t")
end

local LEVELS = { debug = true, info = true, warn = true, warning = true, error = true }
local function log(level, ...)
  level = tostring(level)
  if not LEVELS[level] then level = "info" end
  pylog(level, to_text(...))
end

local function print_(...)
  pylog("info", to_text(...))
end

local function http_call(method, url, body, headers)
  if type(url) ~= "string" then error("http_" .. method:lower() .. ": url must be a string", 3) end
  if body ~= nil and type(body) ~= "string" then
    if type(body) == "table" then body = json.encode(body) else error("http_post: body must be a string or table", 3) end
  end
  local hdrs = {}
  if headers ~= nil then
    if type(headers) ~= "table" then error("http: headers must be a table", 3) end
    for k, v in pairs(headers) do hdrs[tostring(k)] = tostring(v) end
  end
  return coyield(HTTP, method, url, body, encode_impl(json.object(hdrs)))
end

local function http_get(url, headers) return http_call("GET", url, nil, headers) end
local function http_post(url, body, headers) return http_call("POST", url, body, headers) end

local new_env

-- xpcall's message handler runs where the error was raised. When that is the count
-- hook (the budget ran out), Lua runs it with hooks disabled, so a looping handler
-- would never be stopped. Once the job's budget is exhausted the handler is skipped:
-- the error goes straight back to xpcall's caller, where the next hook call errors again.
local function safe_xpcall(f, msgh, ...)
  if type(msgh) ~= "function" then
    error("bad argument #2 to 'xpcall' (function expected, got " .. type(msgh) .. ")", 2)
  end
  return xpcall(f, function(e)
    if tripped() then return e end
    return msgh(e)
  end, ...)
end

local function safe_load(chunk, chunkname, mode, env)
  if type(chunk) ~= "string" then return nil, "load: only source strings are accepted in the sandbox" end
  if byte(chunk, 1) == 27 then return nil, "load: binary chunks are not allowed" end
  if env == nil then env = new_env() end
  if type(env) ~= "table" then return nil, "load: env must be a table" end
  return raw_load(chunk, "=" .. tostring(chunkname or "load"), "t", env)
end

function new_env()
  local env = {
    assert = assert, error = error, ipairs = ipairs, next = next, pairs = pairs, pcall = pcall,
    xpcall = safe_xpcall, select = select, tonumber = tonumber, tostring = tostring, type = type,
    rawequal = rawequal, rawget = rawget, rawlen = rawlen, rawset = rawset, unpack = unpack,
    getmetatable = safe_getmetatable, setmetatable = safe_setmetatable, load = safe_load,
    string = safe_string, table = safe_table, math = safe_math, utf8 = safe_utf8,
    json = json, log = log, print = print_, http_get = http_get, http_post = http_post,
    _VERSION = _VERSION,
  }
  env._G = env
  return env
end

---------------------------------------------------------------------- running
-- Calls run on reusable worker coroutines: a worker runs one job, yields DONE
-- with its results and waits for the next job. The count hook (set per job)
-- enforces the instruction budget and a soft memory limit.
local pending, next_id = {}, 0
local idle, nidle = {}, 0
local DONE = {}
local MAX_IDLE = 8
local stash = {}

local function where(co)
  for level = 0, 50 do
    local info = getinfo(co, level, "Sln")
    if not info then break end
    if info.what ~= "C" and info.currentline and info.currentline > 0 and sub(info.source, 1, 11) ~= "=homeagent/" then
      local fn = info.name and (" in function '" .. info.name .. "'") or ""
      return info.short_src .. ":" .. info.currentline, fn
    end
  end
  return "", ""
end

local error_text -- error_text(err): a script's error object as text, under a budget (below)

local function classify(w, err)
  local co = w.co
  local kind = "runtime"
  local msg
  if w.exceeded then
    kind = "budget"
    msg = "instruction budget exceeded (" .. w.budget .. " instructions)"
  elseif w.oom then
    kind = "memory"
    msg = "not enough memory (memory limit of the Lua state)"
  elseif type(err) == "string" then
    msg = err
    if find(err, "not enough memory", 1, true) then kind = "memory"
    elseif find(err, "json.decode: ", 1, true) then kind = "json" end
  else
    local mt = dgetmetatable(err)
    -- classify runs on the host's main state: a script's __tostring runs on a worker of its own
    if type(err) == "table" and mt and rawget(mt, "__tostring") then msg = error_text(err) end
    if msg == nil then msg = "error object is a " .. type(err) .. " value" end
  end
  local loc, fn = where(co)
  local tb = traceback(co, nil, 0) or ""
  if kind == "memory" then gc("collect") end
  return "error", kind, msg, loc, fn, tb
end

local function job_loop(fn, ...)
  return job_loop(coyield(DONE, fn(...)))
end

local by_co = raw_setmetatable({}, {__mode = "k"}) -- worker coroutine -> its worker

-- Once a job is over budget its hook fires on every instruction and errors each time:
-- pcall can catch one error, but the next instruction after it raises again.
local function again() error("instruction budget exceeded", 2) end
local function again_memory() error("not enough memory", 2) end

function tripped()
  local w = by_co[corunning()]
  return w ~= nil and (w.exceeded or w.oom)
end

function charge(cost)
  local w = by_co[corunning()]
  if w == nil then return end -- the host itself (no budget)
  local used = w.used + cost
  w.used = used
  if used >= w.budget then
    w.exceeded = true
    sethook(w.co, again, "", 1)
    error("instruction budget exceeded", 3)
  end
end

local function new_worker()
  local w = {co = cocreate(job_loop), used = 0, budget = 0, step = 0, soft = 0, exceeded = false, oom = false}
  local co = w.co
  by_co[co] = w
  w.hook = function()
    local used = w.used + w.step
    w.used = used
    if used >= w.budget then
      w.exceeded = true
      sethook(co, again, "", 1)
      error("instruction budget exceeded", 2)
    end
    if w.soft > 0 and gc("count") > w.soft then
      gc("collect")
      if gc("count") > w.soft then
        w.oom = true -- terminal like the instruction budget (see `again`)
        sethook(co, again_memory, "", 1)
        error("not enough memory", 2)
      end
    end
  end
  return w
end

-- A script's error object with a __tostring metamethod, converted on a fresh worker
-- under a small budget of its own (nil when that fails or does not finish).
local ERROR_TEXT_BUDGET = 100000
function error_text(err)
  local w = new_worker()
  w.used, w.budget, w.step, w.soft, w.exceeded, w.oom = 0, ERROR_TEXT_BUDGET, 1000, 0, false, false
  sethook(w.co, w.hook, "", w.step)
  local ok, tag, text = coresume(w.co, tostring, err)
  by_co[w.co] = nil
  if ok and tag == DONE and type(text) == "string" then return text end
  return nil
end

-- Results go back inline when they are all scalars; otherwise they are parked
-- in `stash` and fetched by the host after it restored its memory headroom.
local function finish(id, ...)
  local n = select("#", ...)
  for i = 1, n do
    local tv = type((select(i, ...)))
    if tv == "table" or tv == "function" or tv == "userdata" or tv == "thread" then
      stash[-id] = table.pack(...)
      return "box", -id
    end
  end
  return "ok", n, ...
end

local function settle(id, w, ok, tag, ...)
  if ok then
    if tag == DONE then
      if nidle < MAX_IDLE then nidle = nidle + 1; idle[nidle] = w end
      if w.scalars then return "ok", select("#", ...), ... end
      return finish(id, ...)
    elseif tag == HTTP then
      pending[id] = w
      return "yield", id, ...
    end
    return "error", "runtime", "coroutine.yield is not available in the sandbox", "", "", ""
  end
  return classify(w, tag)
end

local function start(budget, soft_kb, scalars, fn, ...)
  local w
  if nidle > 0 then
    w = idle[nidle]; idle[nidle] = nil; nidle = nidle - 1
  else
    w = new_worker()
  end
  local step = budget < 100000 and budget or 100000
  w.used, w.budget, w.step, w.soft, w.exceeded, w.oom, w.scalars = 0, budget, step, soft_kb, false, false, scalars
  sethook(w.co, w.hook, "", step)
  next_id = next_id + 1
  return settle(next_id, w, coresume(w.co, fn, ...))
end

local function resume(id, ...)
  local w = pending[id]
  if not w then return "error", "runtime", "internal: unknown coroutine", "", "", "" end
  pending[id] = nil
  return settle(id, w, coresume(w.co, ...))
end

local function abandon(id)
  pending[id] = nil
end

local function compile(src, chunkname, env)
  local fn, err = raw_load(src, chunkname, "t", env)
  if not fn then return nil, err end
  return fn
end

-- Flatten a value for the host in one crossing: a type string plus the values.
local function flatten(root)
  local types, vals, nt, nv = {}, {}, 0, 0
  local seen = {}
  local function walk(v, depth)
    if type(v) == "table" then
      local kind = jsontype(v)
      if kind == "null" then nt = nt + 1; types[nt] = "z"; return end
      -- flatten runs on the host's main state (no hook): it must never call a script's
      -- metamethods, so only the host's own lazy objects are read through __index.
      if kind == "raw" then
        local text = rawget(v, 1)
        if type(text) ~= "string" then error("json.raw value without text", 0) end
        return walk(decode_host(text), depth)
      end
      local lmt = dgetmetatable(v)
      if lmt and lazy_mts[lmt] then for k in next, rawget(lmt, "__lazy") do local _ = v[k] end end
      if seen[v] then error("cannot convert a table that contains itself", 0) end
      if depth > 200 then error("table nested too deep", 0) end
      seen[v] = true
      if is_sequence(v, kind) then
        nt = nt + 1; types[nt] = "["
        for i = 1, rawlen(v) do walk(rawget(v, i), depth + 1) end
        nt = nt + 1; types[nt] = "]"
      else
        nt = nt + 1; types[nt] = "{"
        for k, x in next, v do
          nv = nv + 1; vals[nv] = k
          walk(x, depth + 1)
        end
        nt = nt + 1; types[nt] = "}"
      end
      seen[v] = nil
    else
      if type(v) == "string" then v = fix_utf8(v) end
      nt = nt + 1; types[nt] = "v"; nv = nv + 1; vals[nv] = v
    end
  end
  walk(root, 0)
  if nv > 4000 then return concat(types), vals, nv end
  return concat(types), false, nv, unpack(vals, 1, nv)
end

local function describe(f)
  local info = getinfo(f, "S")
  if not info then return "?" end
  return info.short_src .. ":" .. info.linedefined
end

local function memory_kb() return gc("count") end
local function collect() gc("collect") end

local function take(id)
  local box = stash[id]
  if not box then return 0 end
  stash[id] = nil
  return box.n, unpack(box, 1, box.n)
end

return {
  json = json, new_env = new_env, compile = compile, start = start, resume = resume, abandon = abandon,
  flatten = flatten, lazy_object = lazy_object, memory_kb = memory_kb, collect = collect, fix_utf8 = fix_utf8, stash = stash, take = take,
  encode = encode_host, decode = decode_host, where = where, null = null, describe = describe,
  memo_begin = function() request_memo = {}; host_texts = {} end,
  memo_end = function() request_memo = false; host_texts = false end,
  is_array = function(t) return jsontype(t) == "array" end,
}
