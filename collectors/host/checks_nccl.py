"""The doctor's NCCL checks: variable names, risky values, nccl.conf files."""
from __future__ import annotations

import difflib

from perfscope.collectors.host.check_common import Facts, MiB, Result, gpu_devices, ib_devices, result, worst
from perfscope.collectors.host.nccl_vars import (
    INFORMATIONAL_NCCL_VARS,
    KNOWN_NCCL_VARS,
    RENAMED_NCCL_VARS,
    is_known_nccl_var,
)


# -- NCCL -------------------------------------------------------------------------------
def nccl_settings(facts: Facts) -> dict[str, tuple[str, str]]:
    """Return the NCCL settings in effect: {name: (value, source)}.

    NCCL reads the environment first; a conf file only fills names that are still unset
    (``setenv(..., 0)``), and the first file read wins over later ones.
    """
    out: dict[str, tuple[str, str]] = {}
    for f in reversed(facts.get("nccl_conf") or []):
        for k, v in (f.get("settings") or {}).items():
            out[k.strip()] = (v.strip(), str(f.get("path")))
    for k, v in ((facts.get("env") or {}).get("nccl") or {}).items():
        out[k] = (v, "environment")
    return out


def check_nccl_names(facts: Facts) -> Result:
    """NCCL_* names NCCL does not know (typos, silently ignored) or that were renamed."""
    cid = "nccl.names"
    settings = nccl_settings(facts)
    names = [n for n in settings if n not in INFORMATIONAL_NCCL_VARS]
    if not names:
        info = sorted(n for n in settings if n in INFORMATIONAL_NCCL_VARS)
        return result(cid, "pass", "no NCCL_* settings: NCCL uses its defaults"
                      + (f" ({', '.join(info)} only describes the installed NCCL)" if info else ""))
    unknown, renamed, fixes = [], [], []
    for n in sorted(names):
        if n in RENAMED_NCCL_VARS:
            renamed.append(f"{n} (now {RENAMED_NCCL_VARS[n]})")
            fixes.append(f"rename {n} to {RENAMED_NCCL_VARS[n]}")
        elif not is_known_nccl_var(n):
            close = difflib.get_close_matches(n, KNOWN_NCCL_VARS, n=1, cutoff=0.8)
            unknown.append(n + (f" (did you mean {close[0]}?)" if close else ""))
            fixes.append(f"unset {n}" + (f" and set {close[0]}" if close else ""))
    if unknown or renamed:
        parts = ([f"unknown to NCCL, ignored: {', '.join(unknown)}"] if unknown else []) + ([f"renamed: {', '.join(renamed)}"] if renamed else [])
        return result(cid, "warn", "; ".join(parts), "; ".join(fixes))
    return result(cid, "pass", f"{len(names)} NCCL variable(s), all known: {', '.join(sorted(names))}")


def _int(v: str | None) -> int | None:
    try:
        return int(str(v).strip(), 0)
    except (TypeError, ValueError):
        return None


def check_nccl_values(facts: Facts) -> Result:
    """Risky or conflicting NCCL settings (environment and nccl.conf together)."""
    cid = "nccl.values"
    s = {k: sv for k, sv in nccl_settings(facts).items() if k not in INFORMATIONAL_NCCL_VARS}
    if not s:
        return result(cid, "pass", "no NCCL settings to judge")
    v = {k: val for k, (val, _) in s.items()}
    gpus, _ = gpu_devices(facts)
    has_ib = bool(ib_devices(facts))
    found: list[tuple[str, str, str]] = []  # (status, message, fix)

    def src(k: str) -> str:
        return "" if s[k][1] == "environment" else f" (from {s[k][1]})"

    if _int(v.get("NCCL_P2P_DISABLE")) == 1:
        found.append(("fail" if len(gpus) > 1 else "warn", f"NCCL_P2P_DISABLE=1{src('NCCL_P2P_DISABLE')}: GPU-to-GPU traffic goes through host memory instead of NVLink/PCIe", "unset NCCL_P2P_DISABLE"))
        if "NCCL_P2P_LEVEL" in v:
            found.append(("warn", "NCCL_P2P_LEVEL is set but P2P is disabled, so it has no effect", "unset NCCL_P2P_LEVEL"))
    if _int(v.get("NCCL_SHM_DISABLE")) == 1:
        found.append(("warn", f"NCCL_SHM_DISABLE=1{src('NCCL_SHM_DISABLE')}: intra-node traffic without P2P falls back to the network", "unset NCCL_SHM_DISABLE"))
    if _int(v.get("NCCL_IB_DISABLE")) == 1 and has_ib:
        found.append(("fail", f"NCCL_IB_DISABLE=1{src('NCCL_IB_DISABLE')} although RDMA devices are present: inter-node traffic uses TCP sockets", "unset NCCL_IB_DISABLE"))
    if str(v.get("NCCL_NET", "")).lower() == "socket" and has_ib:
        found.append(("warn", "NCCL_NET=Socket although RDMA devices are present", "unset NCCL_NET"))
    if "NCCL_IB_HCA" in v and not has_ib:
        found.append(("warn", f"NCCL_IB_HCA={v['NCCL_IB_HCA']} but no RDMA devices are present", "unset NCCL_IB_HCA"))
    gdr = str(v.get("NCCL_NET_GDR_LEVEL", v.get("NCCL_IB_GDR_LEVEL", ""))).strip().upper()
    if gdr in ("0", "LOC") and has_ib:
        found.append(("warn", "NCCL_NET_GDR_LEVEL=LOC disables GPUDirect RDMA", "unset NCCL_NET_GDR_LEVEL"))
    debug = str(v.get("NCCL_DEBUG", "")).strip().upper()
    if debug == "TRACE":
        found.append(("warn", f"NCCL_DEBUG=TRACE{src('NCCL_DEBUG')}: every call is logged, which slows collectives", "export NCCL_DEBUG=WARN"))
    if "NCCL_DEBUG_SUBSYS" in v and not debug:
        found.append(("warn", "NCCL_DEBUG_SUBSYS is set without NCCL_DEBUG, so nothing is logged", "export NCCL_DEBUG=INFO (or unset NCCL_DEBUG_SUBSYS)"))
    nvls = _int(v.get("NCCL_NVLS_ENABLE"))
    if nvls == 1:
        found.append(("warn", "NCCL_NVLS_ENABLE=1 forces NVLink SHARP: it needs NVSwitch multicast with a running fabric manager and takes extra GPU memory; NCCL picks it by itself when it works",
                      "unset NCCL_NVLS_ENABLE (or 0 where multicast is unsafe)"))
    for key in ("NCCL_ALGO", "NCCL_PROTO"):
        if key in v:
            found.append(("warn", f"{key}={v[key]}{src(key)} overrides NCCL's tuner for every message size", f"unset {key} unless a measurement showed it faster"))
    if nvls == 0 and "NVLS" in str(v.get("NCCL_ALGO", "")).upper() and not str(v.get("NCCL_ALGO", "")).startswith("^"):
        found.append(("warn", "NCCL_ALGO asks for NVLS while NCCL_NVLS_ENABLE=0", "drop NVLS from NCCL_ALGO"))
    for lo, hi in (("NCCL_MIN_CTAS", "NCCL_MAX_CTAS"), ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")):
        a, b = _int(v.get(lo)), _int(v.get(hi))
        if a is not None and b is not None and a > b:
            found.append(("fail", f"{lo}={a} > {hi}={b}", f"set {lo} <= {hi}"))
    buff = _int(v.get("NCCL_BUFFSIZE"))
    if buff is not None and buff < MiB:
        found.append(("warn", f"NCCL_BUFFSIZE={buff} is below 1 MiB (default 4 MiB): more, smaller transfers", "unset NCCL_BUFFSIZE"))
    ifname = str(v.get("NCCL_SOCKET_IFNAME", ""))
    if ifname.lstrip("=").startswith("lo"):
        found.append(("warn", f"NCCL_SOCKET_IFNAME={ifname}: loopback reaches no other node", "unset NCCL_SOCKET_IFNAME (or name the cluster interface)"))
    if not found:
        notes = ", ".join(f"{k}={val}" for k, val in sorted(v.items()))
        return result(cid, "pass", f"no risky NCCL settings ({notes})")
    return result(cid, worst([st for st, _, _ in found]), "; ".join(m for _, m, _ in found), "; ".join(f for _, _, f in found))


def check_nccl_conf(facts: Facts) -> Result:
    """The nccl.conf files NCCL reads: missing NCCL_CONF_FILE, lines NCCL misreads."""
    cid = "nccl.conf"
    files = facts.get("nccl_conf")
    if files is None:
        return result(cid, "skip", "nccl.conf files were not read")
    env = ((facts.get("env") or {}).get("nccl")) or {}
    problems, shown = [], []
    for f in files:
        if not f.get("exists"):
            if f.get("source") == "NCCL_CONF_FILE":
                problems.append(f"NCCL_CONF_FILE={f.get('path')} does not exist")
            continue
        settings = f.get("settings") or {}
        problems += [f"{f.get('path')} {p}" for p in f.get("problems") or []]
        shadowed = [k.strip() for k in settings if k.strip() in env]
        shown.append(f"{f.get('path')}: {', '.join(f'{k}={val}' for k, val in settings.items()) or 'empty'}"
                     + (f" (environment overrides {', '.join(shadowed)})" if shadowed else ""))
    if problems:
        return result(cid, "warn", "; ".join(problems), "write each line as NAME=value with no spaces; point NCCL_CONF_FILE at an existing file")
    if not shown:
        return result(cid, "pass", "no nccl.conf file (NCCL_CONF_FILE, ~/.nccl.conf, /etc/nccl.conf)")
    return result(cid, "pass", "; ".join(shown))
