"""Background tasks whose failure is said: Home Assistant keeps their results nowhere.

A task made with ``async_create_background_task`` is cancelled at unload and awaited by nobody:
an exception in it reached the log only when Python collected the task ("Task exception was
never retrieved"), late or never (a ``RecursionError`` took asyncio's own handler down with it).
``watched`` logs it at once, once, with the task's name.
"""

import asyncio
import logging

_LOGGER = logging.getLogger(__package__)


def watched[T](task: asyncio.Task[T]) -> asyncio.Task[T]:
    """``task``, whose exception (not its cancellation) is logged with its name when it ends."""
    task.add_done_callback(_report)
    return task


def _report(task: asyncio.Task[object]) -> None:
    if task.cancelled():
        return
    if (err := task.exception()) is not None:
        _LOGGER.error("The background task %r failed", task.get_name(), exc_info=err)
