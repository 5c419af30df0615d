"""What a tick's plan asks for, and what it gets back (docs/internals.md, "The tick").

The plan (:mod:`hipq.engine.plan` and the parts it delegates to) is made of
generators: each yields a request, the executor (:mod:`hipq.engine.executor`) runs
it and sends the answer back, or throws the error in (as httpx's ``auth_flow``
yields requests and receives responses). Nothing here runs anything; every request
is a frozen record, so a test drives a plan by hand with answers of its own.

* :class:`Call`: one store method, by name, with its keyword arguments;
* :class:`Together`: independent requests or plans, answered together;
* :class:`ReadDue`: step 1, a queue's due candidates;
* :class:`RunInTick` / :class:`ArchiveRan` / :class:`HandOn`: step 4's in-tick
  launch mode (:mod:`hipq.engine.inline`): run tries now, archive the ones that
  succeeded (claim and end in one store call), hand the others' answers to the
  launcher;
* :class:`Launch`: step 5, sends in the background;
* :class:`TakeAnswers`: what launches said since the last tick;
* :class:`Collect`: archives written behind earlier, now counted;
* :class:`Moved`: jobs that moved through the hot table (its vacuum counts them);
* :class:`Alone`: a plan that runs alone among the plans of its kind (the leases).

How each runs, and what runs beside what, is the executor's stage table, never the
plan's business.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from hipq.engine.decide import Fetch
from hipq.jobs import Job
from hipq.spec import QueueSpec
from hipq.store.records import Change
from hipq.targets.interface import Target

T = TypeVar("T")
# a plan giving a T: it yields requests and receives their answers
Plan = Generator[Any, Any, T]


@dataclass(frozen=True, slots=True)
class Call:
    """A store method (:class:`hipq.store.base.Store`), run now; the plan gets its
    answer, or its error thrown in."""

    method: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


def call(method: str, *args: Any, **kwargs: Any) -> Call:
    return Call(method, args, kwargs)


@dataclass(frozen=True, slots=True)
class Together:
    """Requests or plans that do not depend on each other; their answers, in order.
    If any fails, the first error is thrown in once all have ended."""

    parts: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class ReadDue:
    """Step 1: a queue's due candidates, by the reads of ``fetches``
    (:func:`hipq.engine.decide.plan_fetch`), merged in plan order, each job once."""

    spec: QueueSpec
    fetches: tuple[Fetch, ...]
    now: datetime
    widen: bool = False


@dataclass(frozen=True, slots=True)
class RunInTick:
    """Step 4, in-tick launch mode: send ``tries`` (:func:`hipq.engine.inline.try_of`)
    through ``target`` now, ``concurrency`` at a time, and wait for their answers at
    most ``wait`` seconds. Answered with an :class:`InTickRun`."""

    target: Target
    tries: Sequence[Job]
    wait: float
    concurrency: int


@dataclass(slots=True)
class InTickRun:
    """What an in-tick run gave: the answers within the wait (``LaunchResult``s, in
    the order they came), the tries started and not answered (their answers go to the
    launcher), and the tries not started."""

    answered: list[Any] = field(default_factory=list)
    unanswered: list[Job] = field(default_factory=list)
    unstarted: list[Job] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ArchiveRan:
    """Claim and archive, in one store call, the tries that succeeded within their
    tick (``ends``, ARCHIVE changes at the claim's attempt). ``next_page``: more is
    due (the page was full), and this is the queue's next read; ``ran``: the
    candidates of the page, in the order read, that ran. Answered with an
    :class:`Archived`."""

    spec: QueueSpec
    ends: Sequence[Change]
    owner: str
    now: datetime
    next_page: ReadDue | None = None
    ran: Sequence[Job] = ()


@dataclass(frozen=True, slots=True)
class Archived:
    """``applied``: the (queue, id) of the ends archived, as far as this tick knows
    (all of them while their statements are written behind); ``done``: the ends whose
    archive is known to have applied now (this one's, or an earlier one of the queue
    collected first); ``writing``: ends left to be written behind."""

    applied: frozenset[tuple[str, str]]
    done: Sequence[Change] = ()
    writing: int = 0


@dataclass(frozen=True, slots=True)
class HandOn:
    """Answers of an in-tick run that go the usual way: the launcher records them as
    if it had sent the tries after their claim."""

    results: Sequence[Any]


@dataclass(frozen=True, slots=True)
class Launch:
    """Step 5: send these (target, job) in the background."""

    launches: Sequence[tuple[Target, Job]]


@dataclass(frozen=True, slots=True)
class TakeAnswers:
    """What launches said since the last tick; ``releasing``: the queues being handed
    over, of which the answer tells those with every launch recorded."""

    releasing: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Answers:
    spent: Sequence[tuple[Job, Any]]  # accepted launches whose budget is spent
    outcomes: Sequence[Any]  # LaunchResults of outcomes given at once, and failures
    idle: frozenset[str] = frozenset()  # of ``releasing``: every launch recorded
    reports: Sequence[tuple[Job, Any]] = ()  # accepted launches' rate-limit headers


@dataclass(frozen=True, slots=True)
class Collect:
    """The archives written behind that are in (their ends that applied):
    ``queues``' ones, or (None) every one started before this tick."""

    queues: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Moved:
    """``count`` jobs were claimed or ended: the hot table's vacuum counts them
    (:mod:`hipq.engine.maintenance`)."""

    count: int


@dataclass(frozen=True, slots=True)
class Alone:
    """Run ``plan`` alone among the plans of ``kind`` (the leases: a renewal on the
    lease timer may come while a tick runs); its answer."""

    kind: str
    plan: Plan[Any]
