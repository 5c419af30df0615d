"""The building blocks of the configuration's models (:mod:`hipq.config`): strict,
frozen models and patterns checked by Python's ``re``."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

QUEUE_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,100}$"
MAX_SECONDS = 10 * 365 * 86400.0  # durations beyond this would overflow a timestamp
DATA_PATH = r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"  # a dotted path into a job's data


class Matching:
    """``Annotated[str, Matching(P)]``: as ``Field(pattern=P)`` (the same JSON
    schema, the same ``string_pattern_mismatch`` error), checked by Python's
    ``re.fullmatch`` instead of a Rust regex. pydantic compiles one Rust regex, about
    20 KB, in every validator a ``pattern=`` field ends up in: the configuration's
    dozen patterns cost half a MB of a daemon's RSS (docs/benchmarks.md, "Idle
    memory") for values checked at startup and when a queue is created. The request
    bodies, checked per job, keep ``pattern=``."""

    __slots__ = ("_regex", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._regex = re.compile(pattern)

    def _check(self, value: str) -> str:
        if self._regex.fullmatch(value) is None:
            raise PydanticCustomError("string_pattern_mismatch",
                                      "String should match pattern '{pattern}'",
                                      {"pattern": self.pattern})
        return value

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {**handler(schema), "pattern": self.pattern}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
