"""Several threads making the same call at the same moment: for first calls that race."""
from __future__ import annotations

import threading
from typing import Any, Callable


def at_once(fn: Callable[[int], Any], count: int) -> list:
    """fn(0), ..., fn(count - 1), each on a thread of its own, all released by one Barrier once
    every thread has started; their results in order. If any raised, the first error (by index)
    is raised here, after every thread has finished."""
    barrier = threading.Barrier(count)
    results: list = [None] * count
    errors: list = [None] * count

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - raised again below, in the test's thread
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results
