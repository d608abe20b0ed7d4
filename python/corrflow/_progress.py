"""Progress of long calls: the library's events as tqdm bars or a callable."""

from __future__ import annotations

from typing import Any, Dict

from . import _native


def set_progress(receiver: Any = True) -> None:
    """Show the progress of long calls (``ingest``, ``embed``, ``annotate``).

    The library reports progress as events (the ``corrflow`` command draws them as bars).
    ``receiver`` chooses what happens to them:

    - ``True``: a ``tqdm`` bar per task (``tqdm.auto``, so notebooks get widgets);
    - a callable: ``receiver(kind, task_id, name, unit, position, total, message)`` for every
      event, ``kind`` being ``"start"``, ``"advance"`` or ``"finish"`` (called from worker
      threads, with the GIL held; keep it quick);
    - ``False`` or ``None``: nothing (the default).
    """
    if receiver is True:
        receiver = _TqdmBars()
    elif receiver is False:
        receiver = None
    elif receiver is not None and not callable(receiver):
        raise TypeError(f"set_progress takes True, False, None or a callable, got {type(receiver).__name__}")
    _native.set_progress(receiver)


class _TqdmBars:
    """Progress events as tqdm bars, one per running task."""

    def __init__(self) -> None:
        from tqdm.auto import tqdm  # imported here: tqdm is only needed for the bars

        self._tqdm = tqdm
        self._bars: Dict[int, Any] = {}

    def __call__(self, kind, task_id, name, unit, position, total, message) -> None:
        if kind == "start":
            self._bars[task_id] = self._tqdm(total=total, initial=position, desc=name, unit=f" {unit}")
            return
        bar = self._bars.get(task_id)
        if bar is None:
            return
        bar.update(position - bar.n)
        if message:
            bar.set_postfix_str(message, refresh=False)
        if kind == "finish":
            bar.close()
            del self._bars[task_id]
