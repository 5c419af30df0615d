"""The HTTP API (SPEC 8): ``create_app(deps)``, the route table, its models,
the error middleware, auth, and the OpenAPI document."""

from hipq.api.app import create_app, openapi_document
from hipq.api.deps import ApiDeps
from hipq.api.server import ApiServer

__all__ = ["ApiDeps", "ApiServer", "create_app", "openapi_document"]
