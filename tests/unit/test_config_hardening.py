"""Config hardening (issue 13 finding 11): ``${VAR}`` is substituted after YAML
parsing, so a value never changes the document's structure; ``signing_key`` has a
minimum length; queue and job ids ``.`` and ``..`` are refused; the non-loopback
rule of ``hipq run``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hipq.cli.commands import check_exposure, is_loopback, warn_open_locally
from hipq.config import MIN_SIGNING_KEY, ApiConfig, QueueConfig, load_config
from hipq.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hipq.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("secret", ["abc #not-a-comment", "a: b", "x\nqueues: [{id: evil}]",
                                    "'quoted'", "[1, 2]", "{a: 1}", "${OTHER}"])
def test_a_value_from_the_environment_never_changes_the_structure(tmp_path: Path,
                                                                   secret: str) -> None:
    path = write(tmp_path, "api:\n  tokens:\n    - token: ${TOKEN}\n")
    settings = load_config(path, env={"TOKEN": f"{secret}-long-enough", "OTHER": "x"})
    assert settings.api.tokens[0].token == f"{secret}-long-enough"
    assert settings.queues == []


def test_a_variable_in_a_comment_is_harmless(tmp_path: Path) -> None:
    path = write(tmp_path, "# set ${NOT_SET} before you start\napi:\n  port: 9001  # ${NOPE}\n")
    assert load_config(path, env={}).api.port == 9001


def test_a_missing_variable_in_a_value_is_still_named(tmp_path: Path) -> None:
    path = write(tmp_path, "database:\n  url: ${DB_URL}\n")
    with pytest.raises(ConfigError, match="environment variable DB_URL is not set"):
        load_config(path, env={})


def test_numbers_from_the_environment_still_validate(tmp_path: Path) -> None:
    path = write(tmp_path, "api:\n  port: ${PORT:-9000}\n  host: h-${HOST_SUFFIX}\n")
    settings = load_config(path, env={"HOST_SUFFIX": "1"})
    assert (settings.api.port, settings.api.host) == (9000, "h-1")


def test_signing_key_has_a_minimum_length(tmp_path: Path) -> None:
    path = write(tmp_path, "signing_key: ${KEY}\n")
    with pytest.raises(ConfigError, match=f"at least {MIN_SIGNING_KEY} characters"):
        load_config(path, env={"KEY": "short-key"})
    assert load_config(path, env={"KEY": "k" * MIN_SIGNING_KEY}).signing_key == "k" * 32
    assert not load_config(path, env={"KEY": ""}).signing_key  # empty: generated and stored


@pytest.mark.parametrize("queue_id", [".", ".."])
def test_dot_queue_ids_are_refused(queue_id: str) -> None:
    with pytest.raises(ValueError, match="may not be"):
        QueueConfig(id=queue_id)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.5", False),
    ("example.com", False)])
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_non_loopback_host_needs_tokens_or_allow_insecure(
        caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigError, match=r"api\.allow_insecure"):
        check_exposure(ApiConfig(host="0.0.0.0"))
    check_exposure(ApiConfig(host="127.0.0.1"))  # loopback: fine, silent here
    check_exposure(ApiConfig(host="0.0.0.0", enabled=False))  # no API: nothing listens
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="hipq"):
        check_exposure(ApiConfig(host="0.0.0.0", allow_insecure=True))
        check_exposure(ApiConfig(host="0.0.0.0", tokens=[{"token": "t" * 20}]))
    assert len(caplog.records) == 2
    assert "without tokens" in caplog.records[0].getMessage()
    assert "TLS" in caplog.records[1].getMessage()


def test_loopback_without_tokens_warns_every_local_user_can_drive_it(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hipq"):
        warn_open_locally(ApiConfig(host="127.0.0.1", tokens=[{"token": "t" * 20}]))
        warn_open_locally(ApiConfig(host="0.0.0.0"))  # check_exposure's to say
        warn_open_locally(ApiConfig(host="127.0.0.1"))
    [record] = caplog.records
    assert "every local user" in record.getMessage()
    assert record.action == "api_open_locally"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("retry", "needle"), [
    ({"strategy": "exponential", "base_seconds": "x"}, "base_seconds must be a number"),
    ({"strategy": "exponential", "factor": 0.5}, "factor must be a number from 1"),
    ({"strategy": "exponential", "max_seconds": 1e300}, "max_seconds must be a number"),
    ({"strategy": "exponential", "jitter": "yes"}, "jitter must be true or false"),
    ({"strategy": "exponential", "rng": "os:system"}, "unknown option 'rng'"),
    ({"strategy": "fixed", "delay_seconds": -1}, "delay_seconds must be a number from 0"),
    ({"strategy": "fixed", "delay_seconds": True}, "delay_seconds must be a number"),
    ({"strategy": "none", "delay_seconds": 1}, "unknown option 'delay_seconds'"),
])
def test_built_in_retry_options_are_checked_when_the_queue_is_made(
        retry: dict[str, object], needle: str) -> None:
    """A bad option fails at creation (and names the option, never its value), not
    at the first retry."""
    from hipq.retry import build_retry

    config = QueueConfig.model_validate({"id": "q", "target": {"kind": "memory", "name": "t"},
                                         "retry": retry})
    with pytest.raises(ConfigError, match=needle):
        build_retry(config.retry.to_spec())


def test_good_built_in_retry_options_pass() -> None:
    from hipq.retry import build_retry

    for retry in ({"strategy": "exponential", "base_seconds": 2, "factor": 3.5,
                   "max_seconds": 600, "jitter": False},
                  {"strategy": "fixed", "options": {"delay_seconds": 0.5}},
                  {"strategy": "lowkiq"}, {}):
        config = QueueConfig.model_validate({"id": "q", "retry": retry,
                                             "target": {"kind": "memory", "name": "t"}})
        assert callable(build_retry(config.retry.to_spec()))
