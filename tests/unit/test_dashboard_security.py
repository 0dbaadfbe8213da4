"""The dashboard answers only requests addressed to it, with a CSP and no version banner,
and refuses callback values that are not exactly a run, rank or step it serves (issue #20).

Forged requests go through Flask's test client, as a page of another site (or a script)
would send them; a real server (the CLI's) checks what werkzeug itself writes.
"""
from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dashboard_fixtures import analysis_for, make_run
from perfscope.dashboards.app import allowed_hosts, create_app, split_host
from perfscope.dashboards.data import DashboardData, strict_int
from perfscope.errors import UsageError

pytestmark = pytest.mark.filterwarnings("ignore:(?s).*dash_table.DataTable:DeprecationWarning")

LENIENT = [True, False, 1.9, 1.0, " 1 ", "1 ", "+1", "01", "1e0", "0x1", "1.0", "١", "", None, [1], {"0": 0}]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("runs")
    make_run(root / "a", steps=4)
    make_run(root / "b", steps=6, step_ns=26_000_000)
    return [str(root / "a"), str(root / "b")]


def _client(runs: list[str], host: str = "127.0.0.1", allow: tuple[str, ...] = ()) -> Any:
    return create_app(runs, analyze=analysis_for, host=host, allow_hosts=allow).server.test_client()


def _get(client: Any, host: str | None, port: int = 8050, path: str = "/") -> Any:
    headers = {} if host is None else {"Host": host}
    return client.get(path, headers=headers, environ_overrides={"SERVER_PORT": str(port)})


# -- Host header ---------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["127.0.0.1:8050", "localhost:8050", "LocalHost:8050", "[::1]:8050"])
def test_loopback_names_with_the_port_are_served(runs: list[str], host: str) -> None:
    assert _get(_client(runs), host).status_code == 200


@pytest.mark.parametrize("host", [
    "evil.example:8050",  # DNS rebinding: the attacker's name, resolving to 127.0.0.1
    "evil.example", "127.0.0.1:8051", "localhost", "localhost.:8050", "127.0.0.1.evil.example:8050",
    "::1:8050", "[::1:8050", "[::1]x:8050", "127.0.0.1:80x", "127.0.0.1:+8050", "127.0.0.1:", ":8050",
    "10.0.0.1:8050", "",
])
def test_any_other_host_is_refused(runs: list[str], host: str) -> None:
    for path in ("/", "/_dash-layout", "/_dash-dependencies"):
        r = _get(_client(runs), host, path=path)
        assert r.status_code == 403, (host, path)
        assert r.data.startswith(b"perfscope dashboard: this Host is not served here") and b"run-facts" not in r.data


def test_a_missing_host_header_is_refused(runs: list[str]) -> None:
    client = _client(runs)
    r = client.get("/", environ_overrides={"HTTP_HOST": "", "SERVER_PORT": "8050"})
    assert r.status_code == 403


def test_a_non_loopback_bind_answers_its_own_address_only(runs: list[str]) -> None:
    client = _client(runs, host="10.1.2.3")
    assert _get(client, "10.1.2.3:8050").status_code == 200
    assert _get(client, "localhost:8050").status_code == 403
    assert _get(client, "127.0.0.1:8050").status_code == 403


def test_allow_host_adds_a_name_on_any_port(runs: list[str]) -> None:
    client = _client(runs, allow=("Dash.Example",))
    assert _get(client, "dash.example").status_code == 200
    assert _get(client, "dash.example:443").status_code == 200
    assert _get(client, "127.0.0.1:8050").status_code == 200
    assert _get(client, "other.example").status_code == 403


def test_a_wildcard_bind_takes_ip_addresses_and_this_machines_name(runs: list[str]) -> None:
    client = _client(runs, host="0.0.0.0")
    assert _get(client, "192.168.7.9:8050").status_code == 200
    assert _get(client, "[fe80::1]:8050").status_code == 200
    assert _get(client, f"{socket.gethostname()}:8050").status_code == 200
    assert _get(client, "evil.example:8050").status_code == 403
    assert _get(client, "192.168.7.9:9999").status_code == 403


def test_split_host_and_allowed_hosts() -> None:
    assert split_host("[::1]:8050") == ("::1", 8050)
    assert split_host("LOCALHOST") == ("localhost", None)
    assert split_host("a:b:c") is None and split_host("[::1]") == ("::1", None)
    assert allowed_hosts("::1") == {"::1", "localhost", "127.0.0.1"}
    assert allowed_hosts("10.1.2.3", ["x.example"]) == {"10.1.2.3", "x.example"}


# -- headers -------------------------------------------------------------------------------

def _assert_headers(r: Any) -> None:
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self' 'sha256-" in csp
    assert "'unsafe-eval'" not in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert "frame-ancestors 'none'" in csp
    assert r.headers["Server"] == "perfscope"
    assert r.headers["X-Frame-Options"] == "DENY" and r.headers["X-Content-Type-Options"] == "nosniff"
    banner = " ".join(f"{k}: {v}" for k, v in r.headers.items())
    assert "Werkzeug" not in banner and "Python" not in banner


@pytest.mark.parametrize("path", ["/", "/_dash-layout", "/_dash-dependencies", "/no-such-page"])
def test_every_response_has_the_csp_and_no_version_banner(runs: list[str], path: str) -> None:
    _assert_headers(_get(_client(runs), "127.0.0.1:8050", path=path))
    _assert_headers(_get(_client(runs), "evil.example:8050", path=path))  # refusals too


def test_the_csp_hash_covers_the_pages_inline_script(runs: list[str]) -> None:
    import base64
    import hashlib
    import re

    r = _get(_client(runs), "127.0.0.1:8050")
    page = re.sub(rb"<!--.*?-->", b"", r.data, flags=re.DOTALL)  # Dash's IE-only warning is in a comment
    inline = re.findall(rb'<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>(.*?)</script>', page, re.DOTALL)
    assert inline, "Dash's page has an inline start-up script"
    for script in inline:
        digest = base64.b64encode(hashlib.sha256(script).digest()).decode()
        assert f"'sha256-{digest}'" in r.headers["Content-Security-Policy"]


@pytest.fixture
def cli_server(runs: list[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    import perfscope
    from dashboard_fixtures import fake_analyze
    from perfscope.cli import dashboard as cmd

    monkeypatch.setattr(perfscope, "analyze", fake_analyze)
    server, _ = cmd.make_server(runs[:1], "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_the_cli_server_names_no_versions_even_in_its_own_errors(cli_server: int) -> None:
    ok = _raw(cli_server, f"GET / HTTP/1.0\r\nHost: 127.0.0.1:{cli_server}\r\n\r\n".encode())
    assert ok.startswith(b"HTTP/1.1 200") and b"\r\nServer: perfscope\r\n" in ok
    rebound = _raw(cli_server, f"GET / HTTP/1.0\r\nHost: evil.example:{cli_server}\r\n\r\n".encode())
    assert rebound.startswith(b"HTTP/1.1 403")
    bad = _raw(cli_server, b"GET / HTTP/1.x\r\n\r\n")  # answered by werkzeug itself, not the app
    assert b"400" in bad
    for reply in (ok, rebound, bad):
        head = reply.split(b"\r\n\r\n")[0]
        assert b"Werkzeug" not in head and b"Python" not in head, head


def test_werkzeugs_own_answers_carry_no_version() -> None:
    # An exception escaping the app is answered by werkzeug directly, with version_string().
    from perfscope.dashboards.app import request_handler

    assert request_handler().version_string(object()) == "perfscope"  # type: ignore[arg-type]


def test_allow_host_option_reaches_the_server(runs: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import perfscope
    from dashboard_fixtures import fake_analyze
    from perfscope.cli import dashboard as cmd

    monkeypatch.setattr(perfscope, "analyze", fake_analyze)
    seen: dict[str, Any] = {}

    def fake_make_server(runs_: list[str], host: str, port: int, config: Any = None,
                         allow_hosts: tuple[str, ...] = ()) -> Any:
        seen.update(host=host, allow=allow_hosts)
        raise UsageError("stop here")

    monkeypatch.setattr(cmd, "make_server", fake_make_server)
    from perfscope.cli.main import main

    assert main(["dashboard", runs[0], "--allow-host", "a.example", "--allow-host", "b.example"]) == 2
    assert seen == {"host": "127.0.0.1", "allow": ("a.example", "b.example")}


# -- strict parameters -----------------------------------------------------------------------

@pytest.mark.parametrize("value", LENIENT)
def test_strict_int_takes_only_integers(value: Any) -> None:
    with pytest.raises(UsageError):
        strict_int(value, "run")


def test_strict_int_takes_ints_and_canonical_text() -> None:
    assert [strict_int(v, "x") for v in (0, 7, "0", "12", "-3")] == [0, 7, 0, 12, -3]


@pytest.mark.parametrize("value", LENIENT + [2, -1, "2", "-1"])
def test_run_indices_are_strict(runs: list[str], value: Any) -> None:
    data = DashboardData(runs, analyze=analysis_for)
    with pytest.raises(UsageError):
        data.index(value)


def _callback(client: Any, output: str, inputs: list[tuple[str, str, Any]], state: list[tuple[str, str, Any]],
              changed: str) -> Any:
    def prop(i: str, p: str, v: Any) -> dict[str, Any]:
        return {"id": i, "property": p, "value": v}

    deps = client.get("/_dash-dependencies", headers={"Host": "127.0.0.1:8050"},
                      environ_overrides={"SERVER_PORT": "8050"}).get_json()
    dep = next(d for d in deps if output in d["output"] and any(i["id"] == changed.split(".")[0] for i in d["inputs"]))
    outputs = [{"id": o.split(".")[0], "property": o.split(".")[1]} for o in dep["output"].strip(".").split("...")]
    body = {"output": dep["output"], "outputs": outputs if len(outputs) > 1 else outputs[0],
            "inputs": [prop(*x) for x in inputs], "state": [prop(*x) for x in state], "changedPropIds": [changed]}
    return client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json",
                       headers={"Host": "127.0.0.1:8050"}, environ_overrides={"SERVER_PORT": "8050"})


def _render(client: Any, run: Any) -> Any:
    return _callback(client, "tab-content.children", [("tabs", "value", "overview"), ("run", "value", run),
                                                      ("warmup", "value", [])],
                     [("selection", "data", None)], "run.value")


@pytest.mark.parametrize("run", [True, 1.9, " 1 ", "1e0", "01", 2, -1, "../b"])
def test_a_forged_run_index_is_refused(runs: list[str], run: Any) -> None:
    r = _render(_client(runs), run)
    assert r.status_code == 400, (run, r.status_code, r.data[:200])
    assert b"run-facts" not in r.data and b"steps" not in r.data  # nothing of any run came back


@pytest.mark.parametrize("run", [1, "1"])
def test_a_real_run_index_is_served(runs: list[str], run: Any) -> None:
    r = _render(_client(runs), run)
    assert r.status_code == 200 and b"6 steps" in r.data


# The Timeline callback's other inputs (ranks shown, search) and its state (run, window, selection).
_TL_MORE = [("tl-ranks", "value", None), ("tl-search", "value", "")]
_TL_STATE = [("run", "value", 0), ("tl-window", "data", None), ("selection", "data", None)]


@pytest.mark.parametrize("rank", [True, 1.9, " 1 ", 5])
def test_a_forged_rank_is_refused_by_the_tables_and_the_timeline(runs: list[str], rank: Any) -> None:
    client = _client(runs)
    for table in ("k", "c"):
        r = _callback(client, f"{table}-table.data", [(f"{table}-rank", "value", rank)], [("run", "value", 0)],
                      f"{table}-rank.value")
        assert r.status_code == 400, (table, rank, r.data[:200])
    r = _callback(client, "tl-graph.figure", [("tl-rank", "value", rank), ("tl-step", "value", 1),
                                              ("tl-zoom", "data", None), *_TL_MORE], _TL_STATE,
                  "tl-rank.value")
    assert r.status_code == 400, (rank, r.data[:200])


def test_a_forged_step_is_refused_by_the_timeline(runs: list[str]) -> None:
    client = _client(runs)
    for step in (True, 1.5, " 2 "):
        r = _callback(client, "tl-graph.figure", [("tl-rank", "value", 0), ("tl-step", "value", step),
                                                  ("tl-zoom", "data", {"xaxis.autorange": True}),
                                                  *_TL_MORE], _TL_STATE, "tl-zoom.data")
        assert r.status_code == 400, (step, r.data[:200])


@pytest.mark.parametrize("ranks, window", [([True], None), ([9], None), (["0"], {"t0": "1e3", "t1": 5}),
                                           (None, {"t0": 1.5, "t1": 2})])
def test_forged_timeline_ranks_and_windows_are_refused(runs: list[str], ranks: Any, window: Any) -> None:
    client = _client(runs)
    r = _callback(client, "tl-graph.figure", [("tl-rank", "value", 0), ("tl-step", "value", 10),
                                              ("tl-zoom", "data", None), ("tl-ranks", "value", ranks),
                                              ("tl-search", "value", "x")],
                  [("run", "value", 0), ("tl-window", "data", window), ("selection", "data", None)], "tl-search.value")
    assert r.status_code == 400, (ranks, window, r.data[:200])
    r = _callback(client, "tl-download.data", [("tl-perfetto", "n_clicks", 1)],
                  [("run", "value", 0), ("tl-rank", "value", 0), ("tl-step", "value", 10), ("tl-ranks", "value", ranks),
                   ("tl-window", "data", window)], "tl-perfetto.n_clicks")
    assert r.status_code == 400, (ranks, window, r.data[:200])


def test_a_forged_selection_falls_back_to_the_default(runs: list[str]) -> None:
    from perfscope.dashboards import callbacks

    data = DashboardData(runs, analyze=analysis_for)
    rd = data.get(0)
    default = callbacks.layout.default_selection(rd)
    real = {"run": 0, "rank": default["rank"], "step": default["step"]}
    assert callbacks._selection(rd, real) == real
    for forged in ({**real, "run": False}, {**real, "rank": True}, {**real, "step": float(real["step"])}, [1]):
        assert callbacks._selection(rd, forged) == default  # type: ignore[arg-type]


def test_forged_clicks_change_nothing(runs: list[str]) -> None:
    from perfscope.dashboards import callbacks

    data = DashboardData(runs, analyze=analysis_for)
    for graph, point in (("steps", {"x": 1.9}), ("steps", {"customdata": True}), ("heat-wall", {"x": 1, "y": "rank 1.0"}),
                         ("stragglers", {"y": "rank  1"}), ("ranks", {"customdata": "1 "}),
                         ("heat-waited", {"x": "1", "y": "rank 1.0"}), ("overlap", {"customdata": [True, 50.0]})):
        assert callbacks.pick(data, 0, graph, {"points": [point]}, None) is None, (graph, point)
    assert callbacks.pick(data, 0, "steps", {"points": "x"}, None) is None
    from perfscope.dashboards import timeline_callbacks

    rd = data.get(0)
    sel = callbacks.layout.default_selection(rd)
    span = timeline_callbacks.step_span(rd, [sel["rank"]], sel["rank"], sel["step"])
    assert timeline_callbacks.zoom_window(span, {"xaxis.range[0]": "inf", "xaxis.range[1]": 1}) is None


def test_page_paths_are_not_files(runs: list[str], tmp_path: Path) -> None:
    # The browser names runs by index only: a path in a forged callback is refused, not opened.
    r = _render(_client(runs), str(tmp_path))
    assert r.status_code == 400
