"""The stored form of a group pause's value (issue 46, finding 5): bounded, shown
cut, and exact: two different values never share a pause, whatever they share."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from hipq.pause_scope import KEPT_CHARS, MAX_CHARS, group_of, shown_group

LONG = "k" * 900_000


def test_a_short_value_is_its_own_group() -> None:
    for value in ("", "tenant-1", "x" * KEPT_CHARS, "é" * KEPT_CHARS):
        assert group_of(value) == value


def test_a_long_value_is_its_start_and_its_digest() -> None:
    group = group_of(LONG + "A")
    digest = hashlib.sha256((LONG + "A").encode()).hexdigest()
    assert group.startswith("k" * KEPT_CHARS)
    assert group.endswith(digest)
    assert KEPT_CHARS < len(group) <= MAX_CHARS
    assert group_of(LONG + "A") == group  # the same value, the same group
    assert group_of(LONG + "B") != group  # the same start, another group


def test_a_long_value_never_takes_a_short_values_group() -> None:
    forged = group_of(LONG)  # a producer may send exactly this text as a value
    assert len(forged) > KEPT_CHARS  # so it is itself long: hashed again, elsewhere
    assert group_of(forged) != forged


def test_a_lone_surrogate_is_hashed_too() -> None:
    assert len(group_of("\ud800" * 200)) <= MAX_CHARS


@given(st.text(max_size=300), st.text(max_size=300))
def test_distinct_values_have_distinct_groups(a: str, b: str) -> None:
    assert len(group_of(a)) <= MAX_CHARS
    assert (group_of(a) == group_of(b)) == (a == b)


def test_what_is_shown() -> None:
    assert shown_group(None) is None
    assert shown_group("eu") == "eu"
    assert shown_group(group_of(LONG)) == group_of(LONG)  # bounded already
    old = "v" * 5_000  # a row stored whole before the bound: shown cut
    assert shown_group(old) == "v" * KEPT_CHARS + "…"
