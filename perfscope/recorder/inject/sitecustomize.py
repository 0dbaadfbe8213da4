"""perfscope's start-up hook for ``perfscope record`` (not for direct use).

``perfscope record`` prepends this file's folder to ``PYTHONPATH`` so that every Python
process of the job imports it at start-up.  It first runs the ``sitecustomize`` it
shadows (the next one on ``sys.path``, e.g. Debian's), then, only when
``PERFSCOPE_RUN_DIR`` is set, lets :mod:`perfscope.recorder.inject` decide whether this
process records.  Nothing here may break the user's program: every failure becomes one
line on stderr.
"""
import os
import sys


def _chain_next_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))

    def other(entry: str) -> bool:
        try:
            return os.path.abspath(entry or os.getcwd()) != here
        except OSError:
            return True

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [p for p in sys.path if other(p)])
    if spec is None or spec.loader is None or not spec.origin:
        return
    if os.path.abspath(spec.origin) == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    # Run it under its own name so that it behaves as if the interpreter had imported it.
    saved = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - what site.py does for a failing sitecustomize
        sys.stderr.write(f"Error in sitecustomize ({spec.origin}); set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}\n")
    finally:
        if saved is not None:
            sys.modules["sitecustomize"] = saved
    sys.modules["_perfscope_chained_sitecustomize"] = module


_chain_next_sitecustomize()


def _decide_module() -> object:
    """The stdlib-only decision module, loaded by path before importing perfscope (which
    would cost every helper process of the job pandas and pyarrow)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_perfscope_decide.py")
    spec = importlib.util.spec_from_file_location("_perfscope_decide_site", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _records(module: object) -> bool:
    ok, _, why = module.decide(os.environ, getattr(sys, "orig_argv", sys.argv), os.getpid())  # type: ignore[attr-defined]
    if not ok and module.debugging(os.environ):  # type: ignore[attr-defined]
        sys.stderr.write(f"perfscope[{os.getpid()}]: not recording: {why}; argv={getattr(sys, 'orig_argv', sys.argv)}\n")
    return bool(ok)


try:
    _decide = _decide_module()
    _requested = _decide.recording_requested(os.environ)  # type: ignore[attr-defined]
except Exception:  # noqa: BLE001 - a broken install: let bootstrap decide (and report) instead
    _decide, _requested = None, True
if _requested:
    try:
        _record_here = _decide is None or _records(_decide)
    except Exception:  # noqa: BLE001 - let bootstrap decide (and report) instead
        _record_here = True
    if _record_here:
        try:
            from perfscope.recorder.inject import bootstrap as _perfscope_bootstrap
        except Exception as _e:  # noqa: BLE001 - e.g. another interpreter without perfscope installed
            sys.stderr.write(
                f"perfscope: not recording this process ({sys.executable}): perfscope cannot be imported here "
                f"({type(_e).__name__}: {_e}); install perfscope into this environment\n"
            )
        else:
            _perfscope_bootstrap()
