"""How a work() call stops: stop()'s grace, the handlers that outlive it, SIGTERM / SIGINT.

Shared by the thread (_worker.py) and asyncio (_aio.py) workers: the grace that a
stop(timeout=...) gives the drain (the sooner of two stops wins), the runs abandoned once
it has ended, and the signal handlers that call stop() while work() runs."""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from ._context import RunBase

log = logging.getLogger("tinyq")

# -- stop(timeout=...): the grace of a drain -------------------------------------------------


def sooner(ends: Optional[float], new: Optional[float]) -> Optional[float]:
    """The grace that ends first of `ends` and a new stop()'s `new` (None: no end)."""
    return new if ends is None else ends if new is None else min(ends, new)


def grace_left(ends: Optional[float]) -> Optional[float]:
    """Seconds left of stop()'s grace ending at `ends` (monotonic), None when it has none."""
    return None if ends is None else max(ends - time.monotonic(), 0.0)


def abandon(runs: List[RunBase]) -> None:
    """stop()'s grace has ended with `runs` still running: each is marked cancelled and
    over (its later progress, steps and result are not written), and logged. One that
    still held its job keeps its lease until it runs out (it is renewed no more): then the
    job runs again, its attempt counted, as after a crash, rather than at once beside a
    handler that may still be at work."""
    for run in runs:
        held = run._abandon()
        log.warning("tinyq: stop(): job %s (attempt %s) still running when the grace ended: abandoned, "
                    "its result will not be settled; %s", run.id, run.attempt,
                    "it still holds its job until its lease runs out (no longer renewed), then runs again"
                    if held else "it no longer held its job (cancelled, timed out or taken by a later attempt)")


# -- signals --------------------------------------------------------------------------------


def stop_on_signals(stop: Callable[[], None], loop: Any = None) -> Callable[[], None]:
    """In the main thread, SIGTERM and SIGINT call stop(), and a second signal ends a drain
    that hangs. Without `loop` (threads) the first signal puts the previous handlers back,
    so a second one acts as before work(). With an asyncio `loop` the signals go through
    the loop: each runs the loop's own handler for it too if the app had one (aiohttp's
    run_app has); a second one puts the previous handlers back and, without an app's
    handler, raises KeyboardInterrupt (SIGINT: asyncio.run's own first Ctrl-C would only
    cancel work(), which drains again) or is sent again (SIGTERM: it then ends the process
    as before). Returns the function that puts the previous handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: Dict[int, Any] = {}
    app_handlers: Dict[int, Any] = {}

    def restore() -> None:
        while previous:
            sig, old = previous.popitem()
            if loop is not None:
                loop.remove_signal_handler(sig)
                app = app_handlers.pop(sig, None)
                if app is not None:
                    loop.add_signal_handler(sig, app._callback, *app._args)
                    continue
            signal.signal(sig, old if old is not None else signal.SIG_DFL)

    signalled = set()
    handling: Dict[str, Any] = {"now": False, "again": []}

    def on_signal_threads(signum: int) -> None:
        # A signal handler runs between two bytecodes of the main thread, even inside this
        # one: a second signal must not raise in the middle of stop()'s lock (it would stay
        # held, and work() wait on it for ever). One that comes meanwhile is sent again once
        # the previous handlers are back, and acts as before work().
        if handling["now"]:
            handling["again"].append(signum)
            return
        handling["now"] = True
        try:
            signalled.add(signum)
            log.info("tinyq: signal %s: finishing the work in flight (a second one stops waiting)", signum)
            stop()
        finally:
            restore()
            handling["now"] = False
        for again in handling["again"]:
            os.kill(os.getpid(), again)

    def on_signal(signum: int, frame: Any = None) -> None:
        if loop is None:
            on_signal_threads(signum)
            return
        app = app_handlers.get(signum)
        if signum in signalled:
            log.info("tinyq: signal %s again: no more waiting for the work in flight", signum)
            restore()
            if app is not None:
                app._run()
            elif signum == signal.SIGINT:
                raise KeyboardInterrupt
            else:
                os.kill(os.getpid(), signum)
            return
        signalled.add(signum)
        log.info("tinyq: signal %s: finishing the work in flight (a second one stops waiting)", signum)
        stop()
        if app is not None:
            app._run()

    for sig in (signal.SIGTERM, signal.SIGINT):
        old = signal.getsignal(sig)
        if loop is None:
            signal.signal(sig, on_signal)
        else:
            # asyncio has no public getter for a loop's signal handler: _signal_handlers
            app = getattr(loop, "_signal_handlers", {}).get(sig)
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            if app is not None:
                app_handlers[sig] = app
        previous[sig] = old
    return restore
