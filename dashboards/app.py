"""The Dash application: :func:`create_app` serves the runs it is given, and only those.

Every response goes through :class:`_Guard`, a WSGI middleware that refuses requests
whose ``Host`` header is not one the server answers to (DNS rebinding: a page of
``evil.example`` whose name now resolves to 127.0.0.1 would otherwise read the traces),
and adds the security headers, the Content-Security-Policy and a ``Server`` header
without versions.

Transfer: Dash serves its JavaScript (plotly.js is about 4.8 MB of it) from the installed
packages; :func:`serve_compact` compresses every text answer (brotli or gzip, through
flask-compress when it is installed), keeps the compressed JavaScript in memory, and lets
the browser keep the fingerprinted bundles for a year (their URL changes with the version)
while it revalidates the few unversioned ones (plotly.js, Dash's lazy chunks) by ETag.

First load: the page's layout is built once and kept (:class:`_PageOnce`), the index
preloads plotly.js and the Graph's chunk (:data:`PRELOADED`), and :func:`warm_up` builds the
page and the first run's tabs in the background once the runs are analysed.  Evaluating
plotly.js (about 1.5 s of the browser's main thread on a 2-core machine) is then most of a
cold load; benchmarks/README.md has the breakdown.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import dash

from perfscope.dashboards import callbacks, layout
from perfscope.dashboards.data import Analyze, DashboardData

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
SERVER_NAME = "perfscope"
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
# The strictest policy under which the page works (tests/integration/test_dashboard_browser.py
# fails on any violation): scripts only from this server plus Dash's one inline start-up
# script by its hash; styles also inline, because plotly.js and the dropdowns insert
# <style> elements at run time; images also as data: URLs (plotly draws heatmaps that way).
_CSP = ("default-src 'none'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'")


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """Return the host names a server bound to ``bound`` answers to (lower case, IPv6
    without brackets): ``bound`` itself, the loopback names when it is loopback, and
    ``extra`` (``--allow-host``).

    A wildcard address (``0.0.0.0``, ``::``) is never in a Host header: for it, the
    machine's names are allowed (and :class:`_Guard` takes any IP address, which no other
    site can make a browser send).
    """
    names = {_bare(bound)} | {_bare(n) for n in extra}
    if _is_loopback(bound):
        names |= LOOPBACK_NAMES
    if _is_wildcard(bound):
        names |= LOOPBACK_NAMES | {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset(names)


def _bare(name: str) -> str:
    return name.strip().lower().removeprefix("[").removesuffix("]")


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(_bare(name))
    except ValueError:
        return None


def _is_loopback(name: str) -> bool:
    ip = _ip(name)
    return _bare(name) == "localhost" or (ip is not None and ip.is_loopback)


def _is_wildcard(name: str) -> bool:
    ip = _ip(name)
    return ip is not None and ip.is_unspecified


def split_host(header: str) -> tuple[str, int | None] | None:
    """``"[::1]:8050"`` -> ``("::1", 8050)``; ``"localhost"`` -> ``("localhost", None)``;
    None when the header is not a host with an optional decimal port."""
    name, port = header, None
    if header.startswith("["):
        end = header.find("]")
        if end < 0:
            return None
        name, rest = header[1:end], header[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    elif header.count(":") == 1:
        name, port_text = header.split(":")
    elif ":" in header:
        return None  # an IPv6 address must be bracketed
    else:
        port_text = None
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5):
            return None
        port = int(port_text)
    return (name.lower(), port) if name else None


class _Guard:
    """WSGI middleware: refuse a request for another host; add the headers every response carries.

    The Host must name an allowed host (:func:`allowed_hosts`) and, for the bound address
    and the loopback names, the port the server listens on (``SERVER_PORT``); a name given
    with ``--allow-host`` may come with any port (a reverse proxy serves it on its own).
    """

    def __init__(self, app: Callable[..., Any], names: Collection[str], extra: Collection[str],
                 wildcard: bool, headers: dict[str, str]) -> None:
        self.app, self.names, self.extra, self.wildcard = app, frozenset(names), frozenset(extra), wildcard
        self.headers = [*headers.items(), ("Server", SERVER_NAME)]

    def host_ok(self, environ: dict[str, Any]) -> bool:
        """True when the request's Host header names this server."""
        parsed = split_host(environ.get("HTTP_HOST", ""))
        if parsed is None:
            return False
        name, port = parsed
        if name in self.extra:
            return True
        if name not in self.names and not (self.wildcard and _ip(name) is not None):
            return False
        default = 443 if environ.get("wsgi.url_scheme") == "https" else 80
        return str(default if port is None else port) == str(environ.get("SERVER_PORT"))

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def respond(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            mine = {k.lower() for k, _ in self.headers}
            kept = [(k, v) for k, v in headers if k.lower() not in mine]
            return start_response(status, kept + self.headers, exc_info)

        if not self.host_ok(environ):
            body = (b"perfscope dashboard: this Host is not served here; open the address the dashboard "
                    b"printed, or start it with --allow-host NAME\n")
            respond("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8"),
                                      ("Content-Length", str(len(body)))])
            return [body]
        return self.app(environ, respond)


# Dash's fingerprinted bundles (``name.v4_4_1m1796293616.js``): the URL names the version.
_ASSETS = "/_dash-component-suites/"
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"


class _AssetCache:
    """flask-compress's cache: the compressed bytes of Dash's JavaScript files, by algorithm
    and path (a fixed, small set of files, so the dict stays bounded).  Every other answer
    (layouts, callbacks) gets an empty key from :func:`_asset_key` and is never stored."""

    def __init__(self) -> None:
        self._store: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self._store.get(key)

    def set(self, key: str, value: bytes) -> None:
        if not key.endswith(";"):
            self._store[key] = value


def _asset_key(request: Any) -> str:
    return str(request.path) if str(request.path).startswith(_ASSETS) else ""


def serve_compact(server: Any) -> bool:
    """Compress ``server``'s (the Flask app's) text answers and set cache lifetimes.

    Returns:
        True when answers are compressed (flask-compress is installed; it is in the
        ``dashboard`` extra), False when only the cache headers are set.
    """
    @server.after_request
    def _cache_headers(response: Any) -> Any:
        from flask import request

        if request.path.startswith(_ASSETS) and response.status_code in (200, 304):
            fingerprinted = response.cache_control.max_age is not None  # Dash sets it for them only
            response.headers["Cache-Control"] = IMMUTABLE if fingerprinted else REVALIDATE
        return response

    try:
        from flask_compress import Compress
    except ImportError:
        return False
    server.config.update(COMPRESS_ALGORITHM=["br", "gzip"], COMPRESS_LEVEL=6, COMPRESS_BR_LEVEL=5,
                         COMPRESS_MIN_SIZE=500, COMPRESS_CACHE_BACKEND=_AssetCache, COMPRESS_CACHE_KEY=_asset_key,
                         COMPRESS_MIMETYPES=["text/html", "text/css", "text/plain", "application/javascript",
                                             "text/javascript", "application/json", "image/svg+xml",
                                             "image/x-icon", "image/vnd.microsoft.icon"])
    Compress(server)
    return True


def request_handler() -> type:
    """Return werkzeug's request handler class without its version banner (werkzeug adds
    ``Server: Werkzeug/x Python/y`` to the answers it writes itself, such as a 400 for a
    malformed request line); pass it as ``request_handler`` to ``werkzeug.serving.make_server``."""
    from werkzeug.serving import WSGIRequestHandler

    class Handler(WSGIRequestHandler):
        def version_string(self) -> str:
            return SERVER_NAME

    return Handler


# The page's largest scripts, which Dash only asks for once the layout has come back and been
# drawn (layout -> Graph -> its chunk -> plotly.js: three round trips in a row): the index
# asks for them at once, so they are in the cache when the renderer reaches for them.
PRELOADED = ("dash/dcc/async-graph.js", "dash/dcc/async-dropdown.js", "plotly/package_data/plotly.min.js")


def preload_links(prefix: str) -> str:
    """``<link rel="preload">`` tags for :data:`PRELOADED` (URLs under the app's
    ``requests_pathname_prefix``, as the renderer writes them)."""
    return "".join(f'<link rel="preload" as="script" href="{prefix}_dash-component-suites/{path}">'
                   for path in PRELOADED)


# The tabs warm_up builds for the first run, most used first (Compare needs two runs and a choice).
WARMED_TABS = ("timeline", "ranks", "collectives", "kernels", "operators")


class _PageOnce:
    """The page's layout, built on first use and kept: it depends only on the served runs
    (the first run's Overview is part of it), so every page load after the first is
    answered without building it again."""

    def __init__(self, data: DashboardData) -> None:
        self._data, self._page, self._lock = data, None, threading.Lock()

    def __call__(self) -> Any:
        if self._page is None:
            with self._lock:
                if self._page is None:
                    self._page = layout.page(self._data)
        return self._page


def warm_up(app: dash.Dash) -> threading.Thread:
    """Start a thread that computes now what the first page load and the first look at
    each tab ask for: the first run's analysis, the page with its Overview, the Timeline of
    its default step (kept in the Timeline's figure cache), then its other tabs
    (:data:`WARMED_TABS`, kept by :func:`~perfscope.dashboards.layout.kept_tab`).

    Returns:
        the thread (started).  An error there is left for the request that needs the same
        thing to raise and report.
    """
    data: DashboardData = app.server.config["perfscope_data"]
    page: Callable[[], Any] = app.server.config["perfscope_page"]

    def work() -> None:
        try:
            page()
            for tab in WARMED_TABS:
                callbacks.render_tab(data, tab, 0, None)
        except Exception:  # noqa: BLE001 - the page's request raises it again and reports it
            return

    # Not a daemon: a Ctrl-C during the warm-up waits for it (a second or so) rather than
    # finalising the interpreter under a thread inside pyarrow, which aborts the process.
    thread = threading.Thread(target=work, name="perfscope-warm-up", daemon=False)
    thread.start()
    return thread


def create_app(run_paths: Sequence[str | os.PathLike[str]], analyze: Analyze | None = None, *,
               host: str = "127.0.0.1", allow_hosts: Collection[str] = ()) -> dash.Dash:
    """Build the dashboard app for ``run_paths``.

    Every run is opened now (so a bad path fails before the server starts) and analysed on
    first view, then cached.  The browser refers to runs by their index in ``run_paths``;
    nothing it sends is used as a path.  Assets are served from the installed packages (no
    CDN), so the page works offline.

    Args:
        run_paths: run directories (at least one).
        analyze: analysis function (default ``perfscope.analyzers.analyze_run``); tests pass
            their own.
        host: the address the server binds: requests must name it (or, for loopback,
            ``localhost``/``127.0.0.1``/``[::1]``) with the server's port in their Host.
        allow_hosts: more host names to answer to, with any port (``--allow-host``).

    Returns:
        the ``dash.Dash`` app; its Flask server is ``app.server``.

    Raises:
        UsageError: no run given.
        InputError, NotARunError, SchemaVersionError, CorruptRunError: a run cannot be opened.
    """
    data = DashboardData(run_paths, analyze=analyze)
    app = dash.Dash(
        __name__,
        title="perfscope",
        suppress_callback_exceptions=True,  # tab content (and its callbacks' components) comes and goes
        serve_locally=True,
        update_title=None,
    )
    page = _PageOnce(data)
    app.layout = page
    prefix = app.config.requests_pathname_prefix
    app.index_string = app.index_string.replace("{%css%}", preload_links(prefix) + "{%css%}")
    callbacks.register(app, data)
    serve_compact(app.server)
    app.server.config["perfscope_data"] = data
    app.server.config["perfscope_page"] = page
    headers = {**_SECURITY_HEADERS, "Content-Security-Policy": _CSP.format(hashes=" ".join(app.csp_hashes()))}
    extra = frozenset(_bare(n) for n in allow_hosts)
    app.server.wsgi_app = _Guard(app.server.wsgi_app, allowed_hosts(host, extra), extra,
                                 _is_wildcard(host), headers)
    return app


__all__ = ["create_app", "warm_up", "preload_links", "serve_compact", "request_handler", "allowed_hosts", "split_host", "LOOPBACK_NAMES", "SERVER_NAME"]
