"""A busy neighbour: one process per core that keeps it busy, as other work on a shared machine does.

``python -m bench.busy [N]``: N such processes (one per core) until stopped. ``XIAOZHI_BUSY=1
script/test`` runs the suite beside them; ``python -m bench party --busy`` measures beside them.
"""

from collections.abc import Iterator
import contextlib
import os
import signal
import subprocess
import sys


@contextlib.contextmanager
def neighbours(count: int | None = None) -> Iterator[int]:
    """``count`` processes (one per core) spinning at normal priority while inside; yields how many."""
    spinning = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count or os.cpu_count() or 1)
    ]
    try:
        yield len(spinning)
    finally:
        for process in spinning:
            process.kill()
        for process in spinning:
            process.wait()


def main() -> None:
    """Until SIGTERM or SIGINT, with the neighbours ended either way."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with neighbours(int(sys.argv[1]) if len(sys.argv) > 1 else None) as count, contextlib.suppress(KeyboardInterrupt):
        print(f"busy neighbour: {count} processes spinning", file=sys.stderr, flush=True)
        signal.pause()


if __name__ == "__main__":
    main()
