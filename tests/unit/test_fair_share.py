from hipq.engine.leases import fair_share, timing_warnings


def test_fair_share() -> None:
    assert fair_share(9, 3) == 3
    assert fair_share(10, 3) == 4
    assert fair_share(2, 4) == 1
    assert fair_share(0, 2) == 0
    assert fair_share(5, 0) == 5  # not registered yet: all of them


def test_timing_warnings() -> None:
    assert timing_warnings(interval_seconds=5, lease_seconds=30) == []
    assert len(timing_warnings(interval_seconds=0.1, lease_seconds=0.5)) == 1
    assert len(timing_warnings(interval_seconds=60, lease_seconds=30)) == 1
