"""The buckets a launch takes from, and the rate learned from refusals that say
nothing (hipq.partners.buckets, hipq.partners.learning): pure, on a moved clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipq.partners.buckets import Limit, Reported, Window, more_exact
from hipq.partners.headers import ReportedBucket
from hipq.partners.learning import BETA, K_SECONDS, CubicRate, LaunchRate

T0 = datetime(2026, 12, 2, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_window_fills_then_frees_as_launches_leave_it() -> None:
    w = Window(Limit("requests", 3, 10))
    for s in (0, 1, 2):
        assert w.room_at(1, at(s)) == at(s)
        w.take(1, at(s))
    assert w.room_at(1, at(3)) == at(10)  # the launch at 0 leaves the window at 10
    assert w.used(at(10)) == 2
    assert w.room_at(2, at(10)) == at(11)


def test_cost_is_reserved_then_settled() -> None:
    w = Window(Limit("cost", 100, 60))
    first = w.take(80, at(0))
    assert w.room_at(30, at(1)) == at(60)
    w.settle(first, 50)  # used less: the rest comes back at once
    assert w.room_at(30, at(1)) == at(1)
    second = w.take(30, at(1))
    w.settle(second, 70)  # used more: it takes it
    assert w.used(at(2)) == 120
    assert w.room_at(1, at(2)) == at(60)
    assert w.room_at(1, at(60)) == at(60)  # the first launch's 50 left the window
    assert w.room_at(40, at(60)) == at(61)


def test_settling_after_the_window_passed_changes_nothing() -> None:
    w = Window(Limit("cost", 10, 5))
    taken = w.take(10, at(0))
    assert w.used(at(6)) == 0
    w.settle(taken, 1000)
    assert w.used(at(6)) == 0


def test_a_launch_bigger_than_the_bucket_goes_alone_when_it_is_empty() -> None:
    w = Window(Limit("cost", 10, 5))
    assert w.room_at(50, at(0)) == at(0)
    w.take(50, at(0))
    assert w.room_at(1, at(1)) == at(5)


@given(st.lists(st.tuples(st.floats(0, 3), st.floats(0.1, 40)), min_size=1, max_size=80),
       st.floats(1, 100), st.floats(0.5, 30))
def test_no_window_of_the_limits_length_ever_holds_more_than_the_limit(
        launches: list[tuple[float, float]], amount: float, per: float) -> None:
    """Launches that each wait for room (at most the bucket's size each) never put
    more than the limit in any window, as a partner counting any way would see."""
    w = Window(Limit("cost", amount, per))
    now = T0
    done: list[tuple[datetime, float]] = []
    for gap, cost in launches:
        cost = min(cost, amount)
        now = w.room_at(cost, now + timedelta(seconds=gap))
        w.take(cost, now)
        done.append((now, cost))
    for start, _ in done:
        inside = sum(c for when, c in done if start <= when < start + timedelta(seconds=per))
        assert inside <= amount + 1e-6


def test_a_reported_count_lower_than_ours_wins_until_its_reset() -> None:
    report = Reported(ReportedBucket("requests", "requests", 2, at(30)), at(0))
    assert report.room_at(1, at(0)) == at(0)
    report.take(1)
    report.take(1)
    assert report.room_at(1, at(1)) == at(30)
    assert report.room(at(30)) == float("inf")


def test_a_token_bucket_report_refills_linearly_until_it_is_full() -> None:
    report = Reported(ReportedBucket("tokens", "cost", 0, at(60), limit=6000, refills=True),
                      at(0))
    assert report.room(at(30)) == pytest.approx(3000)
    assert report.room_at(1500, at(0)) == at(15)
    report.take(3000)
    assert report.room(at(30)) == pytest.approx(0)


def test_a_new_report_replaces_the_old_one_only_when_it_leaves_less_room() -> None:
    old = Reported(ReportedBucket("requests", "requests", 5, at(30)), at(0))
    assert not more_exact(old, ReportedBucket("requests", "requests", 9, at(30)), at(1))
    assert more_exact(old, ReportedBucket("requests", "requests", 1, at(30)), at(1))
    assert more_exact(old, ReportedBucket("requests", "requests", 9, at(60)), at(31))
    assert more_exact(None, ReportedBucket("requests", "requests", 9, at(60)), at(0))


# -- learning ------------------------------------------------------------------------


def test_nothing_is_learned_before_a_refusal() -> None:
    assert CubicRate().rate(at(0)) is None


def test_a_refusal_cuts_the_measured_rate_then_the_curve_climbs_back() -> None:
    learned = CubicRate()
    assert learned.refused(at(10), launched_at=at(9.9), measured=100.0)
    assert learned.rate(at(10)) == pytest.approx(100 * BETA)
    mid = learned.rate(at(10 + K_SECONDS / 2))
    assert mid is not None
    assert 100 * BETA < mid < 100
    assert learned.rate(at(10 + K_SECONDS)) == pytest.approx(100)
    # it stays near the refused rate longest: the last 10% takes longer than the first
    assert learned.rate(at(10 + K_SECONDS * 0.9)) == pytest.approx(100 - 30 * 0.001, rel=0.01)
    above = learned.rate(at(10 + 2 * K_SECONDS))
    assert above is not None
    assert above > 100


def test_refusals_of_tries_launched_before_the_last_decrease_count_once() -> None:
    learned = CubicRate()
    assert learned.refused(at(10), launched_at=at(9), measured=100.0)
    assert not learned.refused(at(10.05), launched_at=at(9.5), measured=100.0)
    assert not learned.refused(at(10.1), launched_at=at(10), measured=100.0)
    assert learned.refused(at(11), launched_at=at(10.5), measured=80.0)
    # the curve was at 84.6 a second, hipq launched 80: the cut is from 80
    assert learned.rate(at(11)) == pytest.approx(80 * BETA)


def test_the_learned_rate_is_forgotten_when_refusals_stop() -> None:
    learned = CubicRate()
    learned.refused(at(0), launched_at=at(0), measured=50.0)
    learned.forget_if_stale(at(10))
    assert learned.w_max == 50.0
    learned.forget_if_stale(at(60))
    assert learned.w_max is None
    assert learned.rate(at(60)) is None


def test_converging_on_a_partner_that_accepts_100_a_second() -> None:
    """A simulated partner that admits 100 a second with a burst of 10 (a token
    bucket, as nginx's limit_req with burst=10 nodelay) and refuses the rest, with no
    header: from an unlimited start at 1,000 a second, after the first 10 s the
    learned rate gets at least 85% of the capacity accepted and refusals stay under
    5% of the launches."""
    learned, measured = CubicRate(), LaunchRate()
    step = 0.01
    accepted = refused = sent = 0
    budget, tokens = 0.0, 10.0
    for i in range(int(70 / step)):
        now = at(i * step)
        tokens = min(tokens + 100 * step, 10.0)
        rate = learned.rate(now)
        budget += (1000.0 if rate is None else rate) * step
        count = int(budget)
        budget -= count
        if not count:
            continue
        measured.launched(now, count)
        ok = min(count, int(tokens))
        tokens -= ok
        if i * step >= 10:
            sent += count
            accepted += ok
            refused += count - ok
        if count > ok:  # the refusal is heard one round trip (50 ms) later
            learned.refused(now + timedelta(seconds=0.05), launched_at=now,
                            measured=measured.per_second(now))
    assert accepted >= 0.85 * 100 * 60
    assert refused <= 0.05 * sent
