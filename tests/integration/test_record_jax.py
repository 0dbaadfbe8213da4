"""`perfscope record` of a JAX-style program on the CPU: ``jax.profiler.StepTraceAnnotation``
ranges become steps and neither perfscope nor the program imports torch.  A stand-in ``jax``
package (just ``jax._src.profiler`` shaped like JAX 0.11's) keeps the test free of JAX; the
GPU test (tests/gpu/test_jax_record_gpu.py) records the real one."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import perfscope
from perfscope.collectors.host.jax_steps import TRACE_NOTE, JaxSteps, install

PROFILER = '''
class TraceMe:
    def __init__(self, name, **kwargs):
        self.name = name
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return None
class TraceAnnotation(TraceMe):
    pass
class StepTraceAnnotation(TraceAnnotation):
    def __init__(self, name, **kwargs):
        super().__init__(name, _r=1, **kwargs)
def start_trace(log_dir, **kwargs):
    return log_dir
'''


def fake_jax(root: Path) -> Path:
    (root / "jax" / "_src").mkdir(parents=True)
    (root / "jax" / "__init__.py").write_text(
        "from jax._src import profiler as _profiler\nfrom jax import profiler\n__version__ = '0.0-fake'\n")
    (root / "jax" / "_src" / "__init__.py").write_text("")
    (root / "jax" / "_src" / "profiler.py").write_text(PROFILER)
    (root / "jax" / "profiler.py").write_text(
        "from jax._src.profiler import StepTraceAnnotation as StepTraceAnnotation, start_trace as start_trace\n")
    return root


def test_step_annotations_become_steps_without_torch(tmp_path: Path) -> None:
    root = fake_jax(tmp_path / "pkgs")
    prog = tmp_path / "train.py"
    prog.write_text(textwrap.dedent("""
        import sys, time
        import jax
        time.sleep(0.01)
        for i in range(4):
            with jax.profiler.StepTraceAnnotation("train", step_num=10 + i):
                time.sleep(0.005)
        with jax.profiler.StepTraceAnnotation("eval"):
            pass
        print("torch" in sys.modules)
    """))
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("PERFSCOPE_RUN_DIR", None)
    run_dir = tmp_path / "run.perfscope"
    proc = subprocess.run([sys.executable, "-m", "perfscope", "record", "-o", str(run_dir), "--no-cupti", "--no-nvml",
                           "--", sys.executable, str(prog)], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"  # the recorder did not import torch
    run = perfscope.open_run(run_dir)
    assert run.rank_meta(0)["versions"]["jax"] == "0.0-fake"
    steps = run.table("steps").sort_values("start_ns")
    assert list(steps["step"]) == [10, 11, 12, 13, 14]  # an annotation without step_num continues the count
    assert list(steps["name"].astype(str)) == ["train#10", "train#11", "train#12", "train#13", "eval#14"]
    assert set(steps["source"].astype(str)) == {"annotation"}
    assert (steps["dur_ns"].iloc[:4] >= 5_000_000).all()


def test_hooks_follow_the_window_and_note_start_trace(tmp_path: Path) -> None:
    import importlib.util

    path = fake_jax(tmp_path / "pkgs") / "jax" / "_src" / "profiler.py"
    spec = importlib.util.spec_from_file_location("fake_jax_profiler", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    on, notes = [True], []
    steps = JaxSteps(lambda: on[0])
    undo = install(module, steps, notes.append, cupti_recording=lambda: True)
    with module.StepTraceAnnotation("train", step_num=0):
        pass
    on[0] = False
    with module.StepTraceAnnotation("train", step_num=1):
        pass
    assert module.start_trace("/tmp/x") == "/tmp/x" and notes == [TRACE_NOTE]
    rows = steps.drain()
    assert rows is not None and rows["step"] == [0] and steps.drain() is None
    undo()
    assert "__enter__" not in module.StepTraceAnnotation.__dict__  # back to the inherited TraceMe methods
    with module.StepTraceAnnotation("train", step_num=2):
        pass
    assert steps.drain() is None
