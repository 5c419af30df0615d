"""Jobs the batch let go, read back when a tick needs them (docs/internals.md,
"The batch").

A try that waits through a tick lets its job go: what a tick reads of it is on
its :class:`~hipq.engine.held.HeldTry`, and a waiting try then costs a few hundred
bytes instead of its whole job (``bench/batch_memory.py``: 1,665 against 380
bytes). A try that ends within its first tick (a Python target, a quick callback)
never lets its job go. Three things need a job back, and this module is the only
place that reads one:

* **a failed try's retry strategy** gets the job (:meth:`JobsOnDemand.for_retries`,
  before step 3 decides);
* **a queue whose quota field is new to the batch**: the weights by value are
  counted from the jobs' data (:meth:`JobsOnDemand.usage`);
* **a queue with a plugin throttler** reads ``ctx.running``: its tries keep their
  jobs from then on (:meth:`JobsOnDemand.usage`).

Each is one read by primary key per queue, of the tries that need it (a plan:
:mod:`hipq.engine.requests`). A job read back at another attempt, or for a try gone
meanwhile, is ignored.
"""

from __future__ import annotations

from collections.abc import Sequence

from hipq.engine.batch import Batch
from hipq.engine.held import HeldTry
from hipq.engine.requests import Plan, call
from hipq.jobs import JobState
from hipq.spec import QueueSpec
from hipq.throttling import RunningUsage


class JobsOnDemand:
    def __init__(self, batch: Batch) -> None:
        self.batch = batch

    def usage(self, spec: QueueSpec) -> Plan[RunningUsage]:
        """What the queue's waiting tries hold, their jobs read back first where the
        counts or the throttler need them."""
        path = spec.quotas.field if spec.quotas is not None else None
        self.batch.keep_jobs(spec.id, spec.custom_throttler)
        yield from self._read(spec.id, self.batch.wants_jobs(spec.id, path))
        return self.batch.usage(spec.id, path)

    def for_retries(self, changed: Sequence[HeldTry]) -> Plan[None]:
        """The jobs of the failed tries among ``changed`` that let theirs go."""
        wanted: dict[str, list[str]] = {}
        failed = JobState.FAILED
        for held in changed:
            if held.job is None and held.outcome is not None and held.outcome.status is failed:
                wanted.setdefault(held.queue, []).append(held.id)
        for queue, ids in wanted.items():
            yield from self._read(queue, ids)

    def _read(self, queue: str, ids: Sequence[str]) -> Plan[None]:
        if ids:
            self.batch.attach(queue, (yield call("job_load_running", queue=queue, ids=ids)))
