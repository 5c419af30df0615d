"""Configuration: YAML validated by pydantic.

``load_config(path)`` reads the file, substitutes ``${VAR}`` / ``${VAR:-default}``
from the environment, applies ``HIPQ_DATABASE_URL``, validates, and raises
:class:`~hipq.errors.ConfigError` with one readable paragraph naming the file,
the key path and what is wrong. Unknown keys are rejected everywhere. A relative
SQLite path in the file is relative to the file's directory (docs/configuration.md).
"""

from __future__ import annotations

import os
import re
import zoneinfo
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import PydanticCustomError

from hipq.config_fields import MAX_SECONDS, Matching
from hipq.config_fields import QUEUE_ID_PATTERN as QUEUE_ID_PATTERN
from hipq.config_fields import Strict as _Strict
from hipq.config_partners import Adaptive as Adaptive
from hipq.config_partners import Backoff as Backoff
from hipq.config_partners import PartnerConfig as PartnerConfig
from hipq.config_partners import PartnerCost as PartnerCost
from hipq.config_partners import PartnerLimit as PartnerLimit
from hipq.errors import ConfigError
from hipq.jobs import DEFAULT_PRIORITY, DEFAULT_TIMEOUT_SECONDS, DeliveryStrategy, Ordering
from hipq.queue_settings import spec_of
from hipq.spec import QueueSpec, RetrySpec
from hipq.store.factory import DEFAULT_POOL_SIZE
from hipq.throttling import windows
from hipq.values import INT32_MAX

DEFAULT_CONFIG_FILE = "hipq.yaml"
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///hipq.db"
PLUGIN_PATH_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"
DEFAULT_PLUGIN_MODULES = ("plugins", "hipq.contrib")
MIN_SIGNING_KEY = 32  # characters of a configured ``signing_key``
HOUR_MINUTE = r"^([01]\d|2[0-3]):[0-5]\d$"


def known_timezone(value: str) -> str:
    """``value`` if it names an IANA time zone, else ``ValueError``."""
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown timezone {value!r}") from None
    return value


def _plugin_path(value: Any) -> Any:
    """A ``module:attr`` path, or an error that says how to write one (before the
    pattern check, whose regex would say nothing to a user; the pattern stays in
    the JSON schema)."""
    if isinstance(value, str) and not re.match(PLUGIN_PATH_PATTERN, value):
        module, dot, attr = value.rpartition(".")
        hint = f" ({module}:{attr})" if dot and ":" not in value and module else ""
        raise PydanticCustomError("plugin_path", "{message}", {"message": (
            f"{value[:200]!r} is not a module:function path: use module:function{hint}")})
    return value


# ``module:attr``, as a Python target's function and every plugin are named
PluginPath = Annotated[str, Matching(PLUGIN_PATH_PATTERN), BeforeValidator(_plugin_path)]


class PythonTarget(_Strict):
    kind: Literal["python"]
    function: PluginPath
    options: dict[str, Any] = Field(default_factory=dict)
    # True: a try that ends within reconcile.in_tick_seconds is claimed and ended in
    # one statement (hipq/engine/inline.py); a crash while it runs leaves its job
    # queued, to run again as the same attempt
    in_tick: bool = False


def _http_url(url: str) -> str:
    """An absolute http(s) URL with a host (``{queue}`` and ``{id}`` may appear)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an absolute http:// or https:// URL with a host")
    return url


# headers that frame a request: the HTTP target's client writes them, a queue may not
FRAMING_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection",
                             "keep-alive", "upgrade", "te", "trailer", "expect",
                             "proxy-connection", "hipq-correlation-key"})
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,200}$")


def _http_headers(headers: dict[str, str]) -> dict[str, str]:
    """Headers a launch can carry as given: token names, no line break or NUL in a
    value, none of the headers the client writes itself."""
    for name, value in headers.items():
        if not _HEADER_NAME.match(name):
            raise ValueError(f"header name {name[:100]!r} is not an HTTP token")
        if name.lower() in FRAMING_HEADERS:
            raise ValueError(f"header {name!r} is written by hipq and cannot be set")
        if any(c in value for c in "\r\n\x00"):
            raise ValueError(f"the value of header {name!r} has a line break or NUL")
    return headers


class HttpTarget(_Strict):
    kind: Literal["http"]
    url: Annotated[str, Field(max_length=2000), AfterValidator(_http_url)]
    mode: Literal["callback", "sync"] = "callback"
    timeout_seconds: float = Field(default=30.0, gt=0, le=MAX_SECONDS)
    headers: Annotated[dict[str, str], AfterValidator(_http_headers)] = Field(
        default_factory=dict)
    auth: dict[str, str] | None = None
    max_in_flight: int = Field(default=50, ge=1, le=10000)


class KafkaTarget(_Strict):
    kind: Literal["kafka"]
    topic: str
    key: str | None = None


class MemoryTarget(_Strict):
    """An in-process target, for tests and embedding (see ``hipq.testing``)."""

    kind: Literal["memory"]
    name: str = "default"


TargetConfig = Annotated[
    PythonTarget | HttpTarget | KafkaTarget | MemoryTarget, Field(discriminator="kind")
]


class PluginRef(_Strict):
    plugin: PluginPath
    options: dict[str, Any] = Field(default_factory=dict)


class RetryConfig(BaseModel):
    """``{strategy: name, <options>}`` or ``{plugin: "module:attr", options: {...}}``."""

    model_config = ConfigDict(extra="allow", frozen=True)

    strategy: str | None = None
    plugin: PluginPath | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_of(self) -> RetryConfig:
        if self.strategy and self.plugin:
            raise ValueError("give either 'strategy' or 'plugin', not both")
        return self

    def all_options(self) -> dict[str, Any]:
        """``options`` merged with the flat option keys (``base_seconds: 1``)."""
        return {**(self.model_extra or {}), **self.options}

    def to_spec(self) -> RetrySpec:
        """The frozen view :func:`hipq.retry.build_retry` works with."""
        return RetrySpec(strategy=self.strategy, plugin=self.plugin,
                         options=MappingProxyType(self.all_options()))


class CorrelationConfig(_Strict):
    request: str | None = None
    response: str | None = None
    plugin: PluginPath | None = None


class TimeWindow(_Strict):
    """A daily window ``[start, end)`` in local time; ``end <= start`` crosses midnight."""

    start: Annotated[str, Field(pattern=HOUR_MINUTE)]  # a request body's too: Rust
    end: Annotated[str, Field(pattern=HOUR_MINUTE)]


class Quotas(_Strict):
    """``{field, shares: {group: share}, default?, lend_unused?}`` (see throttling/quotas)."""

    field: Annotated[str, Matching(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")]
    # a group's name is a job's value as stored (hipq.pause_scope: at most 128 kept)
    shares: dict[Annotated[str, Field(max_length=128)], Annotated[float, Field(ge=0, le=1)]]
    default: Annotated[float, Field(ge=0, le=1)] | None = None
    lend_unused: bool = False

    @model_validator(mode="after")
    def _sums(self) -> Quotas:
        total = sum(self.shares.values()) + (self.default or 0)
        if total > 1.0 + 1e-9:
            raise ValueError(f"quota shares add up to {total:g}, more than 1")
        return self


class RateLimit(_Strict):
    """At most ``launches`` launches in any ``per_seconds`` window (per ``by`` group)."""

    launches: int = Field(ge=1)
    per_seconds: float = Field(gt=0, le=30 * 86400)
    by: Annotated[str, Matching(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")] | None = None


class QueueConfig(_Strict):
    """A queue's settings: the same keys in YAML and in ``POST /v1/jobs``."""

    id: Annotated[str, Matching(QUEUE_ID_PATTERN)]
    delivery_strategy: DeliveryStrategy = DeliveryStrategy.AT_LEAST_ONCE
    attempts: int = Field(default=3, ge=1, le=1000)
    concurrency: int | None = Field(default=None, ge=1, le=INT32_MAX)
    critical_concurrency: int | None = Field(default=None, ge=0, le=INT32_MAX)
    ordering: Ordering = Ordering.TIME_THEN_PRIORITY
    aging_seconds: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    timeout_seconds: float = Field(default=DEFAULT_TIMEOUT_SECONDS, gt=0, le=MAX_SECONDS)
    heartbeat_timeout_seconds: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    default_weight: int = Field(default=1, ge=1, le=INT32_MAX)
    timezone: str = "UTC"
    time_windows: list[TimeWindow] | None = None
    quotas: Quotas | None = None
    rate_limit: RateLimit | None = None
    backoff: Backoff = Field(default_factory=Backoff)
    adaptive: Adaptive | None = None
    merge_by_ordering_key: bool = False
    ordering_key_mode: Literal["strict", "relaxed_on_retry"] = "strict"
    target: TargetConfig | None = None
    correlation: CorrelationConfig | None = None
    throttler: PluginRef | None = None
    retry: RetryConfig = Field(default_factory=RetryConfig)
    paused: bool = False
    partner: Annotated[str, Matching(QUEUE_ID_PATTERN)] | None = Field(
        default=None, description="the partner it calls, declared under partners: its "
        "launches take from the partner's budget, shared with its other queues")

    @field_validator("id")
    @classmethod
    def _not_dot(cls, value: str) -> str:
        if value in {".", ".."}:  # would rewrite a target URL's path
            raise ValueError("a queue id may not be '.' or '..'")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        return known_timezone(value)

    @model_validator(mode="after")
    def _consistent(self) -> QueueConfig:
        if self.time_windows is not None:
            windows.validate([w.model_dump() for w in self.time_windows], self.timezone)
        if self.quotas is not None and self.concurrency is None:
            raise ValueError("quotas need a concurrency to share")
        if self.adaptive is not None:
            if self.concurrency is None:
                raise ValueError("adaptive needs a concurrency to adapt")
            if self.adaptive.min > self.concurrency:
                raise ValueError("adaptive min is larger than concurrency")
        if self.concurrency is not None and self.default_weight > self.concurrency:
            raise ValueError("default_weight is larger than concurrency: no job could ever run")
        return self

    @property
    def effective_critical_concurrency(self) -> int | None:
        """Critical jobs' own capacity; unset means the same as ``concurrency``."""
        if self.critical_concurrency is not None:
            return self.critical_concurrency
        return self.concurrency

    def stored(self) -> dict[str, Any]:
        """These settings as the store keeps them (:mod:`hipq.queue_settings`): JSON
        values by key, ``None`` values left out."""
        return self.model_dump(mode="json", exclude_none=True)

    def to_spec(self) -> QueueSpec:
        """The frozen, typed view the engine, throttlers and plugins work with: the
        one the store makes of :meth:`stored` (:func:`hipq.queue_settings.spec_of`)."""
        return spec_of(self.stored())


class DatabaseConfig(_Strict):
    url: str = DEFAULT_DATABASE_URL
    pool_size: int = Field(default=DEFAULT_POOL_SIZE, ge=1)
    notify: bool = True


class TokenConfig(_Strict):
    token: Annotated[str, Field(min_length=8)]
    role: Literal["admin", "producer", "reader"] = "admin"


class ApiConfig(_Strict):
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    public_url: str | None = None
    tokens: list[TokenConfig] = Field(default_factory=list)
    max_body_bytes: int = Field(default=1048576, ge=1024)
    protect_metrics: bool = False
    # /v1/stats, /metrics and the queue routes share counts at most this old
    stats_max_age_seconds: float = Field(default=2.0, ge=0, le=2.0)
    # without tokens, ``hipq run`` refuses a non-loopback host unless this is true
    allow_insecure: bool = False
    # slow clients (docs/operations.md, "Connections"): a request head must arrive
    # whole within this of the connection opening or of the previous answer (an idle
    # kept-alive connection is closed then too); a body within its own time; an
    # answer the client takes none of for send_timeout_seconds is dropped
    head_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    body_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    send_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    # connections held at once, in all and per peer (an IPv4 address, an IPv6 /64);
    # one more is answered 503 and closed
    max_connections: int = Field(default=1024, ge=1, le=1_000_000)
    max_connections_per_peer: int = Field(default=128, ge=1, le=1_000_000)
    # modules (and their submodules) that plugins and Python targets named over
    # ``POST /v1/jobs`` may come from; YAML may name any module
    plugin_modules: list[Annotated[str, Matching(r"^[A-Za-z_][\w.]*$")]] = Field(
        default_factory=lambda: list(DEFAULT_PLUGIN_MODULES))


class ReconcileConfig(_Strict):
    interval_seconds: float = Field(default=5.0, gt=0)
    lease_seconds: float = Field(default=30.0, gt=0)
    fetch_limit: int = Field(default=2000, ge=1, le=10000)
    launch_concurrency: int = Field(default=100, ge=1)
    debounce_seconds: float = Field(default=0.005, ge=0)
    # False: no early wake-ups (work arriving waits for the next interval tick)
    early_wake: bool = True
    # PostgreSQL: vacuum the jobs table after this many jobs moved through it
    # (claimed or ended) since the last time; 0 leaves it to autovacuum
    vacuum_every: int = Field(default=4000, ge=0)
    # how long a tick waits for the tries of a Python target with ``in_tick: true``
    # (hipq/engine/inline.py); 0: such tries are claimed first like any other
    in_tick_seconds: float = Field(default=0.02, ge=0, le=10)


class ResponsesConfig(_Strict):
    buffer_seconds: float = Field(default=3600.0, ge=0)


class KafkaResponseFields(_Strict):
    """Where a Kafka response's fields are in its JSON value (dotted paths)."""

    status: str = "status"
    retryable: str = "retryable"
    result: str = "result"
    error: str = "error"
    attempt: str = "attempt"
    extend_seconds: str = "extend_seconds"
    retry_after_seconds: str = "retry_after_seconds"


class KafkaConfig(_Strict):
    """The shared producer (Kafka targets) and the response consumer group
    (see ``hipq/targets/kafka_target.py`` and ``hipq/responses/kafka_consumer.py``)."""

    bootstrap_servers: str
    group_id: str = "hipq"
    response_topics: list[str] = Field(default_factory=list)
    client_id: str = "hipq"
    idempotence: bool | Literal["auto"] = "auto"
    linger_ms: int = Field(default=5, ge=0, le=60000)
    batch_size: int = Field(default=131072, ge=1024, le=16 * 2**20)  # producer bytes/partition
    delivery_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    max_in_flight: int = Field(default=1000, ge=1, le=100000)
    reconnect_backoff_seconds: float = Field(default=0.5, gt=0)
    reconnect_backoff_max_seconds: float = Field(default=30.0, gt=0)
    session_timeout_ms: int = Field(default=10000, ge=500)
    heartbeat_interval_ms: int = Field(default=3000, ge=50)
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    max_poll_records: int = Field(default=500, ge=1, le=100000)
    # how long the broker may hold a response fetch that finds nothing: while no
    # response came for 2 s, and while they flow (hipq/responses/kafka_consumer.py)
    fetch_max_wait_ms: int = Field(default=500, ge=0, le=60000)
    fetch_max_wait_busy_ms: int = Field(default=10, ge=0, le=60000)
    response_fields: KafkaResponseFields = Field(default_factory=KafkaResponseFields)
    # a response must carry its launch's Hipq-Signature, else it is dropped as forged
    # (docs/kafka.md, "Signed responses")
    require_signed_responses: bool = False
    client_options: dict[str, Any] = Field(default_factory=dict)


class ArchiveConfig(_Strict):
    retention_days: float = Field(default=30.0, gt=0)


class LoggingConfig(_Strict):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    json_format: bool = Field(default=False, alias="json")


# -- schedules (docs/configuration.md; the runtime is hipq/schedules.py) ---------------------------


class ScheduleConfig(_Strict):
    """A recurring job: one enqueue into ``queue`` per fire time of ``cron``. The cron
    string and the queue are checked by ``hipq.schedules.check_schedules``."""

    id: Annotated[str, Matching(r"^[A-Za-z0-9_.-]{1,60}$")]
    queue: Annotated[str, Matching(QUEUE_ID_PATTERN)]
    cron: Annotated[str, Field(min_length=1, max_length=200)]
    timezone: str = "UTC"
    data: dict[str, Any] = Field(default_factory=dict)
    priority: int = Field(default=DEFAULT_PRIORITY, ge=-1_000_000, le=1_000_000)
    catch_up: bool = False

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        return QueueConfig._known_timezone(value)


# -- end of schedules ---------------------------------------------------------------


class DashboardConfig(_Strict):
    # a link from a job's page to its trace (docs/traces.md), e.g.
    # "https://grafana.example/explore?traceId={trace_id}"
    trace_url: Annotated[str, Field(max_length=2000),
                         Matching(r"^https?://[^\s]*\{trace_id\}[^\s]*$")] | None = None


class Settings(_Strict):
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)
    reconcile: ReconcileConfig = Field(default_factory=ReconcileConfig)
    responses: ResponsesConfig = Field(default_factory=ResponsesConfig)
    kafka: KafkaConfig | None = None
    signing_key: str | None = None
    archive: ArchiveConfig = Field(default_factory=ArchiveConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    # the daemon's event loop: uvloop where it is installed (auto), or asyncio's own
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    partners: list[PartnerConfig] = Field(default_factory=list)
    queues: list[QueueConfig] = Field(default_factory=list)
    schedules: list[ScheduleConfig] = Field(default_factory=list)

    @field_validator("signing_key")
    @classmethod
    def _long_enough(cls, value: str | None) -> str | None:
        if value and len(value) < MIN_SIGNING_KEY:
            raise ValueError(f"signing_key must be at least {MIN_SIGNING_KEY} characters "
                             f"(it has {len(value)}); leave it unset to have one generated "
                             "and stored in the database")
        return value

    @model_validator(mode="after")
    def _unique_queue_ids(self) -> Settings:
        seen: set[str] = set()
        for queue in self.queues:
            if queue.id in seen:
                raise ValueError(f"queue id {queue.id!r} is declared twice")
            seen.add(queue.id)
        partners = [partner.id for partner in self.partners]
        if len(set(partners)) != len(partners):
            raise ValueError("a partner id is declared twice")
        for queue in self.queues:
            if queue.partner is not None and queue.partner not in partners:
                raise ValueError(f"queue {queue.id!r} names partner {queue.partner!r}, "
                                 "which is not declared under partners")
        schedules = [schedule.id for schedule in self.schedules]
        if len(set(schedules)) != len(schedules):
            raise ValueError("a schedule id is declared twice")
        return self


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def substitute_env(text: str, env: dict[str, str], source: str) -> str:
    """Replace ``${VAR}`` and ``${VAR:-default}``; a missing VAR without default fails."""

    def repl(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"{source}: environment variable {name} is not set "
                          f"(write ${{{name}:-}} to allow it to be empty)")

    return _ENV_REF.sub(repl, text)


def substitute_tree(node: Any, env: dict[str, str], source: str) -> Any:
    """:func:`substitute_env` in every string value of parsed YAML. Done after
    parsing, a value can never change the document's structure (a secret holding
    `` #`` or ``: `` stays whole) and a ``${VAR}`` in a comment is never seen."""
    if isinstance(node, str):
        return substitute_env(node, env, source) if "${" in node else node
    if isinstance(node, dict):
        return {key: substitute_tree(value, env, source) for key, value in node.items()}
    if isinstance(node, list):
        return [substitute_tree(value, env, source) for value in node]
    return node


def load_config(path: str | Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Load settings from ``path`` (default ``./hipq.yaml`` if present, else built-ins)."""
    env = dict(os.environ) if env is None else env
    raw: dict[str, Any] = {}
    source = "<defaults>"
    if path is None and Path(DEFAULT_CONFIG_FILE).exists():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        source = str(path)
        raw = _read_yaml(Path(path), env)
        _resolve_database_path(raw, Path(path).absolute().parent)
    if env.get("HIPQ_DATABASE_URL"):
        raw.setdefault("database", {})
        if isinstance(raw["database"], dict):
            raw["database"]["url"] = env["HIPQ_DATABASE_URL"]
    return parse_settings(raw, source)


def sqlite_file(url: str) -> str | None:
    """The file a SQLite URL names, as written (maybe relative); None for another
    database, an in-memory one or a ``file:`` URI."""
    scheme, sep, rest = url.partition(":///")
    if not sep or scheme.split("+", 1)[0] != "sqlite":
        return None
    path = rest.split("?", 1)[0]
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    return path


def _resolve_database_path(raw: dict[str, Any], base: Path) -> None:
    """A relative SQLite path written in the file is relative to the file's directory,
    not to wherever the command runs (``hipq -c conf/hipq.yaml`` from anywhere finds
    ``conf/hipq.db``); ``HIPQ_DATABASE_URL`` and the built-in default stay relative
    to the current directory."""
    database = raw.get("database")
    if not isinstance(database, dict):
        return
    url = database.get("url")
    if not isinstance(url, str) or (path := sqlite_file(url)) is None:
        return
    if Path(path).is_absolute():
        return
    head = url[:url.index(":///") + 4]
    database["url"] = head + str(base / path) + url[len(head) + len(path):]


def _read_yaml(path: Path, env: dict[str, str]) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}: invalid YAML{line}: {problem}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, "
                          f"got {type(raw).__name__}")
    substituted: dict[str, Any] = substitute_tree(raw, env, str(path))
    return substituted


def parse_settings(raw: dict[str, Any], source: str = "<config>") -> Settings:
    try:
        return Settings.model_validate(raw)
    except PydanticValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, raw)) from None


def format_validation_error(exc: PydanticValidationError, source: str,
                            raw: Any = None) -> str:
    """One paragraph: ``file: key.path: what is wrong`` for each problem."""
    problems = []
    for err in exc.errors(include_url=False):
        path = _key_path(err["loc"], raw)
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown key"
        problems.append(f"{path or '<top>'}: {message}")
    plural = "s" if len(problems) != 1 else ""
    return f"{source}: invalid configuration ({len(problems)} problem{plural}): " + "; ".join(
        problems)


def _key_path(loc: tuple[int | str, ...], raw: Any) -> str:
    """``('queues', 0, 'target', 'python', 'function')`` -> ``queues[0].target.function``."""
    out = ""
    node = raw
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            continue
        if isinstance(node, dict) and part not in node and part in {"python", "http", "kafka",
                                                                     "memory"}:
            continue  # a discriminated-union tag, not a key the user wrote
        out += f".{part}" if out else str(part)
        node = node.get(part) if isinstance(node, dict) else None
    return out
