"""The wire models of ``GET /v1/schedules`` (docs/configuration.md), apart from the handler so
that ``hipq.client`` reads them without the server."""

from __future__ import annotations

from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict


class ScheduleOut(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    queue: str
    cron: str
    timezone: str
    catch_up: bool
    priority: int
    data: dict[str, Any]
    next_fire_time: AwareDatetime | None


class ScheduleList(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    schedules: list[ScheduleOut]
