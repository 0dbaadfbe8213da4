"""JUnit XML of a comparison (``perfscope compare --format junit``), for CI test reports."""
from __future__ import annotations

from xml.etree import ElementTree as ET

import pandas as pd

from perfscope.analyzers.compare import Comparison
from perfscope.reports.comparison import row_label
from perfscope.reports.style import (
    fmt_delta_ns,
    fmt_interval,
    fmt_ns,
    fmt_pct,
    xml_text,
)


def render_junit(c: Comparison) -> str:
    """Return JUnit XML: one ``testcase`` per metric row, a ``failure`` per gating regression.

    Only the gating metric's rows can fail (matching the exit code); ``too_few_steps`` is a
    ``skipped`` case with the reason; every case's ``system-out`` holds its numbers.
    """
    rows = c.rows
    failures = int(((rows["verdict"] == "regression") & rows["gating"]).sum())
    skipped = int(((rows["verdict"] == "too_few_steps") & rows["gating"]).sum())
    suites = ET.Element("testsuites", name="perfscope compare", tests=str(len(rows)), failures=str(failures),
                        errors="0", skipped=str(skipped))
    suite = ET.SubElement(suites, "testsuite", name=xml_text(f"perfscope compare {c.base_label} -> {c.new_label}"),
                          tests=str(len(rows)), failures=str(failures), errors="0", skipped=str(skipped), time="0")
    props = ET.SubElement(suite, "properties")
    for k, v in (("metric", c.metric), ("max_regression", c.max_regression), ("confidence", c.confidence),
                 ("per_rank", c.per_rank), ("min_steps", c.min_steps), ("n_boot", c.n_boot), ("seed", c.seed),
                 ("verdict", c.verdict), ("base", c.base_label), ("new", c.new_label)):
        ET.SubElement(props, "property", name=k, value=xml_text(v))
    for _, r in rows.iterrows():
        _testcase(suite, c, r)
    if c.warnings:
        err = ET.SubElement(suite, "system-err")
        err.text = xml_text("\n".join(f"warning: {w}" for w in c.warnings))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _testcase(suite: ET.Element, c: Comparison, r: pd.Series) -> None:
    """Add the ``testcase`` of metric row ``r`` to ``suite``."""
    name = row_label(r)
    case = ET.SubElement(suite, "testcase", classname="perfscope.compare", name=xml_text(name), time="0")
    interval = fmt_interval(r["ci_low"], r["ci_high"])
    detail = (
        f"{name}: base median {fmt_ns(r['base_median_ns'])} ({int(r['n_base'])} steps), "
        f"new median {fmt_ns(r['new_median_ns'])} ({int(r['n_new'])} steps), Δ {fmt_delta_ns(r['delta_ns'])}, "
        f"change {fmt_pct(r['change'])} of the base step, {c.confidence:.0%} interval {interval}, "
        f"verdict {r['verdict']}" + ("" if r["gating"] else " (informational: not the gate)")
    )
    if r["gating"] and r["verdict"] == "regression":
        f = ET.SubElement(case, "failure", type="regression",
                          message=xml_text(f"{name} regressed {fmt_pct(r['change'])} (interval {interval}), "
                                           f"more than the allowed {c.max_regression:.1%}"))
        f.text = xml_text(detail)
    elif r["gating"] and r["verdict"] == "too_few_steps":
        ET.SubElement(case, "skipped", message=xml_text(
            f"not judged: need at least {c.min_steps} steps per side (base {int(r['n_base'])}, new {int(r['n_new'])})"))
    out = ET.SubElement(case, "system-out")
    out.text = xml_text(detail)


__all__ = ["render_junit"]
