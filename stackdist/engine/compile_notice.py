"""Hear numba's first compile of a process: what lets a command say "compiling kernels (first run
only)" exactly when a compile is about to happen, and never when every kernel loads from the cache.

numba (0.68.1, ``numba/core/dispatcher.py:895-917``, ``_DispatcherBase.compile``) looks a signature
up in memory, then in its on-disk cache (``self._cache.load_overload``: the index file beside the
source, keyed by the source file's stamp), and only on a miss triggers the ``"numba:compile"``
event (:mod:`numba.core.event`, public) around the compile. A listener on that event therefore
fires before the first real compile and never for a cached kernel; nested compiles (a kernel's
callees) fire it again, so the callback is called once.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["on_first_compile"]


def on_first_compile(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback()`` once, just before the first numba compile from now on (a kernel
    signature found neither in memory nor in the on-disk cache); return the function that stops
    listening. Without numba (or with its JIT disabled) nothing compiles: a no-op. O(1).

    >>> stop = on_first_compile(lambda: None); stop()
    """
    try:
        from numba import config
        from numba.core import event
    except ImportError:  # pragma: no cover - numba is a dependency; the plain-Python fallback compiles nothing
        return lambda: None
    if getattr(config, "DISABLE_JIT", False):
        return lambda: None
    fired = [False]

    class _First(event.Listener):
        def on_start(self, ev: event.Event) -> None:
            if not fired[0]:
                fired[0] = True
                callback()

        def on_end(self, ev: event.Event) -> None:
            return None

    listener = _First()
    event.register("numba:compile", listener)
    return lambda: event.unregister("numba:compile", listener)
