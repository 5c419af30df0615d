"""Config loading: env substitution, validation errors that name file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipq.config import QueueConfig, load_config, substitute_env
from hipq.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hipq.yaml"
    path.write_text(text)
    return path


def test_example_config_is_valid() -> None:
    root = Path(__file__).parents[2]
    settings = load_config(root / "config.example.yaml", env={})
    # a relative SQLite path is relative to the config file's directory
    assert settings.database.url == f"sqlite+aiosqlite:///{root.absolute()}/hipq.db"
    assert [q.id for q in settings.queues] == ["greetings", "flaky"]
    assert settings.signing_key == "" or settings.signing_key is None


def test_defaults_without_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_config(None, env={})
    assert settings.database.url.startswith("sqlite+aiosqlite:///")
    assert settings.api.port == 8080
    assert settings.reconcile.interval_seconds == 5


def test_env_substitution_and_database_override(tmp_path: Path) -> None:
    path = write(tmp_path, "database:\n  url: ${DB_URL}\napi:\n  port: ${PORT:-9000}\n")
    settings = load_config(path, env={"DB_URL": "sqlite+aiosqlite:///x.db"})
    # the file's database.url, substituted, names a file beside the config
    assert settings.database.url == f"sqlite+aiosqlite:///{tmp_path}/x.db"
    assert settings.api.port == 9000
    overridden = load_config(path, env={"DB_URL": "sqlite+aiosqlite:///x.db",
                                        "HIPQ_DATABASE_URL": "postgresql+asyncpg://h/db"})
    assert overridden.database.url == "postgresql+asyncpg://h/db"


def test_missing_env_var_is_named() -> None:
    with pytest.raises(ConfigError, match="environment variable NOPE is not set"):
        substitute_env("x: ${NOPE}", {}, "f.yaml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("queues:\n  - id: q\n    concurrency: lots\n",
         "queues[0].concurrency: Input should be a valid integer"),
        ("queues:\n  - id: q\n    colour: red\n", "queues[0].colour: unknown key"),
        ("reconcile:\n  interval: 5\n", "reconcile.interval: unknown key"),
        ("queues:\n  - id: q\n    target: {kind: python, function: 'no colon'}\n",
         "queues[0].target.function: 'no colon' is not a module:function path"),
        ("queues:\n  - id: q\n  - id: q\n", "queue id 'q' is declared twice"),
        ("queues:\n  - id: q\n    timezone: Mars/Base\n", "unknown timezone 'Mars/Base'"),
        ("api: [1, 2]\n", "api: Input should be a valid dictionary"),
        ("- just\n- a list\n", "the top level must be a mapping"),
        ("queues: [\n", "invalid YAML"),
    ],
)
def test_bad_config_names_file_key_and_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert message.startswith(str(path))
    assert expected in message
    assert "\n" not in message


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "missing.yaml", env={})


def test_quotas_need_concurrency_and_shares_at_most_one() -> None:
    with pytest.raises(ValueError, match="quotas need a concurrency"):
        QueueConfig.model_validate({"id": "q", "quotas": {"field": "region", "shares": {}}})
    with pytest.raises(ValueError, match=r"add up to 1\.2"):
        QueueConfig.model_validate({"id": "q", "concurrency": 10, "quotas": {
            "field": "region", "shares": {"a": 0.6, "b": 0.6}}})


def test_never_open_windows_are_rejected() -> None:
    with pytest.raises(ValueError, match="can never open"):
        QueueConfig.model_validate({"id": "q", "time_windows": [{"start": "05:00",
                                                                 "end": "05:00"}]})
    with pytest.raises(ValueError, match="String should match pattern"):
        QueueConfig.model_validate({"id": "q", "time_windows": [{"start": "25:00",
                                                                 "end": "05:00"}]})


def test_weight_larger_than_concurrency_is_rejected() -> None:
    with pytest.raises(ValueError, match="default_weight is larger than concurrency"):
        QueueConfig(id="q", concurrency=2, default_weight=3)


def test_retry_flat_options_are_collected() -> None:
    queue = QueueConfig.model_validate(
        {"id": "q", "retry": {"strategy": "exponential", "base_seconds": 2, "max_seconds": 60}})
    assert queue.retry.all_options() == {"base_seconds": 2, "max_seconds": 60}


def test_early_wake_switch_makes_wake_a_no_op() -> None:
    from hipq.config import parse_settings
    from hipq.engine.facade import Engine
    from hipq.testing import FakeClock

    assert parse_settings({}).reconcile.early_wake is True
    settings = parse_settings({"reconcile": {"early_wake": False}})
    engine = Engine(None, clock=FakeClock(), owner="o1",  # type: ignore[arg-type]
                    config=settings.reconcile)
    engine.wake()  # no event loop needed: it returns before asking for anything
    engine.work_arrived()
    assert not engine._driver._requested.is_set()
