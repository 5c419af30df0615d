"""Whom an API connection counts against, and the caps (issue 46, finding 6): an IPv4
address, an IPv6 address's /64 (one host picks from a whole /64), an IPv4 address
mapped in IPv6 as itself; a refused connection is counted nowhere."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hipq.api.connections import ConnectionGate, peer_of


class _Transport(asyncio.BaseTransport):
    def __init__(self, peer: Any) -> None:
        super().__init__()
        self._peer = peer

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peer if name == "peername" else default


@pytest.mark.parametrize(("peer", "counted_as"), [
    (("192.0.2.7", 50000), "192.0.2.7"),
    (("2001:db8:1:2:aaaa::1", 50000, 0, 0), "2001:db8:1:2::/64"),
    (("2001:db8:1:2:ffff:ffff:ffff:ffff", 1, 0, 0), "2001:db8:1:2::/64"),
    (("fe80::1%eth0", 1, 0, 2), "fe80::/64"),
    (("::ffff:192.0.2.7", 1, 0, 0), "192.0.2.7"),
    ("/run/hipq.sock", "/run/hipq.sock"),
    (None, "None"),
])
def test_the_peer_a_connection_counts_against(peer: Any, counted_as: str) -> None:
    assert peer_of(_Transport(peer)) == counted_as


def test_the_caps_in_all_and_per_peer() -> None:
    gate = ConnectionGate(total=3, per_peer=2)
    assert gate.admit("a")
    assert gate.admit("a")
    assert not gate.admit("a")  # its third
    assert gate.admit("b")
    assert not gate.admit("c")  # the fourth in all
    assert gate.open == 3
    gate.release("a")
    assert gate.admit("c")
    assert not gate.admit("c")
    assert gate.open == 3
    for peer in ("a", "b", "c"):
        gate.release(peer)
    assert gate.open == 0
