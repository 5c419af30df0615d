"""``GET /v1/schedules`` (docs/configuration.md): the daemon's schedules, each with its next fire
time (see hipq/schedules.py)."""

from __future__ import annotations

from aiohttp import web

from hipq.api.deps import DEPS
from hipq.api.io import reply
from hipq.api.schedule_models import ScheduleList, ScheduleOut


async def list_schedules(request: web.Request) -> web.Response:
    schedules = request.app[DEPS].schedules
    states = [] if schedules is None else schedules.describe()
    return reply(ScheduleList(schedules=[ScheduleOut.model_validate(s, from_attributes=True)
                                         for s in states]))
