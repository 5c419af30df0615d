"""Responses: how outcomes come back, and how they find their job.

State model. Every response, whatever its source (a signed HTTP callback, the
rickover status callback, ``/v1/inbox`` with a response template, a Kafka
message, an immediate launch outcome), is first written to the **response inbox**
(``response_inbox``), and only then acknowledged (HTTP 202, Kafka commit). The
inbox is authoritative; the reconcile loop of the queue's owner applies pending
rows to its running jobs at step 0 and marks each row ``applied``, ``duplicate``,
``stale``, ``late`` (recorded on the job's history) or, after
``responses.buffer_seconds`` without a job, ``unmatched``.

Who checks what. ``signing`` issues and checks the per-attempt callback URLs (no
token needed, nothing forgeable); ``correlation`` turns requests and responses
into keys (templates or a plugin). :meth:`hipq.service.Hipq.report_callback`
refuses a response for an attempt older than the job's latest (409, nothing
written) and stores an identical repeat of a final response once.

Failure modes: a crash after the insert and before the acknowledgement makes the
sender retry; the repeat is a duplicate and is applied at most once.
"""
