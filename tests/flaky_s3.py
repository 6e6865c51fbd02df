"""A flaky S3 endpoint for fault tests: an HTTP proxy on 127.0.0.1 in front of a real S3 server (moto's).

Each request is forwarded to the upstream server, or meets one fault, drawn from the proxy's seed:

- ``drop``: the connection is reset before the request is forwarded (the request never arrived);
- ``lost``: the request is forwarded, then the connection is reset before the answer (it was done, the
  client cannot know): only for idempotent methods (GET, HEAD, PUT, DELETE), as S3's own multipart POSTs
  are not safe to repeat on any network;
- ``truncate``: a GET answer is cut after half its body (a connection dropped mid-download);
- ``slowdown`` / ``unavailable``: an S3 XML error with status 503, code ``SlowDown`` or ``ServiceUnavailable``;
- ``delay``: a wait of up to ``max_delay_s`` before the request is forwarded.

The draw is deterministic per request, not per arrival order: it hashes the seed, the method, the path
and query, and how many times this same request was seen before, so concurrent clients get the same
faults run after run. The ``max_faults_in_a_row``-th repeat of a request always passes, so every request
eventually succeeds, as on a real flaky network. ``deny`` names buckets that answer 403 ``AccessDenied`` to
everything (a permanent error); a test may add to it while the proxy runs.

The proxy is bounded: it refuses to serve more than ``max_requests`` requests (answering 503 with code
``ProxyExhausted``) and stops by itself after ``lifetime_s`` seconds.
"""

from __future__ import annotations

import collections
import hashlib
import http.client
import random
import socket
import struct
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ("drop", "lost", "truncate", "slowdown", "unavailable", "delay")
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers", "upgrade"}
)


@dataclass(frozen=True)
class FaultPlan:
    """How often each fault happens (fractions of requests; they add up to at most 1)."""

    drop: float = 0.05
    lost: float = 0.03
    truncate: float = 0.05
    slowdown: float = 0.05
    unavailable: float = 0.03
    delay: float = 0.1
    max_delay_s: float = 0.2
    max_faults_in_a_row: int = 2

    def __post_init__(self) -> None:
        total = sum(getattr(self, name) for name in FAULTS)
        if not 0 <= total <= 1:
            raise ValueError(f"fault fractions add up to {total}, not within [0, 1]")

    def draw(self, seed: int, method: str, target: str, seen: int) -> str | None:
        """The fault (or None) of the ``seen``-th repeat of ``method target``.

        >>> plan = FaultPlan(drop=0.5, lost=0, truncate=0, slowdown=0, unavailable=0, delay=0)
        >>> [plan.draw(7, "GET", "/b/k", n) for n in range(4)] == [plan.draw(7, "GET", "/b/k", n) for n in range(4)]
        True
        >>> plan.draw(7, "GET", "/b/k", 2) is None  # the third try of a request always passes
        True
        """
        if seen >= self.max_faults_in_a_row:
            return None
        digest = hashlib.sha256(f"{seed}\0{method}\0{target}\0{seen}".encode()).digest()
        x = struct.unpack(">Q", digest[:8])[0] / 2**64
        for name in FAULTS:
            share = getattr(self, name)
            if x < share:
                return self._applicable(name, method)
            x -= share
        return None

    @staticmethod
    def _applicable(name: str, method: str) -> str | None:
        if name == "lost" and method not in IDEMPOTENT:
            return "drop"
        if name == "truncate" and method != "GET":
            return None
        return name


@dataclass
class FlakyS3Proxy:
    """A flaky HTTP proxy on 127.0.0.1 in front of ``upstream`` (``http://127.0.0.1:PORT``); see the module."""

    upstream: str
    seed: int = 0
    plan: FaultPlan = field(default_factory=FaultPlan)
    deny: set[str] = field(default_factory=set)
    max_requests: int = 20_000
    lifetime_s: float = 600.0
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    _seen: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    _last_fault: dict[tuple[str, str], str | None] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.upstream)
        if parsed.hostname != "127.0.0.1" or parsed.scheme != "http":
            raise ValueError(f"upstream {self.upstream!r} must be http://127.0.0.1:PORT (loopback only)")
        self._upstream = (parsed.hostname, parsed.port or 80)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="flaky-s3", daemon=True)
        self._timer = threading.Timer(self.lifetime_s, self.stop)
        self._timer.daemon = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FlakyS3Proxy:
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    def stats(self) -> dict[str, int]:
        """Requests seen, forwarded, and met by each fault; ``retried``: requests that repeated one whose last
        try had met a fault other than a delay (the same method, path, query and byte range: a client's retry)."""
        with self._lock:
            return {"requests": 0, "forwarded": 0, "retried": 0, **{f: 0 for f in FAULTS}, **self.counts}

    def decide(self, method: str, target: str) -> str | None:
        """Count the request and draw its fault (``exhausted`` past ``max_requests``, ``deny`` for a denied bucket).

        ``target`` names the request: its path and query, and the byte range of a ranged read."""
        bucket = urllib.parse.urlsplit(target).path.lstrip("/").split("/", 1)[0]
        with self._lock:
            self.counts["requests"] += 1
            if self.counts["requests"] > self.max_requests:
                return "exhausted"
            if bucket in self.deny:
                self.counts["deny"] += 1
                return "deny"
            key = (method, target)
            seen = self._seen[key]
            self._seen[key] += 1
            if self._last_fault.get(key) not in (None, "delay"):
                self.counts["retried"] += 1
            fault = self.plan.draw(self.seed, method, target, seen)
            self._last_fault[key] = fault
            if fault is not None:
                self.counts[fault] += 1
            return fault

    def forward(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes):  # type: ignore[no-untyped-def]
        """Send the request upstream; (status, reason, headers, body) of its answer."""
        conn = http.client.HTTPConnection(*self._upstream, timeout=60)
        try:
            conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            conn.endheaders(body or None)
            answer = conn.getresponse()
            data = answer.read()
            with self._lock:
                self.counts["forwarded"] += 1
            return answer.status, answer.reason, answer.getheaders(), data
        finally:
            conn.close()


def _error_xml(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>flaky</RequestId></Error>"
    ).encode()


def _handler(proxy: FlakyS3Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients pool their connections

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                return self._chunked_raw()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _chunked_raw(self) -> bytes:
            """The chunked body as sent (forwarded as is, with its Transfer-Encoding header)."""
            raw = bytearray()
            while True:
                line = self.rfile.readline()
                raw += line
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while (trailer := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                        raw += trailer
                    raw += b"\r\n"
                    return bytes(raw)
                raw += self.rfile.read(size + 2)

        def _reset(self) -> None:
            """Close the connection with a TCP reset, no answer."""
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

        def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes, *, cut: bool = False) -> None:
            self.send_response_only(status)
            for name, value in headers:
                if name.lower() not in _HOP_BY_HOP | {"transfer-encoding", "content-length", "date", "server"}:
                    self.send_header(name, value)
            length = next((v for n, v in headers if n.lower() == "content-length"), None)
            self.send_header("Content-Length", length if self.command == "HEAD" and length else str(len(body)))
            self.end_headers()
            if self.command == "HEAD":
                return
            if cut:
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self._reset()
                return
            self.wfile.write(body)

        def _error(self, status: int, code: str, message: str) -> None:
            self._answer(status, [("Content-Type", "application/xml")], _error_xml(code, message))

        def _serve(self) -> None:
            body = self._body()
            fault = proxy.decide(self.command, f"{self.path} {self.headers.get('Range', '')}".strip())
            if fault == "exhausted":
                return self._error(503, "ProxyExhausted", "the flaky proxy served its max_requests")
            if fault == "deny":
                return self._error(403, "AccessDenied", "Access Denied")
            if fault == "drop":
                return self._reset()
            if fault == "slowdown":
                return self._error(503, "SlowDown", "Please reduce your request rate.")
            if fault == "unavailable":
                return self._error(503, "ServiceUnavailable", "Service is unable to handle request.")
            if fault == "delay":
                time.sleep(random.Random(f"{proxy.seed}:{self.path}").uniform(0, proxy.plan.max_delay_s))
            # Expect: 100-continue was answered here already; the body goes upstream in one piece.
            headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP | {"expect"}]
            status, _, answer_headers, data = proxy.forward(self.command, self.path, headers, body)
            if fault == "lost":
                return self._reset()
            self._answer(status, answer_headers, data, cut=fault == "truncate" and len(data) > 1)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _serve

    return Handler


@contextmanager
def flaky_s3(upstream: str, **kwargs: object) -> Iterator[FlakyS3Proxy]:
    """A started :class:`FlakyS3Proxy` in front of ``upstream``, stopped on exit."""
    proxy = FlakyS3Proxy(upstream, **kwargs).start()  # type: ignore[arg-type]
    try:
        yield proxy
    finally:
        proxy.stop()
