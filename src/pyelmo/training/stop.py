"""Graceful stop of a training run: SIGTERM / SIGINT set a flag the trainer reads once per step.

The first signal asks the run to stop after the optimizer step in progress (the trainer then
writes its checkpoint); a second one, more than :data:`REPEAT_WINDOW_S` seconds later, aborts
at once with the signal's default action. Signals repeated within that window count as one
request: a Ctrl-C in a terminal reaches a torchrun worker twice, from the terminal and again
forwarded by torchrun.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import FrameType
from typing import Any, Callable

import torch

#: The signals that stop a run gracefully.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Seconds within which a repeated signal is the same request, not an abort.
REPEAT_WINDOW_S = 2.0


def exit_code(signum: int) -> int:
    """The shell's convention for a process ended by ``signum``: 128 + its number (SIGTERM 143, SIGINT 130)."""
    return 128 + int(signum)


class StopRequest:
    """A context manager that turns SIGTERM and SIGINT into :attr:`signum` while it is active.

    Not ``enabled``, or outside the main thread (where Python cannot install handlers), it
    installs nothing and :attr:`signum` stays ``None``.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.signum: int | None = None
        self._at = 0.0
        self._previous: dict[int, Any] = {}

    def agreed(self, late: bool,
               all_reduce: Callable[[torch.Tensor], torch.Tensor]) -> tuple[bool, signal.Signals | None]:
        """``(late on any rank, the signal any rank received)``, the same on every rank: one all-reduce of
        three numbers (SIGTERM wins over SIGINT)."""
        flags = all_reduce(torch.tensor([float(late), float(self.signum == signal.SIGTERM),
                                         float(self.signum == signal.SIGINT)]))
        received = signal.SIGTERM if flags[1] > 0 else signal.SIGINT if flags[2] > 0 else None
        return bool(flags[0] > 0), received

    def __enter__(self) -> "StopRequest":
        if self.enabled and threading.current_thread() is threading.main_thread():
            for s in STOP_SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        while self._previous:
            s, handler = self._previous.popitem()
            signal.signal(s, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum, self._at = signum, time.monotonic()
            _say(f"pyelmo train: {name} received: stopping after the current step and writing the checkpoint "
                 f"(send it again to abort without one)\n")
        elif time.monotonic() - self._at > REPEAT_WINDOW_S:
            _say(f"pyelmo train: second {name}: aborting without a checkpoint\n")
            self.__exit__()  # the signal's previous action: SIGTERM ends the process, SIGINT raises KeyboardInterrupt
            signal.raise_signal(signum)


def _say(text: str) -> None:
    """Write to stderr without Python's buffered stream, which a signal handler may interrupt mid-write."""
    try:
        os.write(2, text.encode())
    except OSError:
        pass
