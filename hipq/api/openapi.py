"""``/openapi.json``: built from the route table and the same pydantic models the
handlers validate and answer with (JSON Schema 2020-12, OpenAPI 3.1)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from hipq.api.models import ErrorOut
from hipq.api.routes import Route
from hipq.config import QUEUE_ID_PATTERN
from hipq.jobs import JOB_ID_PATTERN

REF = "#/components/schemas/{model}"
_PATH_PARAM = re.compile(r"\{([A-Za-z_]+)\}")
_PARAM_SCHEMAS: dict[str, dict[str, Any]] = {
    "queue": {"type": "string", "pattern": QUEUE_ID_PATTERN},
    "id": {"type": "string", "pattern": JOB_ID_PATTERN},
    "key": {"type": "string", "minLength": 1, "maxLength": 500},
    "tail": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[^/]+$"},
}
_DESCRIPTIONS = {200: "OK", 201: "Created", 202: "Accepted", 400: "Malformed request",
                 401: "Missing or bad token or signature", 403: "Role too low",
                 404: "Not found", 409: "Conflict", 413: "Body too large",
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


def _query_params(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema()
    return [{"name": name, "in": "query", "required": name in schema.get("required", []),
             "schema": prop} for name, prop in schema["properties"].items()]


def _error_statuses(route: Route) -> list[int]:
    statuses = [503]
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
        keys, top = models_json_schema(_models(routes), ref_template=REF)
        self.refs = keys
        self.components: dict[str, Any] = top.get("$defs", {})

    def ref(self, model: type[BaseModel], mode: Literal["validation", "serialization"]
            ) -> dict[str, Any]:
        return self.refs[(model, mode)]

    def content(self, answer: type[BaseModel] | str) -> dict[str, Any]:
        if isinstance(answer, str):
            return {answer: {"schema": {"type": "string"}}}
        return {"application/json": {"schema": self.ref(answer, "serialization")}}

    def operation(self, route: Route) -> dict[str, Any]:
        op: dict[str, Any] = {
            "operationId": f"{route.method.lower()}_{_slug(route.path)}",
            "summary": route.summary, "tags": list(route.tags),
            "security": [] if route.role is None else [{"bearer": []}],
            "parameters": [{"name": n, "in": "path", "required": True,
                            "schema": _PARAM_SCHEMAS[n]} for n in _PATH_PARAM.findall(route.path)],
            "responses": {},
        }
        if route.query is not None:
            op["parameters"] += _query_params(route.query)
        if route.body is not None:
            op["requestBody"] = {"required": route.body_required, "content": {
                "application/json": {"schema": self.ref(route.body, "validation")}}}
        for status, answer in sorted(route.answers.items()):
            op["responses"][str(status)] = {"description": _DESCRIPTIONS.get(status, "OK"),
                                            "content": self.content(answer)}
        for status in _error_statuses(route):
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


def _slug(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", path.lower()).strip("_") or "root"


def build_openapi(routes: Sequence[Route], *, title: str = "hipq",
                  version: str = "1") -> dict[str, Any]:
    return _Builder(routes).document(title=title, version=version)
