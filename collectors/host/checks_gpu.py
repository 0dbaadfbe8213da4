"""The doctor's GPU checks: driver, persistence, throttling, clocks, power, PCIe, topology, MPS."""
from __future__ import annotations

from perfscope.collectors.host.check_common import Facts, Result, gpu_devices, gpu_name, result


# Throttle reasons that mean the hardware is protecting itself (fail) or software is
# capping clocks (warn).  Idle, application-clock and sync-boost reasons are normal.
HW_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SW_THROTTLE = ("sw_thermal_slowdown", "sw_power_cap")

NVIDIA_SMI_PERF = "nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER"


# -- GPUs -------------------------------------------------------------------------------
def check_gpu_driver(facts: Facts) -> Result:
    """NVML answers and which driver, CUDA version and GPUs it reports."""
    cid = "gpu.driver"
    g = facts.get("gpus") or {}
    devices, reason = gpu_devices(facts)
    if reason:
        return result(cid, "skip", f"no GPU checks: {g.get('reason') or reason}", "run on a GPU node with the NVIDIA driver and `pip install nvidia-ml-py`")
    names = sorted({str(d.get("name")) for d in devices})
    return result(cid, "pass", f"driver {g.get('driver_version')}, CUDA {g.get('cuda_driver_version')}, {len(devices)} GPU(s): {', '.join(names)}")


def check_gpu_persistence(facts: Facts) -> Result:
    """Persistence mode keeps the driver loaded between jobs."""
    cid = "gpu.persistence"
    devices, reason = gpu_devices(facts)
    if reason:
        return result(cid, "skip", reason)
    known = [d for d in devices if d.get("persistence_mode") is not None]
    if not known:
        return result(cid, "skip", "NVML does not report persistence mode here")
    off = [gpu_name(d) for d in known if not d["persistence_mode"]]
    if off:
        return result(
            cid, "warn",
            f"persistence mode off on {', '.join(off)}: the driver tears down between jobs, so each start pays seconds of initialisation and loses clock settings",
            "sudo nvidia-smi -pm 1   (better: sudo systemctl enable --now nvidia-persistenced)",
        )
    return result(cid, "pass", f"persistence mode on ({len(known)} GPU(s))")


def check_gpu_throttle(facts: Facts) -> Result:
    """Current clocks-event (throttle) reasons: hardware slowdowns fail, software caps warn."""
    cid = "gpu.throttle"
    devices, reason = gpu_devices(facts)
    if reason:
        return result(cid, "skip", reason)
    if all(d.get("throttle_reasons") is None for d in devices):
        return result(cid, "skip", "NVML does not report throttle reasons here")
    hw, sw, seen = [], [], []
    for d in devices:
        names = d.get("throttle_reason_names") or []
        seen.append(f"{gpu_name(d)}: {'+'.join(names) or 'none'}")
        hw += [f"{gpu_name(d)} {n}" for n in names if n in HW_THROTTLE]
        sw += [f"{gpu_name(d)} {n}" for n in names if n in SW_THROTTLE]
    if hw:
        return result(cid, "fail", f"hardware is slowing clocks ({', '.join(hw)}): overheating, power brake or a power-supply fault",
                      f"{NVIDIA_SMI_PERF}   then check airflow, inlet temperature, PSUs and the power-brake cable")
    if sw:
        return result(cid, "warn", f"software is capping clocks ({', '.join(sw)}): at the power limit or too hot",
                      f"{NVIDIA_SMI_PERF}   then check cooling, or raise the power limit: sudo nvidia-smi -pl <watts>")
    return result(cid, "pass", f"no clock slowdown ({'; '.join(seen)})")


def check_gpu_clocks(facts: Facts) -> Result:
    """Application clocks set below their default (someone ran nvidia-smi -ac)."""
    cid = "gpu.clocks"
    devices, reason = gpu_devices(facts)
    if reason:
        return result(cid, "skip", reason)
    low, info = [], []
    for d in devices:
        c = d.get("clocks") or {}
        app, default, mx = c.get("app_sm_mhz"), c.get("default_app_sm_mhz"), c.get("max_sm_mhz")
        app_mem, default_mem = c.get("app_mem_mhz"), c.get("default_app_mem_mhz")
        if app is not None and default is not None and app < default:
            low.append(f"{gpu_name(d)} SM {app} MHz < default {default}")
        if app_mem is not None and default_mem is not None and app_mem < default_mem:
            low.append(f"{gpu_name(d)} mem {app_mem} MHz < default {default_mem}")
        info.append(f"{gpu_name(d)} SM {c.get('sm_mhz')}/{mx} MHz, mem {c.get('mem_mhz')}/{c.get('max_mem_mhz')} MHz")
    if low:
        return result(cid, "warn", f"application clocks lowered: {', '.join(low)}", "sudo nvidia-smi -rac   (reset application clocks to default)")
    if all((d.get("clocks") or {}).get("max_sm_mhz") is None for d in devices):
        return result(cid, "skip", "NVML does not report clocks here")
    return result(cid, "pass", f"application clocks at default; current/max: {'; '.join(info)}")


def check_gpu_power_limit(facts: Facts) -> Result:
    """An enforced power limit below the board's default costs clock speed under load."""
    cid = "gpu.power_limit"
    devices, reason = gpu_devices(facts)
    if reason:
        return result(cid, "skip", reason)
    known = [d for d in devices if d.get("power_limit_w") and d.get("default_power_limit_w")]
    if not known:
        return result(cid, "skip", "NVML does not report power limits here")
    low = [d for d in known if d["power_limit_w"] < 0.95 * d["default_power_limit_w"]]
    if low:
        d = low[0]
        return result(
            cid, "warn",
            ", ".join(f"{gpu_name(x)} limited to {x['power_limit_w']:.0f} W of {x['default_power_limit_w']:.0f} W" for x in low),
            f"sudo nvidia-smi -i {d.get('index')} -pl {d['default_power_limit_w']:.0f}",
        )
    return result(cid, "pass", ", ".join(f"{gpu_name(d)} {d['power_limit_w']:.0f} W (default {d['default_power_limit_w']:.0f} W)" for d in known))


def check_gpu_pcie(facts: Facts) -> Result:
    """PCIe link generation and width, current against maximum."""
    cid = "gpu.pcie"
    devices, reason = gpu_devices(facts)
    if reason:
        return result(cid, "skip", reason)
    fix = "nvidia-smi -q -d PCIE while training; reseat the GPU or riser and set the slot to Auto/its top generation in the BIOS"
    fails, warns, notes = [], [], []
    for d in devices:
        p = d.get("pcie") or {}
        gen, mgen, gpu_mgen, w, mw = p.get("gen"), p.get("max_gen"), p.get("gpu_max_gen"), p.get("width"), p.get("max_width")
        if gen is None and w is None:
            continue
        n = gpu_name(d)
        if w is not None and mw is not None and w < mw:
            fails.append(f"{n} link x{w} of x{mw}")
        idle = "gpu_idle" in (d.get("throttle_reason_names") or []) or d.get("sm_util_pct") == 0
        if gen is not None and mgen is not None and gen < mgen:
            if idle:
                notes.append(f"{n} Gen{gen} of Gen{mgen} while idle (links slow down at idle)")
            else:
                warns.append(f"{n} Gen{gen} of Gen{mgen} under load")
        elif gen is not None:
            notes.append(f"{n} Gen{gen} x{w}")
        if mgen is not None and gpu_mgen is not None and mgen < gpu_mgen:
            warns.append(f"{n} slot allows Gen{mgen}, the GPU supports Gen{gpu_mgen}")
    if not (fails or warns or notes):
        return result(cid, "skip", "NVML does not report PCIe links here")
    if fails:
        return result(cid, "fail", f"PCIe link narrower than it can be: {', '.join(fails + warns)}", fix)
    if warns:
        return result(cid, "warn", f"PCIe link slower than it can be: {', '.join(warns)}", fix)
    return result(cid, "pass", "; ".join(notes))


def check_gpu_mps(facts: Facts) -> Result:
    """MPS daemons and compute modes: shared or prohibited GPUs."""
    cid = "gpu.mps"
    mps = facts.get("mps") or {}
    devices, reason = gpu_devices(facts)
    daemons = mps.get("daemons") or []
    if daemons:
        return result(cid, "warn", f"MPS is running ({', '.join(daemons)}): CUDA processes here share the GPUs through it, and kernels of other clients interleave with yours",
                      "echo quit | nvidia-cuda-mps-control   (if MPS is not intended)")
    if mps.get("control_pipe"):
        return result(cid, "warn", f"an MPS control pipe exists in {mps.get('pipe_directory')}: CUDA processes here will connect to an MPS server",
                      "echo quit | nvidia-cuda-mps-control   (or unset CUDA_MPS_PIPE_DIRECTORY)")
    if reason:
        return result(cid, "skip", reason)
    prohibited = [gpu_name(d) for d in devices if d.get("compute_mode") == "prohibited"]
    if prohibited:
        return result(cid, "fail", f"compute mode 'prohibited' on {', '.join(prohibited)}: no CUDA context can be created", "sudo nvidia-smi -c DEFAULT")
    modes = sorted({str(d.get("compute_mode")) for d in devices})
    return result(cid, "pass", f"MPS not running; compute mode {', '.join(modes)}")


def check_gpu_topology(facts: Facts) -> Result:
    """GPU pairs that talk only through the CPU have low peer-to-peer bandwidth."""
    cid = "gpu.topology"
    devices, reason = gpu_devices(facts)
    if reason:
        return result(cid, "skip", reason)
    if len(devices) < 2:
        return result(cid, "skip", "one GPU: no GPU-to-GPU links to check")
    nvlink = {d.get("index"): (d.get("nvlink_active") or 0) for d in devices}
    pairs = (facts.get("gpus") or {}).get("topology") or []
    far = [p for p in pairs if p.get("level") in ("NODE", "SYS") and not (nvlink.get(p["gpus"][0]) and nvlink.get(p["gpus"][1]))]
    if far:
        shown = ", ".join(f"GPU{a}-GPU{b} {p['level']}" for p in far[:4] for a, b in [p["gpus"]])
        return result(cid, "warn", f"{len(far)} GPU pair(s) without NVLink cross the CPU ({shown}): peer-to-peer traffic is slow there",
                      "nvidia-smi topo -m; put ranks that exchange most on GPUs under one PCIe switch")
    links = ", ".join(f"GPU{i} {n} NVLink" for i, n in nvlink.items())
    return result(cid, "pass", f"GPUs linked by NVLink or a shared PCIe switch ({links})")
