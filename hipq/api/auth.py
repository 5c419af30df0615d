"""Bearer-token auth with roles.

With ``api.tokens`` configured, every route needs ``Authorization: Bearer <token>``
except the open ones (``/healthz``, ``/openapi.json``, the dashboard page, and
``/metrics`` unless ``api.protect_metrics``) and the signed response URLs (their
signature is checked instead). Roles nest: ``admin`` (queues) > ``producer``
(enqueue, cancel, replay, report) > ``reader`` (read). Every configured token is
compared in constant time; tokens are never logged.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from enum import IntEnum

from aiohttp import web

from hipq.api.api_errors import ApiError
from hipq.config import TokenConfig


class Role(IntEnum):
    READER = 1
    PRODUCER = 2
    ADMIN = 3


class TokenAuth:
    def __init__(self, tokens: Sequence[TokenConfig]) -> None:
        self._tokens = [(t.token.encode(), Role[t.role.upper()]) for t in tokens]

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def role_of(self, presented: str) -> Role | None:
        """The role of a token; every token is compared, so timing tells nothing."""
        given = presented.encode("utf-8", "replace")
        found: Role | None = None
        for token, role in self._tokens:
            if hmac.compare_digest(token, given) and found is None:
                found = role
        return found

    def check(self, request: web.Request, needed: Role | None) -> Role | None:
        """Raise 401/403 unless the request may use a route needing ``needed``; the
        request's role (admin without tokens; None on an open route)."""
        if not self.enabled:
            return Role.ADMIN
        if needed is None:
            return None
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        role = self.role_of(token.strip()) if scheme.lower() == "bearer" else None
        if role is None:
            raise ApiError(401, "unauthorized", "a valid 'Authorization: Bearer <token>' "
                                                "header is required")
        if role < needed:
            raise ApiError(403, "forbidden", f"this needs the {needed.name.lower()} role")
        return role


ROLE_KEY = web.RequestKey("hipq_role", Role)  # the role TokenAuth.check found


def request_role(request: web.Request) -> Role | None:
    """The role of this request (None: an open route with tokens configured)."""
    return request.get(ROLE_KEY)
