"""List pages bounded in items and in bytes (docs/security.md: "list pages are
bounded in items and bytes"), read from the store in chunks so a page of large items
is never all in memory at once: the first chunk is small, the next ones sized by the
items seen so far (at most :data:`FETCH_CHUNK`). Used by the archived-jobs, the
live-jobs and the unmatched-responses listings; each gives its own read, rendering
and keyset cursor."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

PAGE_BYTES = 4 * 1024 * 1024  # a list page stops growing past this many bytes of JSON
FETCH_CHUNK = 50  # items read from the store at a time, at most
FIRST_CHUNK = 8  # items of the first read (their size sizes the next reads)

Item = TypeVar("Item")
Key = TypeVar("Key")


async def collect_page(read: Callable[[int, Key | None], Awaitable[Sequence[Item]]],
                       render: Callable[[Item], str], key_of: Callable[[Item], Key | None],
                       *, limit: int, after: Key | None
                       ) -> tuple[list[str], Sequence[Item], bool]:
    """At most ``limit`` items rendered as JSON texts, and about :data:`PAGE_BYTES`
    of them (at least one); ``read(n, after)`` returns up to ``n`` items after the
    key ``after``. Returns the texts, the last item put on the page, and whether
    more items follow it."""
    page: list[str] = []
    last: Item | None = None
    size, more, full = 0, True, False
    while more and not full and len(page) < limit:
        want = min(limit - len(page), _chunk(len(page), size))
        items = await read(want + 1, after)
        more = len(items) > want
        for item in items[:want]:
            text = render(item)
            length = len(text.encode())  # bytes, not characters: UTF-8 takes up to 4
            if page and size + length > PAGE_BYTES:
                more = full = True
                break
            page.append(text)
            size += length
            last = item
        key = None if last is None else key_of(last)
        if key is not None:
            after = key
    return page, () if last is None else (last,), more


def _chunk(count: int, size: int) -> int:
    """How many items to read next: enough to fill the page at the average size so far."""
    if count == 0:
        return FIRST_CHUNK
    return max(1, min(FETCH_CHUNK, (PAGE_BYTES - size) * count // max(size, 1) + 1))
