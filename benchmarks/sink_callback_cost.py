"""What perfscope's own API callback costs per call, without CUPTI (the sink alone, on the CPU).

    python benchmarks/sink_callback_cost.py [--calls 2000000] [--repeat 5]

The native sink (``collectors/cupti/sink.c``) makes the API records in CUPTI's callback:
at a call's enter it stamps the start, at its exit it builds a 40-byte record and appends
it to a staging buffer under a mutex.  This times that work in a small C program linked
against the built sink, through ``ps_test_api_call`` (enter and exit, as CUPTI would call
them; ``--nested``: with a driver call inside, as ``cudaLaunchKernel`` calls
``cuLaunchKernel``, which the callback skips).  Without CUPTI the timestamps come from
``clock_gettime`` (``cuptiGetTimestamp`` on a GPU machine).  The staging buffer is emptied
between batches, outside the timed region (the segment writer's thread does it in a
recording).  Reported: ns per API call, the fastest of ``--repeat`` runs.

This is the part of the per-launch cost that perfscope's code adds; CUPTI's own callback
dispatch and its kernel records come on top on a GPU (``recorder_overhead.py``).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

C_MAIN = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
void ps_test_api_call(int, uint32_t, uint32_t, int32_t, uint32_t);
int ps_configure(int, size_t, long, long);
void ps_set_limits(size_t, size_t, size_t);
size_t ps_pending(int);
size_t ps_take(int, uint8_t *, size_t);
void ps_reset(void);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    long calls = atol(argv[1]); int repeat = atoi(argv[2]); int nested = atoi(argv[3]);
    const long batch = 100000;
    uint8_t *dst = malloc(batch * 40 + 4096);
    ps_reset();
    ps_set_limits(8u << 20, 64, (size_t)4 << 30);
    ps_configure(5, 40, -1, -1); ps_configure(4, 40, -1, -1);  /* RUNTIME, DRIVER: 40-byte API records */
    double best = 1e30;
    for (int r = 0; r < repeat; r++) {
        double spent = 0;
        for (long done = 0; done < calls; done += batch) {
            double t0 = now();
            for (long i = 0; i < batch; i++) ps_test_api_call(2, 211, (uint32_t)(done + i), 0, nested ? 307 : 0);
            spent += now() - t0;
            ps_take(5, dst, batch * 40 + 4096);  /* empty the stage (as the writer thread would) */
            ps_take(4, dst, batch * 40 + 4096);
        }
        if (spent < best) best = spent;
    }
    printf("%.3f\n", best * 1e9 / calls);
    return 0;
}
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)

    from perfscope.collectors.cupti import native

    lib = native.library_path()
    if lib is None:
        print("the native sink is not built: python collectors/cupti/build.py", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "bench.c", Path(tmp) / "bench"
        src.write_text(C_MAIN)
        subprocess.run(["gcc", "-O2", str(src), "-o", str(exe), str(lib), f"-Wl,-rpath,{Path(lib).parent}", "-lpthread"],
                       check=True)

        def ns(nested: int) -> float:
            out = subprocess.run([str(exe), str(args.calls), str(args.repeat), str(nested)],
                                 capture_output=True, text=True, check=True).stdout
            return float(out.strip())

        res = {"record_ns": ns(0), "record_nested_ns": ns(1), "calls": args.calls}
    if args.json:
        print(json.dumps(res))
    else:
        print(f"API record made by the callback (enter + exit): {res['record_ns']:.1f} ns per call")
        print(f"  with a driver call inside it (skipped):        {res['record_nested_ns']:.1f} ns per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
