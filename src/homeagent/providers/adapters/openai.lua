-- OpenAI chat completions (https://api.openai.com/v1) and any server that speaks the same format.
local compat = openai_compat

-- o-series and gpt-5 models take max_completion_tokens and reject a custom temperature.
local function reasoning_model(model)
  model = tostring(model or "")
  return model:match("^o%d") ~= nil or model:match("^gpt%-5") ~= nil
end

return {
  name = "openai",
  version = "1.0",
  endpoint = "/chat/completions",

  headers = function(api_key)
    return compat.bearer(api_key)
  end,

  transform_request = function(req)
    local special = reasoning_model(req.model)
    local body = compat.request(req, {
      stream_usage = true,
      max_tokens_field = special and "max_completion_tokens" or "max_tokens",
    })
    if special then body.temperature = nil end
    return body
  end,

  transform_response = function(raw)
    return compat.response(raw)
  end,

  transform_stream_chunk = function(line)
    return compat.chunk(line)
  end,
}
