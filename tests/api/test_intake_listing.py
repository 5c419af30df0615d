"""The intake's read side (docs/from-your-database.md), on SQLite and PostgreSQL: ``GET
/v1/intake?status=rejected`` (newest first, paged by cursor without gaps or repeats,
filtered by queue, values cut, bad parameters 422 and bad cursors 400, readers may
list, nobody without a token), the intake in ``/v1/stats`` and the queue JSON, the
metrics ``hipq_intake_pending`` and ``hipq_intake_rejected_total``, and ``hipq intake``.
A live daemon rejects rows by the enqueue rules end to end; the other tests serve
the API alone, so the rows stay as the test puts them."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hipq import intake
from hipq.api import intake_page, paging
from hipq.cli import main
from hipq.metrics import INTAKE_OTHER_QUEUES, OTHER_QUEUE, intake_by_label
from tests.api.conftest import PRODUCER, READER, Api, LiveFactory
from tests.api.intake_kit import Bare, at, bare_api, insert_rejected, produce


async def _until(probe: Callable[[], Awaitable[Any]], within: float = 15.0) -> Any:
    deadline = time.monotonic() + within
    while not (value := await probe()):
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)  # polling the API; there is no event to wait on
    return value


async def _get(api: Api, path: str, token: str | None = READER) -> Any:
    status, body = await api.call("GET", path, token=token)
    assert status == 200, body
    return body


async def _pages(api: Api, query: str) -> list[dict[str, Any]]:
    """Every row ``GET /v1/intake?<query>`` pages through."""
    rows: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(1000):
        page = await _get(api, f"/v1/intake?{query}" + (f"&cursor={cursor}" if cursor else ""))
        assert set(page) == {"rows", "next_cursor"}
        rows += page["rows"]
        cursor = page["next_cursor"]
        if cursor is None:
            return rows
    raise AssertionError("pagination never ended")


def _metric(text: str, name: str, queue: str) -> float | None:
    found = re.search(rf'^{name}\{{queue="{re.escape(queue)}"\}} (\S+)$', text, re.MULTILINE)
    return None if found is None else float(found.group(1))


async def _metrics(api: Api) -> str:
    status, text = await api.call("GET", "/metrics")
    assert status == 200
    return str(text)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


# -- end to end: a daemon rejects rows by the enqueue rules --------------------------------


async def test_rows_the_daemon_rejects_are_listed_counted_and_measured(
        live: LiveFactory, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(intake, "ORPHAN_GRACE", timedelta(seconds=0))
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", {"id": "orders", "attempts": 1}))[0] == 201
    await produce(db_url, "orders", [("o1", {"v": 1}), ("o1", {"v": 2}), ("..", {})])
    await produce(db_url, "ordres", [("o2", {"v": 3})])  # a typo: no such queue

    async def rejected() -> bool:
        return bool((await _get(api, "/v1/stats"))["intake"]["rejected"] == 3)

    await _until(rejected)
    stats = await _get(api, "/v1/stats")
    assert stats["intake"] == {"pending": 0, "rejected": 3}
    assert [(q["queue"], q["intake"]) for q in stats["queues"]] == [("orders", 0)]
    assert (await api.job("orders", "o1"))["data"] == {"v": 1}  # the conflict changed nothing

    page = await _get(api, "/v1/intake?status=rejected")
    assert page["next_cursor"] is None
    rows = {(r["queue"], r["id"]): r for r in page["rows"]}
    assert set(rows) == {("orders", "o1"), ("orders", ".."), ("ordres", "o2")}
    assert rows[("orders", "o1")]["error"].startswith("conflict")
    assert rows[("orders", "o1")]["data"] == {"v": 2}  # as the producer wrote it
    assert "invalid id" in rows[("orders", "..")]["error"]
    assert rows[("ordres", "o2")]["error"] == "unknown queue 'ordres'"
    stamps = [r["rejected_at"] for r in page["rows"]]
    assert stamps == sorted(stamps, reverse=True)  # newest first
    assert all(r["truncated"] == [] and r["enqueued_at"] for r in page["rows"])
    assert await _get(api, "/v1/intake") == page  # status: rejected by default
    only = await _get(api, "/v1/intake?status=rejected&queue=ordres")
    assert [r["id"] for r in only["rows"]] == ["o2"]

    text = await _metrics(api)
    assert _metric(text, "hipq_intake_rejected_total", "orders") == 2
    assert _metric(text, "hipq_intake_rejected_total", "ordres") == 1
    assert _metric(text, "hipq_intake_pending", "orders") == 0
    assert "# TYPE hipq_intake_rejected_total counter" in text

    config = tmp_path / "cli.yaml"
    config.write_text(f"database:\n  url: {db_url}\n")
    table = await asyncio.to_thread(_cli, capsys, "intake", "--rejected", "-c", str(config))
    assert table.splitlines()[0].split() == ["rejected_at", "queue", "id", "error"]
    assert "unknown queue 'ordres'" in table
    lines = await asyncio.to_thread(_cli, capsys, "intake", "--rejected", "--queue", "orders",
                                    "--json", "-c", str(config))
    listed = [json.loads(line) for line in lines.splitlines()]
    assert sorted(r["id"] for r in listed) == ["..", "o1"]
    counts = await asyncio.to_thread(_cli, capsys, "intake", "--json", "-c", str(config))
    assert json.loads(counts) == {"intake": {"pending": 0, "rejected": 3}, "queues": [
        {"queue": "orders", "pending": 0, "rejected": 2},
        {"queue": "ordres", "pending": 0, "rejected": 1}]}


# -- the API alone ---------------------------------------------------------------------------


@pytest.fixture
async def bare(db_url: str) -> Any:
    async with bare_api(db_url) as served:
        yield served


async def test_pending_rows_are_counted_per_queue_and_in_all(
        bare: Bare, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    api = bare.api
    for queue in ("orders", "mail"):
        assert (await api.call("POST", "/v1/jobs", {"id": queue, "attempts": 1}))[0] == 201
    await produce(bare.db_url, "orders", [("o1", None), ("o2", {"k": 1})])
    await produce(bare.db_url, "nowhere", [("x", None)])
    await insert_rejected(bare.store, [{"queue": "mail", "job_id": "..", "enqueued_at": at(0),
                                        "error": "invalid id", "rejected_at": at(1)}])

    stats = await _get(api, "/v1/stats")
    assert stats["intake"] == {"pending": 3, "rejected": 1}
    assert {q["queue"]: q["intake"] for q in stats["queues"]} == {"mail": 0, "orders": 2}
    assert (await _get(api, "/v1/jobs/orders"))["stats"]["intake"] == 2
    listed = await _get(api, "/v1/jobs")
    assert {q["id"]: q["stats"]["intake"] for q in listed["queues"]} == {"mail": 0, "orders": 2}
    assert (await _get(api, "/v1/jobs/orders/o2"))["status"] == "queued"  # found in the intake

    text = await _metrics(api)
    assert _metric(text, "hipq_intake_pending", "orders") == 2
    assert _metric(text, "hipq_intake_pending", "mail") == 0
    assert _metric(text, "hipq_intake_pending", "nowhere") == 1
    assert _metric(text, "hipq_intake_rejected_total", "mail") == 1
    assert _metric(text, "hipq_intake_rejected_total", "orders") == 0

    config = tmp_path / "cli.yaml"
    config.write_text(f"database:\n  url: {bare.db_url}\n")
    table = await asyncio.to_thread(_cli, capsys, "intake", "-c", str(config))
    assert [line.split() for line in table.splitlines()] == [
        ["queue", "pending", "rejected"], ["mail", "0", "1"], ["nowhere", "1", "0"],
        ["orders", "2", "0"]]
    none = await asyncio.to_thread(_cli, capsys, "intake", "--rejected", "--queue", "orders",
                                   "-c", str(config))
    assert none.splitlines()[-1] == "(no rejected rows)"


async def test_rejected_rows_page_newest_first_without_gaps_or_repeats(bare: Bare) -> None:
    api = bare.api
    assert await _get(api, "/v1/intake?status=rejected") == {"rows": [], "next_cursor": None}
    rows = [{"queue": "ab"[i % 2], "job_id": f"j{i}", "data": {"n": i}, "enqueued_at": at(0),
             "error": f"error {i}", "rejected_at": at(1 + i // 3)} for i in range(11)]
    await insert_rejected(bare.store, rows)  # three rows share each rejected_at: ids decide
    newest_first = [f"j{i}" for i in reversed(range(11))]

    first = await _get(api, "/v1/intake?status=rejected&limit=100")
    assert [r["id"] for r in first["rows"]] == newest_first
    assert first["next_cursor"] is None
    row = first["rows"][-1]
    assert row == {"intake_id": row["intake_id"], "queue": "a", "id": "j0", "data": {"n": 0},
                   "run_after": None, "fields": {}, "enqueued_at": "2030-01-01T00:00:00Z",
                   "error": "error 0", "rejected_at": "2030-01-01T00:00:01Z", "truncated": []}
    for limit in (1, 2, 3, 4):
        paged = await _pages(api, f"status=rejected&limit={limit}")
        assert [r["id"] for r in paged] == newest_first
    only_b = await _pages(api, "status=rejected&queue=b&limit=2")
    assert [r["id"] for r in only_b] == [f"j{i}" for i in reversed(range(1, 11, 2))]
    assert (await _get(api, "/v1/intake?queue=c"))["rows"] == []


async def test_large_values_are_cut_and_pages_stay_bounded(
        bare: Bare, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paging, "PAGE_BYTES", 30_000)
    cut = intake_page.VALUE_CHARS
    big = {"blob": "x" * 20_000}
    deep: Any = {}
    for _ in range(200):  # deeper than any enqueue allows (64): rejected, still shown
        deep = {"d": deep}
    await insert_rejected(bare.store, [
        {"queue": "q", "job_id": "i" * 10_000, "data": big, "fields": {"priority": 1},
         "enqueued_at": at(0), "error": "e" * 9_000, "rejected_at": at(1)},
        {"queue": "q", "job_id": "deep", "data": deep, "enqueued_at": at(0),
         "error": "data nested too deep", "rejected_at": at(2)},
        *({"queue": "q", "job_id": f"big{i}", "data": big, "enqueued_at": at(0),
           "error": "too large", "rejected_at": at(3)} for i in range(5))])

    rows = await _pages(bare.api, "status=rejected&limit=1000")
    assert len(rows) == 7
    huge = rows[-1]
    assert huge["truncated"] == ["id", "data", "error"]
    assert (len(huge["id"]), len(huge["error"])) == (cut, cut)
    assert len(huge["data"]) == cut  # the stored JSON text, cut by the database
    assert huge["data"].replace(" ", "").startswith('{"blob":"xxx')
    assert huge["fields"] == {"priority": 1}
    assert rows[-2]["id"] == "deep"
    assert rows[-2]["data"] == deep
    async with bare.api.session.get(bare.api.base + "/v1/intake?limit=1000", headers={
            "Authorization": f"Bearer {READER}"}) as answer:
        first = await answer.read()
    assert len(first) < 30_000 + 2 * cut  # a page stops growing past PAGE_BYTES


@pytest.mark.parametrize(("query", "status", "code"), [
    ("status=pending", 422, "invalid_request"),
    ("status=", 422, "invalid_request"),
    ("limit=0", 422, "invalid_request"),
    ("limit=1001", 422, "invalid_request"),
    ("limit=ten", 422, "invalid_request"),
    ("queue=", 422, "invalid_request"),
    ("colour=red", 422, "invalid_request"),
    ("queue=%00", 422, "invalid_request"),
    ("cursor=nonsense", 400, "invalid_cursor"),
    ("cursor=W10", 400, "invalid_cursor"),  # an old (base64) cursor: "[]"
    ("cursor=WyIyMDMwLTAxLTAxVDAwOjAwOjAwIiwxXQ", 400, "invalid_cursor"),  # old format
    ("cursor=" + "A" * 501, 422, "invalid_request"),  # over the published maxLength
    ("cursor=W10=", 400, "invalid_cursor"),
    ("cursor=%C3%A9", 400, "invalid_cursor"),
    ("cursor=5", 400, "invalid_cursor"),  # <microseconds>~<row id>: both needed
    ("cursor=5~", 400, "invalid_cursor"),
    ("cursor=5~-1", 400, "invalid_cursor"),
    ("cursor=5~1~2", 400, "invalid_cursor"),
    ("cursor=1234567890123456789~1", 400, "invalid_cursor"),  # 19 digits
    ("cursor=5%7E1%00", 422, "invalid_request"),  # NUL: refused as in any query value
    ("queue=" + "q" * 201, 422, "invalid_request"),
])
async def test_bad_parameters_are_refused(bare: Bare, query: str, status: int,
                                          code: str) -> None:
    answer, body = await bare.api.call("GET", f"/v1/intake?{query}", token=READER)
    assert answer == status, body
    assert body["error"]["code"] == code


async def test_every_role_may_list_and_nobody_without_a_token(bare: Bare) -> None:
    for token in (READER, PRODUCER):
        assert (await bare.api.call("GET", "/v1/intake", token=token))[0] == 200
    assert (await bare.api.call("GET", "/v1/intake", token=None))[0] == 401
    assert (await bare.api.call("GET", "/v1/intake", token="wrong-token"))[0] == 401
    assert (await bare.api.call("POST", "/v1/intake", {}, token=READER))[0] == 405


async def test_the_route_is_documented_with_its_constraints(bare: Bare) -> None:
    doc = await _get(bare.api, "/openapi.json", token=None)
    op = doc["paths"]["/v1/intake"]["get"]
    params = {p["name"]: p["schema"] for p in op["parameters"]}
    assert params["status"] == {"const": "rejected", "default": "rejected",
                                "description": params["status"]["description"],
                                "title": "Status", "type": "string"}
    assert (params["limit"]["minimum"], params["limit"]["maximum"]) == (1, 1000)
    assert params["cursor"]["pattern"] == r"^[0-9]{1,18}~[0-9]{1,18}$"  # <µs>~<row id>
    assert params["cursor"]["anyOf"][0]["maxLength"] == 500
    assert params["queue"]["anyOf"][0]["maxLength"] == 200
    assert {"200", "400", "401", "403", "422"} <= set(op["responses"])
    page = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert page.endswith("/IntakePageOut")


# -- the metric's labels -----------------------------------------------------------------------


def test_unknown_queues_get_a_bounded_number_of_labels() -> None:
    counts = {f"typo-{i:03d}": (1, 2) for i in range(INTAKE_OTHER_QUEUES + 5)}
    counts |= {"orders": (3, 0), "bad queue!": (0, 7)}
    labels = intake_by_label(["orders", "mail"], counts)
    assert labels["orders"] == (3, 0)
    assert labels["mail"] == (0, 0)
    named = [q for q in labels if q.startswith("typo-")]
    assert named == [f"typo-{i:03d}" for i in range(INTAKE_OTHER_QUEUES)]
    assert labels[OTHER_QUEUE] == (5, 10 + 7)
    assert len(labels) == 2 + INTAKE_OTHER_QUEUES + 1
    assert sum(p for p, _ in labels.values()) == sum(p for p, _ in counts.values())
