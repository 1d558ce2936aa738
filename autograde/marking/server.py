"""The marking page over HTTP: three static files and a small JSON API, on 127.0.0.1 by default.

Routes (every ``/api/`` request carries the session's token in ``X-Marking-Token``)::

    GET  /                        the page (static/mark.html), /static/mark.js, /static/mark.css
    GET  /api/lab                 the lab, its questions, rubrics and progress (MarkingApp.summary)
    GET  /api/answers?question=Q  every answer to question Q (<notebook>/<grade_id>), marks, claims
    GET  /api/history?question=Q&answer=A   every version of one answer's mark
    POST /api/claim   {question, answer, grader}                     claim or renew (409: someone else's)
    POST /api/release {question, answer, grader}                     give the claim up
    POST /api/marks   {question, answer, grader, criteria, adjustment, comment, expected_version, reason}
                                                                     save a mark (409: a conflict)

What keeps it safe to run on a shared machine and to point at a class's answers:

- the token: a random secret printed in the URL's fragment (``#token=...``, which browsers never send
  to a server or put in a Referer), checked in constant time on every API request, so no other local
  user or web page can read answers or write marks;
- the Host header must name this server when it listens on a loopback address (a web page that
  rebinds its own DNS name to 127.0.0.1 cannot reach the API);
- POSTs must be ``application/json`` and at most 64 KB (no form from another site can post here);
- every response forbids scripts, styles and images from anywhere but this server, and any frame
  (Content-Security-Policy), and sniffing (``nosniff``); the page builds every student answer, id and
  comment with ``textContent``, never as HTML, and loads nothing from elsewhere: it works offline.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from autograde.marking.service import MarkingApp, MarkingError

STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC_FILES = {
    "/": ("mark.html", "text/html; charset=utf-8"),
    "/static/mark.js": ("mark.js", "text/javascript; charset=utf-8"),
    "/static/mark.css": ("mark.css", "text/css; charset=utf-8"),
}
MAX_BODY_BYTES = 64 * 1024
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _host_name(header: str) -> str:
    """The host of a Host header, without its port (``[::1]:8000`` -> ``[::1]``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class MarkingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, app: MarkingApp, host: str = "127.0.0.1", port: int = 0, token: str | None = None):
        self.app = app
        self.token = token or secrets.token_urlsafe(24)
        super().__init__((host, port), MarkingHandler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        """The address to open, token included (in the fragment: it never travels to the server)."""
        host = self.server_address[0]
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}/#token={self.token}"

    def loopback_only(self) -> bool:
        return self.server_address[0] in ("127.0.0.1", "::1") or self.server_address[0].startswith("127.")

    def start(self) -> threading.Thread:
        """Serve in a background thread (tests, and `course mark` while it waits for Ctrl-C)."""
        # A short poll: shutdown() waits for it (tests start and stop many servers).
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, name="course-mark",
                                  daemon=True)
        thread.start()
        return thread


class MarkingHandler(BaseHTTPRequestHandler):
    server: MarkingServer
    server_version = "course-mark"
    sys_version = ""

    def log_message(self, format, *args):   # noqa: A002 - the base class's name
        pass   # one line per request would bury the command's own output; errors reach the page

    # ---------------------------------------------------------------------------- routing

    def do_GET(self):
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        if url.path == "/favicon.ico":     # browsers ask for it; there is none, and a 404 would be a console error
            return self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        if url.path in STATIC_FILES:
            name, content_type = STATIC_FILES[url.path]
            return self._send(HTTPStatus.OK, (STATIC_DIR / name).read_bytes(), content_type)
        if not url.path.startswith("/api/"):
            return self._error(HTTPStatus.NOT_FOUND, f"no page {url.path}")
        if not self._token_ok():
            return
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        app = self.server.app
        routes = {
            "/api/lab": lambda: app.summary(),
            "/api/answers": lambda: app.answers(query.get("question", "")),
            "/api/history": lambda: {"history": app.history(query.get("question", ""), query.get("answer", ""))},
        }
        self._call(routes.get(url.path))

    def do_POST(self):
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        if not url.path.startswith("/api/"):
            return self._error(HTTPStatus.NOT_FOUND, f"no page {url.path}")
        if not self._token_ok():
            return
        body = self._json_body()
        if body is None:
            return
        app = self.server.app
        question, answer, grader = body.get("question"), body.get("answer"), body.get("grader")
        routes = {
            "/api/claim": lambda: app.claim(question, answer, grader),
            "/api/release": lambda: app.release(question, answer, grader),
            "/api/marks": lambda: app.save(question, answer, grader, criteria=body.get("criteria", {}),
                                           adjustment=body.get("adjustment", 0.0), comment=body.get("comment", ""),
                                           expected_version=body.get("expected_version"),
                                           reason=body.get("reason", "")),
        }
        self._call(routes.get(url.path))

    def _call(self, route):
        if route is None:
            return self._error(HTTPStatus.NOT_FOUND, f"no API route {urlsplit(self.path).path}")
        try:
            result = route()
        except MarkingError as error:
            return self._send_json(error.status, {"error": error.message, **error.details})
        except Exception as error:   # a bug must not kill the server a TA is grading with
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"the server failed: {type(error).__name__}: {error}")
        self._send_json(HTTPStatus.OK, result)

    # ---------------------------------------------------------------------------- checks

    def _host_ok(self) -> bool:
        if not self.server.loopback_only():
            return True
        if _host_name(self.headers.get("Host") or "") in LOOPBACK_HOSTS:
            return True
        self._error(HTTPStatus.MISDIRECTED_REQUEST, "this server answers only requests addressed to 127.0.0.1")
        return False

    def _token_ok(self) -> bool:
        given = self.headers.get("X-Marking-Token", "")
        if given and hmac.compare_digest(given.encode(), self.server.token.encode()):
            return True
        self._error(HTTPStatus.UNAUTHORIZED, "missing or wrong token: open the address `course mark` printed "
                                             "(the part after #token= is the key)")
        return False

    def _json_body(self) -> dict | None:
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            self._error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send JSON (Content-Type: application/json)")
            return None
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a request body must be 0 to {MAX_BODY_BYTES} bytes")
            return None
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except (ValueError, UnicodeDecodeError):
            self._error(HTTPStatus.BAD_REQUEST, "the body is not valid JSON")
            return None
        if not isinstance(body, dict):
            self._error(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
            return None
        return body

    # ---------------------------------------------------------------------------- answering

    def _error(self, status, message: str):
        self._send_json(status, {"error": message})

    def _send_json(self, status, payload):
        self._send(status, json.dumps(payload).encode("utf-8"), "application/json")

    def _send(self, status, data: bytes, content_type: str):
        self.send_response(int(status))
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
