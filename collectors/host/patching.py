"""Replacing attributes reversibly, and running code right after a module is imported.

Both exist so that the host hooks can be installed without importing torch: under
``perfscope record`` they are attached the moment the user's program finishes
``import torch`` (:func:`when_imported`), and every patch is undone on stop.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

_MISSING = object()


class Patches:
    """A stack of attribute replacements that :meth:`restore` undoes in reverse order.

    An attribute that someone else replaced after us is left alone on restore (removing
    our layer would drop theirs too); our wrappers check a flag, so they turn inert anyway.
    """

    def __init__(self) -> None:
        self._done: list[tuple[Any, str, Any, Any]] = []

    def replace(self, owner: Any, name: str, new: Any) -> Any:
        """Set ``owner.name = new`` and return the previous value."""
        old = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name, _MISSING)
        setattr(owner, name, new)
        self._done.append((owner, name, old, new))
        return getattr(owner, name) if old is _MISSING else old

    def restore(self) -> None:
        """Undo every replacement (idempotent)."""
        while self._done:
            owner, name, old, new = self._done.pop()
            current = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name, _MISSING)
            if current is not new:
                continue
            if old is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, old)


def is_compiling() -> Callable[[], bool]:
    """Return a cheap callable telling whether torch.compile is tracing right now.

    Wrappers call the original function directly while dynamo traces, so that dynamo sees
    (and can rewrite) the real torch function instead of our timing code.
    """
    try:
        import torch.compiler

        fn = torch.compiler.is_compiling
        fn()
        return fn
    except Exception:  # noqa: BLE001 - old torch: never compiling as far as we can tell
        return lambda: False


class _CallbackLoader(importlib.abc.Loader):
    """Delegates to the real loader, then runs the callbacks once the module has executed."""

    def __init__(self, loader: importlib.abc.Loader, callbacks: list[Callable[[ModuleType], None]]) -> None:
        self._loader = loader
        self._callbacks = callbacks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The real loader stays the module's loader (some code inspects it).
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        for cb in list(self._callbacks):
            cb(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        cbs = self.callbacks.get(fullname)
        if not cbs or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.name = None
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _CallbackLoader(spec.loader, cbs)
        return spec


_finder: _PostImportFinder | None = None
_finder_lock = threading.Lock()


def when_imported(module_name: str, callback: Callable[[ModuleType], None]) -> Callable[[], None]:
    """Call ``callback(module)`` once ``module_name`` has been imported.

    If the module is already imported the callback runs now.  Otherwise it runs right
    after the module's code has executed (from inside the importing statement).

    Returns:
        a function that cancels the callback if it has not run yet.
    """
    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
        return lambda: None
    global _finder
    with _finder_lock:
        if _finder is None or _finder not in sys.meta_path:
            _finder = _PostImportFinder()
            sys.meta_path.insert(0, _finder)
        finder = _finder
        fired = [False]

        def once(mod: ModuleType) -> None:
            if fired[0]:
                return
            fired[0] = True
            cancel()
            callback(mod)

        finder.callbacks.setdefault(module_name, []).append(once)

    def cancel() -> None:
        with _finder_lock:
            cbs = finder.callbacks.get(module_name, [])
            if once in cbs:
                cbs.remove(once)
            if not cbs:
                finder.callbacks.pop(module_name, None)
            if not finder.callbacks and finder in sys.meta_path:
                sys.meta_path.remove(finder)

    return cancel


__all__ = ["Patches", "is_compiling", "when_imported"]
