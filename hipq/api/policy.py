"""What a queue created over the API may name, and what its answers may show.

* **Plugins and Python targets** (SPEC 8): ``POST /v1/jobs`` may name a
  ``module:attr`` only from the modules in ``api.plugin_modules`` (default
  ``plugins`` and ``hipq``, with their submodules). The check reads the names
  only, before anything is imported or instantiated, so a refused name runs no
  code. YAML is trusted and may name any module.
* **Secrets are write-only**: every answer shows ``target.auth`` and
  ``target.headers`` values, and plugin ``options`` whose key is named like a
  secret (token, password, secret, key...), as ``"***"``. An update may send
  ``"***"`` back at such a place to keep the stored value (so a client can
  round-trip what it read); ``"***"`` where nothing is stored is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from hipq.api.errors import ApiError
from hipq.config import QueueConfig

MASK = "***"
SECRET_NAME = re.compile(r"token|passw|secret|key|credential|auth", re.IGNORECASE)
_OPTION_HOLDERS = (("throttler", "options"), ("target", "options"), ("retry", "options"))


def plugin_paths(config: QueueConfig) -> Iterator[tuple[str, str]]:
    """(where, "module:attr") for every importable name in a queue's settings."""
    if config.throttler is not None:
        yield "throttler.plugin", config.throttler.plugin
    if config.retry.plugin:
        yield "retry.plugin", config.retry.plugin
    if config.correlation is not None and config.correlation.plugin:
        yield "correlation.plugin", config.correlation.plugin
    if config.target is not None and config.target.kind == "python":
        yield "target.function", config.target.function


def check_plugin_modules(config: QueueConfig, allowed: Sequence[str]) -> None:
    """422 unless every plugin and Python target comes from an allowed module."""
    for where, path in plugin_paths(config):
        module = path.partition(":")[0]
        if not any(module == m or module.startswith(m + ".") for m in allowed):
            raise ApiError(422, "plugin_not_allowed",
                           f"{where}: module {module!r} is not in api.plugin_modules "
                           f"({', '.join(allowed) or 'none'}); name it in the YAML config "
                           "or add it to api.plugin_modules")


def _secret_places(config: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """(mapping, key) of every secret value in a queue's JSON settings."""
    target = config.get("target")
    if isinstance(target, dict):
        for name in ("auth", "headers"):
            values = target.get(name)
            if isinstance(values, dict):
                yield from ((values, k) for k in values if not (name == "auth" and k == "type"))
    for holder, field in _OPTION_HOLDERS:
        node = config.get(holder)
        if isinstance(node, dict):
            yield from _named_secrets(node.get(field))
    retry = config.get("retry")
    if isinstance(retry, dict):  # flat retry options sit beside "strategy"
        yield from ((retry, k) for k in retry
                    if k not in {"strategy", "plugin", "options"} and SECRET_NAME.search(k))


def _named_secrets(node: Any) -> Iterator[tuple[dict[str, Any], str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if SECRET_NAME.search(str(key)) and not isinstance(value, dict | list):
                yield node, key
            else:
                yield from _named_secrets(value)
    elif isinstance(node, list):
        for item in node:
            yield from _named_secrets(item)


def redacted(config: QueueConfig) -> dict[str, Any]:
    """The queue's settings as JSON, secrets shown as ``"***"``."""
    out = config.model_dump(mode="json", by_alias=True)
    for mapping, key in list(_secret_places(out)):
        if mapping[key] is not None:
            mapping[key] = MASK
    return out


def keep_secrets(new: QueueConfig, old: QueueConfig | None) -> QueueConfig:
    """``new`` with each ``"***"`` at a secret place replaced by the stored value."""
    raw = new.model_dump(mode="json", by_alias=True, exclude_unset=True)
    places = [(m, k) for m, k in _secret_places(raw) if m[k] == MASK]
    if not places:
        return new
    stored = _stored_values(old)
    for mapping, key in places:
        value = stored.get(_path_of(raw, mapping, key))
        if value is None:
            raise ApiError(422, "invalid_request", f"{key!r} is {MASK!r} but no stored value "
                                                   "is there to keep; send the secret itself")
        mapping[key] = value
    return QueueConfig.model_validate(raw)


def _stored_values(old: QueueConfig | None) -> dict[tuple[str, ...], Any]:
    if old is None:
        return {}
    raw = old.model_dump(mode="json", by_alias=True)
    return {_path_of(raw, m, k): m[k] for m, k in _secret_places(raw)}


def _path_of(root: Any, mapping: dict[str, Any], key: str) -> tuple[str, ...]:
    """The key path from ``root`` to ``mapping[key]`` (found by identity)."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if node is mapping:
            return (*path, key)
        if isinstance(node, dict):
            stack.extend((v, (*path, str(k))) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*path, str(i))) for i, v in enumerate(node))
    return (key,)
