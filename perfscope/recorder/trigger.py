"""On-demand recording: trigger requests in the run folder, polled by every rank.

``perfscope record --on-demand`` starts every rank with its collectors armed and paused.
``perfscope trigger RUN --steps N`` writes ``RUN/control/trigger-<time>-<id>.json``
(:func:`write_request`); each rank looks at ``RUN/control/`` at every step boundary
(:class:`RequestPoller`: one ``stat`` per step) and, on a new request, opens one window:
``warmup`` steps collected and dropped, then ``steps`` recorded steps, the first of them a
multiple of ``align`` so that ranks which saw the request a step apart record the same
steps.  A file, rather than a signal, because it reaches every rank of the run, on every
host that shares the run folder, whichever process the user names; each rank reports its
window in its metadata (``windows``, with the request id), which :func:`request_windows`
reads back.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from perfscope.errors import NotARunError, UsageError

CONTROL_DIR = "control"
REQUEST_PREFIX = "trigger-"
# A directory's mtime has the kernel's clock-tick granularity (a few ms): two requests
# written within one tick leave one mtime.  So the folder is listed again at every step
# for this long after its last change, not only when the mtime moves.
_SETTLE_NS = 1_000_000_000


class RequestPoller:
    """Finds trigger requests for one run, cheaply enough to ask at every step boundary.

    A step costs one ``stat`` of ``RUN/control/`` (about a microsecond); the folder is
    listed only after it changed.  Each request is returned once.
    """

    def __init__(self, run_path: str | os.PathLike[str]) -> None:
        self.dir = Path(run_path) / CONTROL_DIR
        self._mtime = -1
        self._seen: set[str] = set()
        try:
            self.dir.mkdir(exist_ok=True)  # so that a step's stat finds it (no exception per step)
        except OSError:
            pass  # a read-only run folder: requests cannot come anyway

    def poll(self) -> list[dict[str, Any]]:
        """New requests (``id``, ``steps``, ``warmup``, ``align``, ``created_ns``), oldest first."""
        try:
            mtime = os.stat(self.dir).st_mtime_ns
        except OSError:
            return []
        if mtime == self._mtime and time.time_ns() - mtime > _SETTLE_NS:
            return []
        self._mtime = mtime
        try:
            names = sorted(n for n in os.listdir(self.dir) if n.startswith(REQUEST_PREFIX) and n.endswith(".json"))
        except OSError:
            return []
        found = []
        for name in names:
            if name in self._seen:
                continue
            self._seen.add(name)
            try:
                req = json.loads((self.dir / name).read_text())
                found.append({"id": str(req["id"]), "steps": int(req["steps"]), "warmup": int(req.get("warmup", 0)),
                              "align": int(req.get("align", 1)), "created_ns": int(req.get("created_ns", 0))})
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a damaged request opens nothing; `perfscope trigger` writes valid ones
        return sorted(found, key=lambda r: r["created_ns"])


def run_of_pid(pid: int) -> Path:
    """The run directory a process records into: its own ``PERFSCOPE_RUN_DIR``, or that of
    the first descendant that has one (``perfscope record``'s launcher, torchrun's agent).

    Raises:
        UsageError: no such process, or neither it nor its children record.
    """
    from perfscope.options import ENV_RUN_DIR

    if not Path(f"/proc/{pid}").exists():
        raise UsageError(f"no process {pid} on this machine; give the run folder instead")
    todo, seen = [pid], set()
    while todo:
        p = todo.pop(0)
        seen.add(p)
        try:
            env = Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
        except OSError:
            env = []
        for item in env:
            key, _, value = item.partition(b"=")
            if key.decode(errors="replace") == ENV_RUN_DIR and value:
                return Path(os.fsdecode(value))
        todo += [c for c in _children(p) if c not in seen]
    raise UsageError(f"process {pid} is not recorded by `perfscope record` (nor is any process it started); "
                     "give the run folder instead")


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(d.name))
    return out


def resolve_target(target: str) -> Path:
    """A run folder, or the pid of a process of a recorded job, as the run folder.

    Raises:
        NotARunError: ``target`` is a folder without ``run.json``.
        UsageError: ``target`` is neither a folder nor a pid of a recorded process.
    """
    from perfscope.store.meta import RUN_JSON

    path = Path(target)
    if path.is_dir():
        if not (path / RUN_JSON).is_file():
            raise NotARunError(f"{target} is not a perfscope run (no {RUN_JSON}); give the folder `perfscope record -o` wrote")
        return path
    if target.isdigit():
        return run_of_pid(int(target))
    raise UsageError(f"{target!r} is neither a run folder nor a process id")


def write_request(run_path: str | os.PathLike[str], steps: int, *, warmup: int = 1, align: int = 1) -> dict[str, Any]:
    """Ask every rank of a running on-demand recording to record ``steps`` steps.

    Returns:
        the request written (``id``, ``steps``, ``warmup``, ``align``, ``created_ns``).

    Raises:
        UsageError: bad numbers, a run not recorded with ``--on-demand``, or one whose
            job has ended.
    """
    from perfscope.store.meta import RUN_JSON, read_json

    if steps < 1 or warmup < 0 or align < 1:
        raise UsageError(f"--steps must be at least 1, --warmup at least 0 and --align at least 1 (got {steps}, {warmup}, {align})")
    path = Path(run_path)
    meta = read_json(path / RUN_JSON)
    if not (meta.get("schedule") or {}).get("on_demand"):
        raise UsageError(f"{path} was not recorded with `perfscope record --on-demand`: it records "
                         f"{'by its schedule' if meta.get('schedule') else 'every step'} and takes no trigger")
    if meta.get("status") != "recording":
        raise UsageError(f"the job of {path} has ended (run status {meta.get('status')!r}); nothing to trigger")
    created = time.time_ns()
    req = {"id": uuid.uuid4().hex[:12], "steps": int(steps), "warmup": int(warmup), "align": int(align),
           "created_ns": created}
    control = path / CONTROL_DIR
    control.mkdir(exist_ok=True)
    tmp = control / f".{req['id']}.tmp"
    tmp.write_text(json.dumps(req))
    os.replace(tmp, control / f"{REQUEST_PREFIX}{created}-{req['id']}.json")
    return req


def request_windows(run_path: str | os.PathLike[str], request_id: str) -> dict[int, dict[str, Any] | None]:
    """For each rank still recording or that recorded a window for it: the window request
    ``request_id`` opened there (``first_step``, ``last_step``, ``start_ns``, ``end_ns``;
    ``last_step`` None while open), or None when the rank has not opened it yet."""
    from perfscope.store.meta import RANKS_DIR, read_json

    out: dict[int, dict[str, Any] | None] = {}
    for p in sorted((Path(run_path) / RANKS_DIR).glob("rank-*.json")):
        try:
            info = read_json(p)
        except Exception:  # noqa: BLE001 - being rewritten, or damaged: not this rank's answer yet
            continue
        mine = [w for w in info.get("windows") or [] if w.get("request") == request_id]
        if mine or info.get("status") == "recording":
            out[int(info["rank"])] = mine[0] if mine else None
    return out


__all__ = ["RequestPoller", "resolve_target", "run_of_pid", "write_request", "request_windows", "CONTROL_DIR"]
