"""``hipq.Throttled`` checks its arguments when it is made (issue 48): a value hipq
could not act on is the target function's bug, told at once with a clear message."""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

import pytest

from hipq import Throttled


def test_good_arguments_are_kept() -> None:
    exc = Throttled(retry_after=2, usage=MappingProxyType({"cost": 812, "requests": 1.5}))
    assert (exc.retry_after, exc.usage) == (2.0, {"cost": 812, "requests": 1.5})
    assert exc.error() == {"detail": "throttled by the target (hipq.Throttled)",
                           "retry_after": 2.0, "usage": {"cost": 812, "requests": 1.5}}
    assert Throttled("quota").error() == {"detail": "quota"}
    assert Throttled(retry_after=0, usage={}).error()["retry_after"] == 0.0
    assert Throttled(retry_after=1e300).retry_after == 1e300  # finite: capped when applied
    assert str(Throttled("slow down")) == "slow down"
    assert "retry_after=3.0" in repr(Throttled(retry_after=3))


@pytest.mark.parametrize("value", ["2", b"2", True, [2], object()])
def test_retry_after_of_another_type_is_a_type_error(value: Any) -> None:
    with pytest.raises(TypeError, match="retry_after must be a number of seconds or None"):
        Throttled(retry_after=value)


@pytest.mark.parametrize("value", [-1, -0.5, math.nan, math.inf, -math.inf, 10 ** 400])
def test_retry_after_not_finite_or_negative_is_a_value_error(value: Any) -> None:
    with pytest.raises(ValueError, match="retry_after"):
        Throttled(retry_after=value)


@pytest.mark.parametrize(("usage", "error", "words"), [
    ([("cost", 1)], TypeError, "usage must be a mapping"),
    ("cost", TypeError, "usage must be a mapping"),
    ({1: 2}, TypeError, "usage names must be str"),
    ({"cost": "812"}, TypeError, r"usage\['cost'\] must be a number"),
    ({"cost": None}, TypeError, r"usage\['cost'\] must be a number"),
    ({"cost": True}, TypeError, r"usage\['cost'\] must be a number"),
    ({"cost": math.nan}, ValueError, "must be finite"),
    ({"cost": math.inf}, ValueError, "must be finite"),
    ({"cost": -1}, ValueError, ">= 0"),
    ({"cost": 2 ** 63}, ValueError, "within 64 bits"),
])
def test_a_bad_usage_is_refused(usage: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        Throttled(usage=usage)


def test_the_seconds_given_as_the_detail_are_refused() -> None:
    with pytest.raises(TypeError, match="retry_after="):
        Throttled(2.0)  # type: ignore[arg-type]
