"""Peak host memory a CPU-only recording adds to a torch process (no GPU needed).

    python benchmarks/recorder_memory.py [--steps 20] [--repeat 2]

Each repeat is a fresh process: it imports torch, notes its peak RSS (``ru_maxrss``), then
records ``--steps`` small matmul steps with ``perfscope.profile`` (host hooks only: no
CUPTI, NCCL or NVML) and reports how far the peak rose during the recording and after its
stop, and whether pandas was imported.  On a GPU machine ``recorder_overhead.py`` gives
the same figure for ``perfscope record`` with every collector.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys
import torch
r1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
import perfscope
with perfscope.profile(sys.argv[1], cupti=False, nccl=False, nvml=False) as prof:
    for _ in range(int(sys.argv[2])):
        torch.randn(64, 64) @ torch.randn(64, 64)
        prof.step()
    r2 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
r3 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"during_mb": (r2 - r1) / 1024, "after_stop_mb": (r3 - r1) / 1024, "pandas": "pandas" in sys.modules}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run([sys.executable, "-c", CHILD, f"{tmp}/run.perfscope", str(args.steps)],
                                 capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"peak RSS over torch: {r['during_mb']:.1f} MB recording, {r['after_stop_mb']:.1f} MB after stop; "
              f"pandas imported: {r['pandas']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
