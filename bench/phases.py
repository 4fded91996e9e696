"""Time a running program's phases from the outside, by wrapping its methods and functions for a while.

    phases = Phases()
    phases.wrap(platform.store, "acquire", "lease+load")
    ...                                 # run requests
    phases.restore()
    print(phases.seconds["lease+load"] / requests)

Nothing in the product is changed for this: each wrapper adds the wall time of one call to its phase
and calls the original. Concurrent calls each add their own time, so with 16 sessions a phase's time
per request includes waiting for the CPU the others hold.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

_ABSENT = object()


class Phases:
    """Wall seconds spent in each wrapped phase, summed over calls."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.names: list[str] = []  # in the order they were wrapped
        self._undo: list[tuple[Any, str, Any]] = []
        self._lock = threading.Lock()

    def wrap(self, owner: Any, name: str, phase: str, when: Callable[..., bool] | None = None) -> None:
        """Time ``owner.name`` (a method, on a class or an object, or a module's function) as ``phase``;
        with ``when``, only the calls whose arguments it accepts."""
        original = getattr(owner, name)
        self.names.append(phase)
        timed = self._async(original, phase, when) if inspect.iscoroutinefunction(original) else \
            self._sync(original, phase)
        self._undo.append((owner, name, vars(owner).get(name, _ABSENT)))
        setattr(owner, name, timed)

    def _async(self, original: Any, phase: str, when: Callable[..., bool] | None) -> Any:
        @functools.wraps(original)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            if when is not None and not when(*args, **kwargs):
                return await original(*args, **kwargs)
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - started
        return timed

    def _sync(self, original: Any, phase: str) -> Any:
        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                with self._lock:  # a function the program runs in a thread (asyncio.to_thread)
                    self.seconds[phase] += time.perf_counter() - started
        return timed

    def restore(self) -> None:
        """Put every original back (a method an object took from its class is removed from the object)."""
        for owner, name, previous in reversed(self._undo):
            if previous is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, previous)
        self._undo.clear()

    def reset(self) -> None:
        """Forget the times so far (after a warm-up)."""
        self.seconds.clear()
