"""The child decoder process of ``perfscope.profile`` (see :mod:`.decoding`).

``python -m perfscope.collectors.cupti.decodeproc RUN --rank R --follow S`` decodes rank R's
CUPTI segments every S seconds until told to stop (a line or the end of its standard
input) or its parent process is gone (the recording process died: forked DataLoader
workers may keep the pipe open), decodes the rest and prints its statistics as one JSON
line (:func:`perfscope.collectors.cupti.decoder.follow`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perfscope.collectors.cupti.decoder import follow


def main(argv: list[str] | None = None) -> int:
    """The child decoder's entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m perfscope.collectors.cupti.decodeproc")
    ap.add_argument("run")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--follow", type=float, default=2.0, metavar="S")
    args = ap.parse_args(argv)
    stats = follow(Path(args.run), args.rank, args.follow)
    sys.stdout.write(json.dumps(stats) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
