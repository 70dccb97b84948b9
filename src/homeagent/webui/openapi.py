"""The OpenAPI 3.1 document, built from the same :class:`Op` list the router is built from."""

from __future__ import annotations

import re
from typing import Any

from homeagent import __version__
from homeagent.webui.common import Op

_PARAM = re.compile(r"{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?}")

ERROR = {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}
OPENAI_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"message": {"type": "string"}, "type": {"type": "string"}, "param": {}, "code": {}},
            "required": ["message", "type"],
        }
    },
    "required": ["error"],
}
"""What the OpenAI-compatible routes (``/v1/...``) answer on an error: OpenAI's own error object, so its clients
read it."""


def openapi_path(path: str) -> str:
    """Starlette's ``{name:path}`` becomes OpenAPI's ``{name}``."""
    return _PARAM.sub(lambda m: "{" + m.group(1) + "}", path)


def build_openapi(ops: list[Op]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in ops:
        path = openapi_path(op.path)
        params: list[dict[str, Any]] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in _PARAM.findall(op.path)
        ]
        params += [{"name": name, "in": "query", "required": False, "schema": {"type": "string"}} for name in op.query]
        error = OPENAI_ERROR if op.path.startswith("/v1/") else ERROR
        operation: dict[str, Any] = {
            "summary": op.summary,
            "tags": [op.tag],
            "operationId": f"{op.method.lower()}_{re.sub(r'[^a-zA-Z0-9]+', '_', path).strip('_')}",
            "responses": {
                "200": (
                    {"description": "a stream of server-sent events", "content": {"text/event-stream": {}}}
                    if op.stream
                    else {"description": "success", "content": {"application/json": {"schema": {"type": op.returns}}}}
                ),
                "400": {"description": "bad input", "content": {"application/json": {"schema": error}}},
                "401": {"description": "not signed in", "content": {"application/json": {"schema": error}}},
            },
        }
        if op.path in ("/api/v1/login",):
            operation["security"] = []
        if params:
            operation["parameters"] = params
        content: dict[str, Any] = {}
        if op.body is not None:
            content["application/json"] = {"schema": op.body}
        if op.form is not None:
            content["multipart/form-data"] = {"schema": op.form}
        if content:
            operation["requestBody"] = {"required": True, "content": content}
        paths.setdefault(path, {})[op.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "HomeAgent API",
            "version": __version__,
            "description": "The HTTP API of a HomeAgent daemon. Authenticate with `Authorization: Bearer <token>` "
            "or `X-API-Key: <token>`; browsers use the session cookie plus `X-CSRF-Token` on writes.",
        },
        "servers": [{"url": "/"}],
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "session": {"type": "apiKey", "in": "cookie", "name": "homeagent_session"},
            }
        },
        "security": [{"bearer": []}, {"apiKey": []}, {"session": []}],
        "paths": dict(sorted(paths.items())),
    }
