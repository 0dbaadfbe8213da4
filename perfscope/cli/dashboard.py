"""``perfscope dashboard RUN [RUN...] [--host 127.0.0.1] [--port 8050] [--allow-host NAME]``: serve the web dashboard."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from perfscope.cli.options import analysis_options
from perfscope.errors import UsageError

if TYPE_CHECKING:
    import dash
    from werkzeug.serving import BaseWSGIServer

    from perfscope.analyzers import AnalysisConfig
    from perfscope.analyzers.result import Analysis
    from perfscope.analyzers.sources import RunLike

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def make_server(runs: list[str], host: str, port: int, config: AnalysisConfig | None = None,
                allow_hosts: tuple[str, ...] = ()) -> tuple[BaseWSGIServer, dash.Dash]:
    """Build the app for ``runs``, analyse every run (with ``config``, through
    :func:`perfscope.analyze`), start building the page and the first Timeline in the
    background (:func:`~perfscope.dashboards.app.warm_up`), and bind a threaded WSGI server that answers requests
    for ``host`` (and the loopback names when it is loopback) and ``allow_hosts``.

    Returns:
        (werkzeug server, app); the server is bound but not yet serving.

    Raises:
        UsageError: the address cannot be bound (port taken, unknown host).
        PerfscopeError: a run cannot be opened or analysed.
        UsageError: Dash (an optional dependency) is not installed.
    """
    try:
        import dash  # noqa: F401 - only to say how to install it; it brings werkzeug
    except ImportError:
        raise UsageError("the dashboard needs Dash, which is not installed: pip install 'perfscope[dashboard]'") from None
    from werkzeug.serving import make_server as wsgi_server

    from perfscope.dashboards.app import create_app, request_handler, warm_up

    def analyze(run: RunLike) -> Analysis:
        import perfscope

        return perfscope.analyze(run, config)

    app = create_app(runs, analyze=analyze, host=host, allow_hosts=allow_hosts)
    data = app.server.config["perfscope_data"]
    for i, label in enumerate(data.labels):
        t = time.perf_counter()
        data.get(i)  # analyse now: errors surface here, and the first page load is fast
        click.echo(f"analysed {label} in {time.perf_counter() - t:.1f} s", err=True)
    warm_up(app)  # the page and the first Timeline, built while the browser loads its scripts
    _check_bindable(host, port)
    try:
        server = wsgi_server(host, port, app.server, threaded=True, request_handler=request_handler())
    except (OSError, SystemExit) as e:  # werkzeug turns a failed bind into SystemExit(1)
        raise UsageError(f"cannot listen on {host}:{port} ({e}); choose another --port or --host") from None
    return server, app


def quiet_requests(quiet: bool = True) -> None:
    """Keep werkzeug's one log line per HTTP request off stderr (``quiet``), or show them.

    werkzeug logs each request at INFO on its ``werkzeug`` logger and, when that logger has
    no level, sets INFO itself; a level set here wins over that."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING if quiet else logging.INFO)


def _check_bindable(host: str, port: int) -> None:
    """Raise UsageError if ``host:port`` cannot be bound (werkzeug would exit the process)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UsageError(f"unknown --host {host!r} ({e.strerror})") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            raise UsageError(f"cannot listen on {host}:{port} ({e.strerror}); choose another --port") from None


@click.command(name="dashboard")
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback exposes the traces to the network.")
@click.option("--port", default=8050, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0: any free port).")
@click.option("-v", "--verbose", is_flag=True, help="Log every HTTP request on stderr.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Also answer requests for host NAME, on any port (e.g. the name of a reverse proxy); "
                   "repeatable. Requests naming any other host are refused (403).")
@analysis_options
def dashboard(runs: tuple[str, ...], host: str, port: int, verbose: bool, allow_hosts: tuple[str, ...],
              config: AnalysisConfig) -> None:
    """Serve the web dashboard for RUNS (one or more run directories) until Ctrl-C.

    With two or more runs the Compare tab compares them. Only the runs named here are
    served. --step-pattern and --ranks apply to every run. Only requests addressed to
    --host (with its port), to localhost when that is loopback, or to an --allow-host
    name are answered.
    """
    quiet_requests(not verbose)
    server, _ = make_server(list(runs), host, port, config, allow_hosts)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{server.server_port}/"
    if host not in LOOPBACK:
        click.echo(f"warning: listening on {host}: anyone who can reach it can read these traces "
                   "(there is no login)", err=True)
    click.echo(f"perfscope dashboard: {url}  (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
