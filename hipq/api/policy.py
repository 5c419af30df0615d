"""What a queue created over the API may name, and what its answers may show.

* **Plugins and Python targets** (docs/security.md): ``POST /v1/jobs`` may name a
  ``module:attr`` only from the modules in ``api.plugin_modules`` (default
  ``plugins`` and ``hipq.contrib``, with their submodules), and ``attr`` is one
  plain name (no dots, so no path walks out of an allowed module). The names are
  checked first; then each allowed module is imported and the object looked up
  (nothing called), and its ``__module__`` must be allowed too (an object an
  allowed module merely imported, such as ``subprocess.Popen``, is refused).
  Nothing is instantiated or called before both checks. YAML is trusted and may
  name any module.
* **Secrets are write-only**: every answer shows ``target.auth`` and
  ``target.headers`` values, and plugin ``options`` whose key is named like a
  secret (token, password, secret, key...), as ``"***"``. An update may send
  ``"***"`` back at such a place to keep the stored value (so a client can
  round-trip what it read); ``"***"`` where nothing is stored is refused, and so is
  ``"***"`` in a target whose URL moves to another origin (scheme, host or port):
  a secret never follows its target to a new host unless it is sent again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

from hipq.api.api_errors import ApiError
from hipq.api.origin import origin_of
from hipq.config import QueueConfig
from hipq.errors import ConfigError, ValidationError
from hipq.plugins import load_object

MASK = "***"
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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
    """422 unless every plugin and Python target is one plain name defined in an
    allowed module: the names first (nothing imported), then the objects (imported
    from allowed modules only, looked up, never called)."""
    paths = list(plugin_paths(config))
    for where, path in paths:
        module, _, attr = path.partition(":")
        if not _allowed(module, allowed):
            _refuse(where, f"module {module!r} is not in api.plugin_modules "
                           f"({', '.join(allowed) or 'none'})")
        if not PLAIN_NAME.fullmatch(attr) or attr.startswith("__"):
            _refuse(where, f"{attr[:100]!r} is not one plain name: over the API a plugin is "
                           "'module:name', the name defined in that module")
    for where, path in paths:
        _check_defined_in_allowed(where, path, allowed)


def _check_defined_in_allowed(where: str, path: str, allowed: Sequence[str]) -> None:
    try:
        obj = load_object(path)  # imports an allowed module; getattr of one plain name
    except ConfigError as exc:  # as when the queue is validated: 422 "invalid"
        raise ValidationError(f"{where}: {exc}") from None
    home = getattr(obj, "__module__", None)
    if not isinstance(home, str) or not _allowed(home, allowed):
        _refuse(where, f"{path!r} is not defined in an allowed module "
                       f"(it comes from {home!r})" if isinstance(home, str) else
                       f"{path!r} is not a class or function defined in an allowed module")


def _allowed(module: str, allowed: Sequence[str]) -> bool:
    return any(module == m or module.startswith(m + ".") for m in allowed)


def _refuse(where: str, why: str) -> NoReturn:
    raise ApiError(422, "plugin_not_allowed", f"{where}: {why}; name it in the YAML config "
                                              "or add its module to api.plugin_modules")


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


def redacted(config: QueueConfig, *, urls: bool = False) -> dict[str, Any]:
    """The queue's settings as JSON, secrets shown as ``"***"``; with ``urls``, the
    target URL's userinfo dropped and its query values shown as ``"***"`` too."""
    out = config.model_dump(mode="json", by_alias=True)
    for mapping, key in list(_secret_places(out)):
        if mapping[key] is not None:
            mapping[key] = MASK
    target = out.get("target")
    if urls and isinstance(target, dict) and isinstance(target.get("url"), str):
        target["url"] = masked_url(target["url"])
    return out


def masked_url(url: str) -> str:
    """``url`` without userinfo, each query value ``***`` (a token in a query, a
    password in ``user:pass@``); the rest as written (``{queue}`` templates kept)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = "&".join(f"{name}={MASK}" if sep else name
                     for name, sep, _ in (p.partition("=") for p in parts.query.split("&"))
                     ) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def keep_secrets(new: QueueConfig, old: QueueConfig | None) -> QueueConfig:
    """``new`` with each ``"***"`` at a secret place replaced by the stored value."""
    raw = new.model_dump(mode="json", by_alias=True, exclude_unset=True)
    places = [(m, k) for m, k in _secret_places(raw) if m[k] == MASK]
    if not places:
        return new
    stored = _stored_values(old)
    if _target_moved(raw, old) and any(_path_of(raw, m, k)[0] == "target" for m, k in places):
        raise ApiError(422, "secret_needs_resending",
                       f"the target moves to another origin: send its secrets again "
                       f"instead of {MASK!r}")
    for mapping, key in places:
        value = stored.get(_path_of(raw, mapping, key))
        if value is None:
            raise ApiError(422, "invalid_request", f"{key!r} is {MASK!r} but no stored value "
                                                   "is there to keep; send the secret itself")
        mapping[key] = value
    return QueueConfig.model_validate(raw)


def _target_moved(raw: dict[str, Any], old: QueueConfig | None) -> bool:
    """Whether the new settings' target URL is on another origin than the stored one."""
    new_url = (raw.get("target") or {}).get("url")
    old_url = getattr(old.target, "url", None) if old is not None else None
    if not isinstance(new_url, str) or not isinstance(old_url, str):
        return False
    return new_url != old_url and (origin_of(new_url) is None
                                   or origin_of(new_url) != origin_of(old_url))


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
