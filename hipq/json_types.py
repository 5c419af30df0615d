"""Request bodies checked against the JSON Schema that ``/openapi.json`` publishes
for them, before pydantic validates them: by the API (:mod:`hipq.api.io`) and by the
ingest of rows enqueued from SQL (:mod:`hipq.intake_rows`), which hold to the same
types.

Pydantic's lax mode converts values the document forbids: ``0`` or ``"no"`` to a
boolean, ``"5"`` to an integer, a number to a time. The document is the contract
(docs/http-api.md), so a value whose JSON type (or ``const``/``enum``) is not one the
schema allows is refused with 422 here, as a strict client of the document would
expect; pydantic then checks everything else (bounds, patterns, cross-field rules).

:class:`ApiJsonSchema` is the generator of both the document and these checks: it
also writes what the models check in Python code and a JSON Schema can say (the
time zones known here, the settings that need one another).
"""

from __future__ import annotations

import zoneinfo
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from hipq.config import Backoff, QueueConfig, RetryConfig, known_timezone

TIMEZONES = sorted(zoneinfo.available_timezones())
TIMEZONE_SCHEMA: dict[str, Any] = {"type": "string", "enum": TIMEZONES,
                                   "description": "an IANA time zone known to the daemon"}
_TIMEZONE_CHECKS = {known_timezone, QueueConfig._known_timezone.__func__}  # type: ignore[attr-defined]


def _needs_concurrency(field: str) -> dict[str, Any]:
    return {"if": {"required": [field], "properties": {field: {"type": "object"}}},
            "then": {"required": ["concurrency"],
                     "properties": {"concurrency": {"type": "integer"}}}}


# rules the models' validators check across fields, as JSON Schema (the rest, such as
# "adaptive min <= concurrency", is said in the descriptions and checked with 422)
_CROSS_FIELD: dict[type[BaseModel], list[dict[str, Any]]] = {
    QueueConfig: [_needs_concurrency("adaptive"), _needs_concurrency("quotas")],
    Backoff: [{"if": {"required": ["scope"], "properties": {"scope": {"const": "group"}}},
               "then": {"required": ["field"], "properties": {"field": {"type": "string"}}},
               "else": {"properties": {"field": {"type": "null"}}}}],
    RetryConfig: [{"not": {"required": ["strategy", "plugin"], "properties": {
        "strategy": {"type": "string", "minLength": 1}, "plugin": {"type": "string"}}}}],
}


class ApiJsonSchema(GenerateJsonSchema):
    """Pydantic's JSON Schema, plus the time zones and the cross-field rules."""

    def function_after_schema(self, schema: core_schema.AfterValidatorFunctionSchema
                              ) -> JsonSchemaValue:
        function = schema["function"]["function"]
        if getattr(function, "__func__", function) in _TIMEZONE_CHECKS:
            return dict(TIMEZONE_SCHEMA)
        return super().function_after_schema(schema)

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        value = super().model_schema(schema)
        rules = _CROSS_FIELD.get(schema["cls"])
        if rules and self.mode == "validation":
            value = {**value, "allOf": [*value.get("allOf", []), *rules]}
        return value


_JSON_TYPES: dict[type, str] = {bool: "boolean", str: "string", dict: "object",
                                list: "array", type(None): "null"}


def _json_type_ok(value: Any, allowed: str | list[str]) -> bool:
    names = [allowed] if isinstance(allowed, str) else allowed
    kind = type(value)
    if kind in _JSON_TYPES:
        return _JSON_TYPES[kind] in names
    if kind is int:
        return "integer" in names or "number" in names
    if kind is float:
        return "number" in names or ("integer" in names and value.is_integer())
    return False


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``1`` is not ``true``."""
    return a == b and (type(a) is bool) == (type(b) is bool)


Problem = tuple[list[str | int], str]


class _Checker:
    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs

    def problem(self, value: Any, schema: Any, loc: list[str | int]) -> Problem | None:
        if not isinstance(schema, dict):
            return None if schema is not False else (loc, "no value is allowed here")
        if "$ref" in schema:
            return self.problem(value, self.defs[schema["$ref"].rsplit("/", 1)[1]], loc)
        branch = self._discriminated(value, schema)
        if branch is not None:
            return self.problem(value, branch, loc)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                found = [self.problem(value, branch, loc) for branch in schema[key]]
                if all(found):
                    return max(found, key=lambda p: len(p[0]) if p else -1)
        for branch in schema.get("allOf", []):
            if found := self.problem(value, branch, loc):  # type: ignore[assignment]
                return found
        return self._own(value, schema, loc)

    @staticmethod
    def _discriminated(value: Any, schema: dict[str, Any]) -> Any:
        """The one branch of a tagged union that ``value``'s tag names, if any."""
        tag = schema.get("discriminator", {})
        name = tag.get("propertyName")
        if name is None or not isinstance(value, dict) or not isinstance(value.get(name), str):
            return None
        ref = tag.get("mapping", {}).get(value[name])
        return None if not isinstance(ref, str) else {"$ref": ref}

    def _own(self, value: Any, schema: dict[str, Any], loc: list[str | int]
             ) -> Problem | None:
        if "type" in schema and not _json_type_ok(value, schema["type"]):
            return loc, f"Input should be of JSON type {schema['type']}"
        if "const" in schema and not _same(value, schema["const"]):
            return loc, f"Input should be {schema['const']!r}"
        if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
            return loc, "Input should be one of the values the schema lists"
        if isinstance(value, dict):
            return self._object(value, schema, loc)
        if isinstance(value, list) and "items" in schema:
            for i, item in enumerate(value):
                if found := self.problem(item, schema["items"], [*loc, i]):
                    return found
        return None

    def _object(self, value: dict[str, Any], schema: dict[str, Any], loc: list[str | int]
                ) -> Problem | None:
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            found = self.problem(item, properties.get(key, extra), [*loc, key])
            if found:
                return found
        return None


@cache
def _model_checker(model: type[BaseModel]) -> tuple[_Checker, dict[str, Any]]:
    schema = model.model_json_schema(mode="validation", schema_generator=ApiJsonSchema)
    return _Checker(schema.pop("$defs", {})), schema


# the Python types a JSON parser gives for a JSON type; int is not "number" here and
# no float is an "integer": those go the whole way (a float may be an integer value)
_PLAIN_TYPES: dict[str, type] = {"string": str, "integer": int, "boolean": bool,
                                 "null": type(None)}


_ANY_JSON: frozenset[type] = frozenset({dict, list, str, int, float, bool, type(None)})
# what a schema may say and still accept any JSON value (a free ``result``, ``data``)
_ANNOTATIONS = frozenset({"title", "description", "default", "examples"})


def _plain_types(schema: Any) -> frozenset[type] | None:
    """The Python types that satisfy ``schema`` by their JSON type alone (a type, or
    an ``anyOf`` of such, without ``const``/``enum``; an object only when anything
    may be in it; any JSON value when the schema only annotates), or None when more
    than the type is checked."""
    if isinstance(schema, dict) and schema and set(schema) <= _ANNOTATIONS:
        return _ANY_JSON
    if not isinstance(schema, dict) or "const" in schema or "enum" in schema:
        return None
    if "anyOf" in schema:
        parts = [_plain_types(branch) for branch in schema["anyOf"]]
        if any(part is None for part in parts):
            return None
        return frozenset().union(*parts)  # type: ignore[arg-type]
    kind = schema.get("type")
    if kind == "object" and "properties" not in schema and schema.get(
            "additionalProperties", True) is True and not schema.get("allOf"):
        return frozenset({dict})
    items = schema.get("items", {})
    if kind == "array" and (items == {} or _plain_types(items) == _ANY_JSON) and not {
            "prefixItems", "contains", "$ref", "allOf"} & set(schema):
        # items of any JSON value (a batch's envelope: each item is checked on its
        # own later); the array's size is the model's to check
        return frozenset({list})
    if isinstance(kind, str) and kind in _PLAIN_TYPES and not {"$ref", "allOf"} & set(schema):
        return frozenset({_PLAIN_TYPES[kind]})
    return None


@cache
def _plain_properties(model: type[BaseModel]) -> dict[str, frozenset[type]]:
    """Each property of ``model`` that :func:`_plain_types` can judge, with its types
    (empty when the model has rules across its properties)."""
    _, schema = _model_checker(model)
    if schema.get("allOf") or schema.get("anyOf"):
        return {}
    plain = {name: _plain_types(sub) for name, sub in schema.get("properties", {}).items()}
    return {name: types for name, types in plain.items() if types is not None}


@cache
def _enum_properties(model: type[BaseModel]) -> dict[str, frozenset[str]]:
    """Each property of ``model`` whose schema is a string from a list and no more
    (a response's ``status``), with the strings (empty when the model has rules
    across its properties)."""
    _, schema = _model_checker(model)
    if schema.get("allOf") or schema.get("anyOf"):
        return {}
    return {name: frozenset(sub["enum"])
            for name, sub in schema.get("properties", {}).items()
            if isinstance(sub, dict) and set(sub) <= {"type", "enum", *_ANNOTATIONS}
            and sub.get("type") == "string" and isinstance(sub.get("enum"), list)
            and all(type(v) is str for v in sub["enum"])}


def type_problem(value: Any, model: type[BaseModel]) -> Problem | None:
    """Where ``value`` (parsed JSON) breaks the JSON types of ``model``'s published
    schema, and how; None if it does not. A body whose every property is one whose
    schema says no more than its JSON type (an enqueue of ``id`` and ``data``, the
    usual one), or a string from a list (a response's ``status``), is judged by its
    values' types alone (and those strings)."""
    if type(value) is dict:
        plain, enums = _plain_properties(model), _enum_properties(model)
        for key, item in value.items():
            types = plain.get(key)
            if types is None:
                allowed = enums.get(key)
                if allowed is None or type(item) is not str or item not in allowed:
                    break
            elif type(item) not in types:
                break
        else:
            return None
    checker, schema = _model_checker(model)
    return checker.problem(value, schema, [])
