"""``/openapi.json``: built from the route table and the same pydantic models the
handlers validate and answer with (JSON Schema 2020-12, OpenAPI 3.1)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from hipq.api.models import MAX_BATCH, BatchRequest, ErrorOut
from hipq.api.routes import Route
from hipq.bodies import NO_NUL
from hipq.config import QUEUE_ID_PATTERN
from hipq.jobs import JOB_ID_PATTERN
from hipq.json_types import TIMEZONE_SCHEMA, ApiJsonSchema

REF = "#/components/schemas/{model}"
_PATH_PARAM = re.compile(r"\{([A-Za-z_]+)\}")
_PARAM_SCHEMAS: dict[str, dict[str, Any]] = {
    "queue": {"type": "string", "pattern": QUEUE_ID_PATTERN},
    "partner": {"type": "string", "pattern": QUEUE_ID_PATTERN},
    "id": {"type": "string", "pattern": JOB_ID_PATTERN},
    "key": {"type": "string", "minLength": 1, "maxLength": 500},
    "tail": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^/]+$"},
}
_DESCRIPTIONS = {200: "OK", 201: "Created", 202: "Accepted", 400: "Malformed request",
                 401: "Missing or bad token or signature", 403: "Role too low",
                 404: "Not found", 405: "Method not allowed on this path (see Allow)",
                 409: "Conflict", 413: "Body too large",
                 415: "Not JSON: a content type a web page may send (text/plain, a form)",
                 422: "Invalid request", 503: "Database unavailable"}


def _models(routes: Sequence[Route]) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    found: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {(ErrorOut, "serialization"): None}
    for route in routes:
        if route.body is not None:
            found[(route.body, "validation")] = None
        for answer in route.answers.values():
            if not isinstance(answer, str):
                found[(answer, "serialization")] = None
    return list(found)


# NO_NUL on query text: a NUL character is refused there too (io.read_query)


def _no_nul(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with :data:`NO_NUL` on its free strings (no pattern, enum or const)."""
    if schema.get("type") == "string" and not {"pattern", "enum", "const"} & schema.keys():
        return {**schema, "pattern": NO_NUL}
    if "anyOf" in schema:
        return {**schema, "anyOf": [_no_nul(s) for s in schema["anyOf"]]}
    return schema


def _query_params(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema()
    return [{"name": name, "in": "query", "required": name in schema.get("required", []),
             "schema": _no_nul(prop)} for name, prop in schema["properties"].items()]


def _error_statuses(route: Route) -> list[int]:
    statuses = [400, 503]  # 400: any request aiohttp cannot parse (a line over 8 KiB)
    if route.role is not None or route.signed:
        statuses.append(401)
    if route.role is not None:
        statuses.append(403)
    if route.body is not None:
        statuses += [400, 413, 422]
    if route.method != "GET":
        statuses.append(415)
    if route.query is not None or "{" in route.path:
        statuses += [400, 422]
    if "{queue}" in route.path or "{id}" in route.path:
        statuses += [404, 409]
    if route.signed or route.path.endswith("{id}") or "replay" in route.path:
        statuses.append(409)
    return sorted(set(statuses))


class _Builder:
    def __init__(self, routes: Sequence[Route]) -> None:
        self.routes = routes
        keys, top = models_json_schema(_models(routes), ref_template=REF,
                                       schema_generator=ApiJsonSchema)
        self.refs = keys
        self.components: dict[str, Any] = _shared_timezones(top.get("$defs", {}))
        self.shadowing = _shadowing([r.path for r in routes if r.documented])

    def ref(self, model: type[BaseModel], mode: Literal["validation", "serialization"]
            ) -> dict[str, Any]:
        return self.refs[(model, mode)]

    def body(self, model: type[BaseModel]) -> dict[str, Any]:
        if model is BatchRequest:  # an item that is not valid is answered "invalid"
            return _batch_body(self.ref(model, "validation"))
        return self.ref(model, "validation")

    def path_param(self, path: str, name: str) -> dict[str, Any]:
        schema = _PARAM_SCHEMAS[name]
        taken = self.shadowing.get((path, name))
        if taken:  # a concrete path wins (OpenAPI): /v1/jobs/{queue}/pause is no job
            schema = {**schema, "description": f"{', '.join(sorted(taken))}: see their "
                      "own paths (any other method there: 405)"}
        return {"name": name, "in": "path", "required": True, "schema": schema}

    def content(self, answer: type[BaseModel] | str) -> dict[str, Any]:
        if isinstance(answer, str):
            return {answer: {"schema": {"type": "string"}}}
        return {"application/json": {"schema": self.ref(answer, "serialization")}}

    def operation(self, route: Route) -> dict[str, Any]:
        op: dict[str, Any] = {
            "operationId": f"{route.method.lower()}_{_slug(route.path)}",
            "summary": route.summary, "tags": list(route.tags),
            "security": [] if route.role is None else [{"bearer": []}],
            "parameters": [self.path_param(route.path, n)
                           for n in _PATH_PARAM.findall(route.path)],
            "responses": {},
        }
        if route.query is not None:
            op["parameters"] += _query_params(route.query)
        if route.body is not None:
            op["requestBody"] = {"required": route.body_required, "content": {
                "application/json": {"schema": self.body(route.body)}}}
        for status, answer in sorted(route.answers.items()):
            op["responses"][str(status)] = {"description": _DESCRIPTIONS.get(status, "OK"),
                                            "content": self.content(answer)}
        statuses = _error_statuses(route)
        if any((route.path, n) in self.shadowing for n in _PATH_PARAM.findall(route.path)):
            statuses.append(405)  # a value that is another path's word: that path's methods
        for status in statuses:
            op["responses"].setdefault(str(status), {
                "description": _DESCRIPTIONS[status], "content": self.content(ErrorOut)})
        return op

    def document(self, *, title: str, version: str) -> dict[str, Any]:
        paths: dict[str, dict[str, Any]] = {}
        for route in self.routes:
            if route.documented:
                paths.setdefault(route.path, {})[route.method.lower()] = self.operation(route)
        return {
            "openapi": "3.1.0",
            "info": {"title": title, "version": version,
                     "description": "hipq's HTTP API. Errors are "
                                    '{"error": {"code", "message", "details"}}.'},
            "paths": paths,
            "components": {"schemas": self.components, "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"}}},
        }


def _batch_body(ref: dict[str, Any]) -> dict[str, Any]:
    """A batch's body: an envelope of up to 10,000 items, each a ``BatchItem`` or
    anything else, which is then answered ``invalid`` (the others are stored)."""
    return {"type": "object", "additionalProperties": False, "required": ["jobs"],
            "properties": {"jobs": {"type": "array", "maxItems": MAX_BATCH, "items": {
                "anyOf": [{"$ref": REF.format(model="BatchItem")}, {}],
                "description": "a job (BatchItem); an item that is not one is answered "
                               "'invalid' and the others are stored"}}},
            "description": "up to 10,000 jobs, each checked on its own"}


def _shadowing(paths: Sequence[str]) -> dict[tuple[str, str], set[str]]:
    """(templated path, parameter) -> the literal segments of other paths that win
    over that parameter (``/v1/jobs/{queue}/pause`` over ``{id}`` in
    ``/v1/jobs/{queue}/{id}``)."""
    found: dict[tuple[str, str], set[str]] = {}
    split = [(p, p.split("/")) for p in paths]
    for path, parts in split:
        for other, other_parts in split:
            if len(other_parts) != len(parts) or other == path:
                continue
            diff = [i for i, (a, b) in enumerate(zip(parts, other_parts, strict=True))
                    if a != b]
            if len(diff) == 1 and (m := _PATH_PARAM.fullmatch(parts[diff[0]])) \
                    and "{" not in other_parts[diff[0]]:
                found.setdefault((path, m.group(1)), set()).add(other_parts[diff[0]])
    return found


def _shared_timezones(components: dict[str, Any]) -> dict[str, Any]:
    """Every time zone list replaced by one ``Timezone`` component."""
    def swap(node: Any) -> Any:
        if isinstance(node, dict) and node.get("enum") == TIMEZONE_SCHEMA["enum"]:
            rest = {k: v for k, v in node.items() if k not in TIMEZONE_SCHEMA}
            return {"$ref": REF.format(model="Timezone"), **rest}
        if isinstance(node, dict):
            return {k: swap(v) for k, v in node.items()}
        if isinstance(node, list):
            return [swap(v) for v in node]
        return node

    return {**swap(components), "Timezone": TIMEZONE_SCHEMA}


def _slug(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", path.lower()).strip("_") or "root"


def build_openapi(routes: Sequence[Route], *, title: str = "hipq",
                  version: str = "1") -> dict[str, Any]:
    return _Builder(routes).document(title=title, version=version)
