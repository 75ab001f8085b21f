"""How many intra-op threads torch trains with, and how they wait: the cores free now, unless the user chose a count.

torch's own default, one OpenMP thread per core that spins a while at every barrier before it sleeps, collapses on
a machine where other processes hold the cores: the threads meet at a barrier after every operation, a spinning
thread burns the slice its partner needs, and each step waits for whichever thread the scheduler set aside. On the
2-core machine at a load of 8–18 a conversion DNN epoch took 21–53 s against 1.3–2.5 s for the same 2 threads
sleeping at once (``OMP_WAIT_POLICY=PASSIVE``) and 3–4 s on 1 thread
(benchmarks/training.md#threads_under_loadpy-thread-settings-beside-busy-processes).
"""

from __future__ import annotations

import glob
import os
import sys
from contextlib import contextmanager
from pathlib import Path

#: The environment variables through which a user fixes the count before torch starts.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: Those through which a user sets how OpenMP threads wait (GNU's, which torch uses here, and Intel's).
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")

_given: int | None = None  # the count last given to set_threads: the user's choice
_automatic: int | None = None  # the count promokit chose last: a later automatic choice may replace it


def free_cores(load: float | None = None, running: int | None = None, usable: int | None = None,
               total: int | None = None) -> int:
    """The cores this process may run on (``usable``, its CPU affinity) less their share of the busy ones, at least 1.

    Busy is the larger of ``load``, the 1-minute load average, and ``running`` − 1, the tasks runnable now other
    than this one (/proc/loadavg): the average lags a minute behind a job that has just started. Both count the
    whole machine's ``total`` cores, so ``usable`` of them carry ``usable / total`` of it. Read now when not given.
    """
    usable = usable or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    total = total or os.cpu_count() or usable
    if load is None or running is None:
        now_load, now_running = _load_now()
        load = now_load if load is None else load
        running = now_running if running is None else running
    busy = max(load, running - 1) * usable / max(total, usable)
    return max(1, usable - round(busy))


def _load_now() -> tuple[float, int]:
    """The 1-minute load average and the tasks runnable now; (0, 1) where the system does not say."""
    try:
        fields = Path("/proc/loadavg").read_text().split()
        return float(fields[0]), int(fields[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return (os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0), 1


def torch_default_threads() -> int:
    """The intra-op count torch starts with when nobody sets one: one per physical core."""
    cores = {(Path(path).read_text(), Path(path).with_name("physical_package_id").read_text())
             for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/core_id")}
    return len(cores) or os.cpu_count() or 1


def user_threads() -> int | None:
    """The intra-op count the user chose, None when they chose none: a count given to :func:`set_threads`, one of
    :data:`THREAD_VARIABLES` set in the environment, or ``torch.set_num_threads`` to a count other than torch's
    default and other than promokit's last automatic choice."""
    import torch

    current = torch.get_num_threads()
    if current == _given or any(os.environ.get(name) for name in THREAD_VARIABLES):
        return current
    return None if current in (torch_default_threads(), _automatic) else current


def prefer_passive_wait() -> bool:
    """Have OpenMP threads sleep at a barrier at once (``OMP_WAIT_POLICY=PASSIVE``) instead of spinning first, when
    torch is not loaded yet (OpenMP reads the policy as it loads) and the user set none of :data:`WAIT_VARIABLES`.
    Returns whether it did. Subprocesses (Ray workers, LightGBM) inherit it."""
    if "torch" in sys.modules or any(os.environ.get(name) for name in WAIT_VARIABLES):
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def set_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads to ``threads``, the user's choice from then on; None: :func:`free_cores`, unless
    the user chose a count (:func:`user_threads`), which stays. Before torch first loads, :func:`prefer_passive_wait`.
    Returns the count in force."""
    global _given, _automatic
    prefer_passive_wait()
    import torch

    if threads is not None:
        if threads < 1:
            from promokit.data.errors import DataError  # not at the top: `import promokit` loads this module

            raise DataError(f"`threads` must be at least 1, got {threads}")
        _given = threads
        torch.set_num_threads(threads)
        return threads
    chosen = user_threads()
    if chosen is None:
        chosen = _automatic = free_cores()
        torch.set_num_threads(chosen)
    return chosen


@contextmanager
def training_threads(threads: int | None = None):
    """Run a fit under :func:`set_threads` (``threads``; None: the automatic choice) and give torch back the count
    it had afterwards, so that a library call leaves the process as it found it. Yields the count in force."""
    global _given
    import torch

    before, given = torch.get_num_threads(), _given
    try:
        yield set_threads(threads)
    finally:
        _given = given
        torch.set_num_threads(before)
