"""hipq.frozen: generated construction behaves like the dataclass's own."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from hipq.frozen import evolver, quick_init, reader


@quick_init
@dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    label: str = field(default="p", kw_only=True)


def test_quick_init_keeps_signature_defaults_and_frozenness() -> None:
    p = Point(1, 2, label="a")
    assert (p.x, p.y, p.tags, p.label) == (1, 2, [], "a")
    assert Point(1).tags is not Point(1).tags  # a fresh default per instance
    assert Point(x=3) == Point(3, 0, [], label="p")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Point(1, 2, [], "positional label")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Point(1, bogus=2)  # type: ignore[call-arg]


def test_evolver_copies_every_other_field() -> None:
    p = Point(1, 2, ["t"], label="a")
    q = evolver(Point, ("y", "label"))(p, 5, "b")
    assert q == Point(1, 5, ["t"], label="b")
    assert q.tags is p.tags  # a shallow copy, like dataclasses.replace
    assert p == Point(1, 2, ["t"], label="a")
    with pytest.raises(TypeError, match="no field 'z'"):
        evolver(Point, ("z",))


def test_reader_maps_columns_by_position() -> None:
    read = reader(Point, ["other", "y", "x"], {"x": int})
    p = read(("ignored", 7, "3"))
    assert p == Point(3, 7, label="p")
    with pytest.raises(TypeError, match="no default"):
        reader(Point, ["y"])


def test_quick_init_needs_slots() -> None:
    @dataclass(frozen=True)
    class Loose:
        x: int

    with pytest.raises(TypeError, match="slots"):
        quick_init(Loose)


def test_instances_are_built_as_a_plain_class_then_become_the_frozen_one() -> None:
    """The fast path (hipq.frozen's builder): what is made is an ordinary instance
    of the class, frozen, equal and hashing as one made field by field."""
    made = [Point(1, 2, ["t"], label="a"), evolver(Point, ("y",))(Point(1), 2),
            reader(Point, ["x", "y"])((1, 2))]
    for p in made:
        assert type(p) is Point
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.y = 9  # type: ignore[misc]
    assert made[1] == made[2] == Point(1, 2)


@quick_init
@dataclass(frozen=True, slots=True)
class Pair:
    a: int
    b: str = "b"


class Tagged(Pair):
    """A subclass with slots of its own (another layout): made through the fields'
    descriptors, and stays a Tagged."""

    __slots__ = ("tag",)


def test_a_subclass_instance_keeps_its_class() -> None:
    t = Tagged(1, "x")
    assert type(t) is Tagged
    assert (t.a, t.b) == (1, "x")
    assert Pair(1) == Pair(1, "b")
    assert hash(Pair(1)) == hash(Pair(1, "b"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.a = 2  # type: ignore[misc]
