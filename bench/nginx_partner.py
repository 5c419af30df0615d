"""A partner no one here wrote: nginx's ``limit_req`` (or ``limit_conn``) in front of
a small backend, as users put it in front of their APIs.

The backend is ``hipq.downstream.partner`` with no limits of its own (``--latency``
seconds a launch, sync mode: it answers 200 after the latency); nginx admits what
its zone allows and refuses the rest with a bare 429 (no ``Retry-After``, no
rate-limit header: nginx sends none). What nginx accepted and refused is read from
its access log (one line per request: status), and what reached the backend from
the backend's own stats.

    async with NginxPartner.start(rate=100, burst=10) as partner:
        ...  # launch to partner.url
        counts = partner.counts()   # {"accepted": n, "refused": n, "log": [(t, status)]}

Needs Debian's ``nginx-light`` (``/usr/sbin/nginx``; ``scripts/test`` installs it).
Runs as the current user with every path in a temporary folder, on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from hipq.downstream.partner import PartnerProcess

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

CONFIG = """\
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format partner '$msec $status';
    access_log {dir}/access.log partner;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    limit_req_zone $server_name zone=partner:1m rate={rate}r/s;
    limit_conn_zone $server_name zone=conns:1m;
    limit_req_status 429;
    limit_conn_status 429;
    upstream backend {{ server {backend}; keepalive 128; }}
    server {{
        listen 127.0.0.1:{port};
        server_name partner;
        location / {{
            {limit}
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def available() -> bool:
    return Path(NGINX).exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class NginxPartner:
    url: str
    folder: Path
    process: asyncio.subprocess.Process
    backend: PartnerProcess

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, *, rate: int | None = 100, burst: int = 10,
                    connections: int | None = None,
                    latency: float = 0.05) -> AsyncIterator[NginxPartner]:
        """nginx with ``limit_req`` at ``rate``/s (``burst``, delayed as nginx does
        without ``nodelay``) or, with ``connections``, ``limit_conn`` at that many
        requests at once instead."""
        with tempfile.TemporaryDirectory(prefix="hipq-nginx-") as tmp:
            folder = Path(tmp)
            async with await PartnerProcess.start("--latency", str(latency)) as backend:
                port = _free_port()
                limit = (f"limit_conn conns {connections};" if connections is not None
                         else f"limit_req zone=partner burst={burst};")
                (folder / "nginx.conf").write_text(CONFIG.format(
                    dir=folder, rate=rate or 1, port=port, limit=limit,
                    backend=backend.url.removeprefix("http://")), encoding="utf-8")
                process = await asyncio.create_subprocess_exec(
                    NGINX, "-p", str(folder), "-c", str(folder / "nginx.conf"),
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE)
                try:
                    await _wait_listening(port, process)
                    yield cls(f"http://127.0.0.1:{port}", folder, process, backend)
                finally:
                    if process.returncode is None:
                        process.terminate()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(process.wait(), 10)
                    if process.returncode is None:
                        process.kill()
                        await process.wait()

    def log(self) -> list[tuple[float, int]]:
        """(epoch time, status) of every request nginx answered, in order."""
        path = self.folder / "access.log"
        if not path.exists():
            return []
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            at, _, status = line.partition(" ")
            with contextlib.suppress(ValueError):
                out.append((float(at), int(status)))
        return out

    def counts(self, *, after: float | None = None) -> dict[str, int]:
        """Accepted (2xx) and refused (429) requests, those answered after the epoch
        time ``after`` only when given."""
        rows = [(t, s) for t, s in self.log() if after is None or t >= after]
        return {"accepted": sum(1 for _, s in rows if 200 <= s < 300),
                "refused": sum(1 for _, s in rows if s == 429),
                "other": sum(1 for _, s in rows if not (200 <= s < 300 or s == 429))}


async def _wait_listening(port: int, process: asyncio.subprocess.Process) -> None:
    for _ in range(200):
        if process.returncode is not None:
            assert process.stderr is not None
            err = (await process.stderr.read()).decode(errors="replace")
            raise RuntimeError(f"nginx exited {process.returncode}: {err}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise RuntimeError("nginx did not listen within 10 s")
