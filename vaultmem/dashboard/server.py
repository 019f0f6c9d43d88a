"""``vaultmem dashboard``: the page and its JSON, served on 127.0.0.1 to whoever holds the token.

Owns the HTTP side: a standard-library ``ThreadingHTTPServer`` bound to loopback, a random token per
run (in the URL printed at start; the first request with it sets a cookie so the page's own requests
carry it; ``POST`` also needs it in a header, which another site cannot send), a ``Host`` check
against DNS rebinding, a strict Content-Security-Policy on every response, the routes onto
``Panels``, the vault's Markdown files as plain text, and a background runner that works the queue
after a request when no watch daemon runs. Never prints: the CLI says where it is.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import secrets
import sys
import threading
import traceback
from collections.abc import Callable
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from vaultmem import daemonstate
from vaultmem.dashboard import page
from vaultmem.dashboard.panels import Panels, file_under
from vaultmem.embed import Embedder
from vaultmem.errors import InvalidInput, NodeNotFound, ReadOnlyVault, VaultError
from vaultmem.vault import Vault

TOKEN_HEADER = "X-Vaultmem-Token"
REFUSED = b"forbidden: open the address `vaultmem dashboard` printed (it carries this run's token)\n"
STORAGE_POLL_S = 5.0


class Dashboard:
    """A running dashboard for one open vault. ``start()`` serves on a thread (tests, the CLI's
    ``serve_forever`` blocks); ``close()`` stops it and its helpers."""

    def __init__(
        self,
        vault: Vault,
        *,
        port: int = 0,
        read_only: bool = False,
        run_queue: bool = True,
        embedder: Embedder | None = None,
        token: str | None = None,
    ) -> None:
        self.panels = Panels(vault, actions=not read_only)
        self.token = token or secrets.token_urlsafe(24)
        self.run_queue = run_queue
        self._embedder = embedder
        self._stop = threading.Event()
        self._kick = threading.Event()
        self._runner: threading.Thread | None = None
        self._helpers: list[threading.Thread] = []
        self.httpd = _Server(("127.0.0.1", port), _handler(self))
        self.port = int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    @property
    def cookie(self) -> str:
        return f"vaultmem_{self.port}"

    def start(self) -> Dashboard:
        self._start_helpers()
        thread = threading.Thread(target=self.httpd.serve_forever, name="dashboard-http", daemon=True)
        thread.start()
        self._helpers.append(thread)
        return self

    def __enter__(self) -> Dashboard:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def serve_forever(self) -> None:
        self._start_helpers()
        try:
            self.httpd.serve_forever()
        finally:
            self.close()

    def close(self) -> None:
        self._stop.set()
        self._kick.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        for thread in self._helpers:
            if thread is not threading.current_thread():
                thread.join(timeout=30)

    # -- helpers ----------------------------------------------------------------------------------------
    def _start_helpers(self) -> None:
        storage = threading.Thread(target=self._measure, name="dashboard-storage", daemon=True)
        storage.start()
        self._helpers.append(storage)

    def _measure(self) -> None:
        """The storage figures walk every file: kept off the request path, refreshed now and then."""
        while not self._stop.is_set():
            if self.panels.storage_due():
                with contextlib.suppress(OSError):  # a file vanished mid-walk: the next round counts
                    self.panels.measure_storage()
            self._stop.wait(STORAGE_POLL_S)

    def kick(self) -> None:
        """Work the queue after a request, unless a watch daemon does (it polls the queue itself)."""
        if not self.run_queue or daemonstate.is_running(self.panels.vault.layout):
            return
        self._kick.set()
        if self._runner is None or not self._runner.is_alive():
            self._runner = threading.Thread(target=self._run_queue, name="dashboard-queue", daemon=True)
            self._runner.start()
            self._helpers.append(self._runner)

    def _run_queue(self) -> None:
        runner = self.panels.runner
        while self._kick.is_set() and not self._stop.is_set():
            self._kick.clear()
            runner.update(running=True)
            try:
                with Vault.open(self.panels.vault.layout.root, embedder=self._embedder) as vault:
                    report = vault.work()
                runner.update(last=f"ran {report.jobs_done} jobs ({report.jobs_failed} failed)", error=None)
                if report.operations:
                    runner.update(operations=report.operations[-5:])
            except VaultError as exc:
                runner.update(error=str(exc))
            finally:
                runner.update(running=False)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    errors: tuple[str, ...] = ()  # the last unexpected errors (replaced, never mutated in place)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that closed its connection mid-reply is not news; anything else is kept (the
        library never prints) for whoever runs the server to read."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            return
        self.errors = (*self.errors[-19:], f"{type(exc).__name__}: {exc}")


def _handler(dash: Dashboard) -> type[BaseHTTPRequestHandler]:
    panels = dash.panels

    def number(params: dict[str, str], key: str, default: int) -> int:
        try:
            return int(params.get(key) or default)
        except ValueError:
            raise InvalidInput(f"{key} must be a whole number") from None

    routes: dict[str, Callable[[dict[str, str]], Any]] = {
        "status": lambda q: panels.status(),
        "metrics": lambda q: panels.metrics(),
        "graph": lambda q: panels.graph(number(q, "limit", 300), number(q, "min_weight", 1)),
        "topic": lambda q: panels.topic(q.get("key", "")),
        "topics": lambda q: panels.topic_names(),
        "heatmap": lambda q: panels.heatmap(q.get("source") or None, q.get("last") or None),
        "search": lambda q: panels.search(
            q.get("q", ""),
            q.get("scope") or "all",
            q.get("since") or None,
            q.get("until") or None,
            number(q, "limit", 20),
        ),
        "children": lambda q: panels.children(
            q.get("node") or None, q.get("source") or None, number(q, "offset", 0), number(q, "limit", 100)
        ),
        "day": lambda q: panels.day(q.get("day") or None),
        "review": lambda q: panels.review(),
    }

    class Handler(BaseHTTPRequestHandler):
        server_version = "vaultmem"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the library never prints

        # -- access ---------------------------------------------------------------------------------
        def _host_ok(self) -> bool:
            host = (self.headers.get("Host") or "").lower()
            return host in (f"127.0.0.1:{dash.port}", f"localhost:{dash.port}")

        def _token_ok(self, query: dict[str, str], *, header_only: bool = False) -> bool:
            offered = [self.headers.get(TOKEN_HEADER) or ""]
            if not header_only:
                offered.append(query.get("token", ""))
                cookie = SimpleCookie(self.headers.get("Cookie") or "")
                if dash.cookie in cookie:
                    offered.append(cookie[dash.cookie].value)
            return any(hmac.compare_digest(o.encode(), dash.token.encode()) for o in offered if o)

        def _refuse(self) -> None:
            self._send(HTTPStatus.FORBIDDEN, REFUSED, "text/plain; charset=utf-8")

        # -- verbs ----------------------------------------------------------------------------------
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if not self._host_ok() or not self._token_ok(query):
                self._refuse()
                return
            path = url.path
            if path == "/" and "token" in query:
                # Trade the token in the address for a cookie, and drop it from the address bar.
                self.send_response(HTTPStatus.SEE_OTHER)
                self.send_header("Location", "/")
                self.send_header(
                    "Set-Cookie", f"{dash.cookie}={dash.token}; Path=/; HttpOnly; SameSite=Strict"
                )
                self._common_headers()
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if path == "/":
                self._send(HTTPStatus.OK, page.served(dash.token), "text/html; charset=utf-8")
            elif path.startswith("/static/") and path[len("/static/") :] in page.ASSETS:
                name = path[len("/static/") :]
                self._send(HTTPStatus.OK, page.asset(name), page.ASSETS[name], cache=True)
            elif path.startswith("/api/") and path[len("/api/") :] in routes:
                self._json(lambda: routes[path[len("/api/") :]](query))
            elif path.startswith("/file/"):
                self._file(unquote(path[len("/file/") :]))
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            if not self._host_ok() or not self._token_ok({}, header_only=True):
                self._refuse()
                return
            try:
                length = min(int(self.headers.get("Content-Length") or 0), 65536)
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = None
            if not isinstance(body, dict):
                self._send(HTTPStatus.BAD_REQUEST, b"a JSON object, please\n", "text/plain; charset=utf-8")
                return

            def run(action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
                result = action()
                dash.kick()
                return result

            if url.path == "/api/ingest":
                self._json(lambda: run(lambda: panels.request_ingest(str(body.get("source", "")))))
            elif url.path == "/api/compact":
                self._json(lambda: run(panels.request_compact))
            elif url.path == "/api/review":
                key, decision = str(body.get("key", "")), str(body.get("decision", ""))
                self._json(lambda: panels.decide(key, decision))
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

        def do_HEAD(self) -> None:
            self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"", "text/plain; charset=utf-8")

        # -- responses ------------------------------------------------------------------------------
        def _json(self, produce: Callable[[], Any]) -> None:
            try:
                data, status = produce(), HTTPStatus.OK
            except (InvalidInput, NodeNotFound) as exc:
                data, status = {"error": str(exc)}, HTTPStatus.BAD_REQUEST
            except ReadOnlyVault as exc:
                data, status = {"error": str(exc)}, HTTPStatus.FORBIDDEN
            except VaultError as exc:
                data, status = {"error": str(exc)}, HTTPStatus.CONFLICT
            except Exception as exc:  # a bug: say so in the response (the library never prints), keep serving
                data = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=4)}
                status = HTTPStatus.INTERNAL_SERVER_ERROR
            body = json.dumps(data, ensure_ascii=False, default=str).encode("utf-8")
            self._send(status, body, "application/json; charset=utf-8")

        def _file(self, rel: str) -> None:
            path = file_under(panels.vault.layout.root, rel)
            if path is None:
                self._send(HTTPStatus.NOT_FOUND, b"no such file in the vault\n", "text/plain; charset=utf-8")
                return
            # Plain text in a sandbox: a file's content is memory, never a page of this origin.
            self._send(HTTPStatus.OK, path.read_bytes(), "text/plain; charset=utf-8", sandbox=True)

        def _common_headers(self, *, sandbox: bool = False) -> None:
            csp = "sandbox; default-src 'none'" if sandbox else page.SERVED_CSP
            self.send_header("Content-Security-Policy", csp)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("X-Frame-Options", "DENY")
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Resource-Policy", "same-origin")

        def _send(
            self, status: HTTPStatus, body: bytes, ctype: str, *, cache: bool = False, sandbox: bool = False
        ) -> None:
            self.send_response(status)
            self._common_headers(sandbox=sandbox)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "private, max-age=3600" if cache else "no-store")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    return Handler
