"""Where the work of a partitioned job runs: in this process (``local``) or on a Ray cluster (``ray``).

An engine has one verb, :meth:`map`: apply a module-level function to each item (a partition's description:
a file path, an index, a few numbers — never its rows) and return the results in the items' order. With a
``setup`` callable, every worker calls it once and passes what it returns (a loaded model, say) to each
call: ``fn(state, item)``. The domains and ``allocation/`` write those per-partition functions; they never
import Ray.

Ray runs a stateless map as tasks and a map with ``setup`` on a pool of actors, one CPU each, fed as they
finish (a slow partition does not hold the others). Ray core rather than Ray Data: a job here maps input part
*k* to output part *k* with its keys in order, which Ray Data's block repartitioning would not keep. A worker
that dies is restarted by Ray and its partition runs again (tasks and actor calls are retried up to
``RETRIES`` times); since every partition function is deterministic and writes its output atomically, a
retried partition gives the same result. Ctrl-C cancels what is queued or running and raises
``KeyboardInterrupt``.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from promokit.data.errors import DataError

ENGINES = ("local", "ray")
RETRIES = 3  # a partition whose worker died runs again at most this many times
IN_FLIGHT = 2  # calls queued per actor: the next partition is ready when one finishes
CONNECT_SECONDS = 5.0
WAIT_SECONDS = 0.2  # ray.wait returns this often, so that Ctrl-C is seen while a long partition runs


def make_engine(name: str = "local", address: str | None = None, workers: int | None = None):
    """``local`` or ``ray`` (``address``: an existing cluster, else ``$RAY_ADDRESS``, else a cluster on this
    machine with ``workers`` CPUs); ``workers`` also bounds the actors of a map."""
    if name not in ENGINES:
        raise DataError(f"--engine must be one of {list(ENGINES)}, got {name!r}")
    if workers is not None and workers < 1:
        raise DataError(f"--workers must be at least 1, got {workers}")
    if name == "local":
        if address is not None:
            raise DataError("--address names a Ray cluster: use it with --engine ray")
        return LocalEngine()
    return RayEngine(address, workers)


def _progress(label: str, total: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from promokit.cli_support import get_console

    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=get_console(stderr=True), transient=True, disable=total <= 1)


class LocalEngine:
    """One partition after another in this process: memory is bounded by one partition and its result."""

    name = "local"
    workers = 1

    def map(self, fn: Callable, items: Sequence, setup: Callable | None = None, label: str = "partitions") -> list:
        state = setup() if setup is not None else None
        results = []
        with _progress(label, len(items)) as progress:
            task = progress.add_task(label, total=len(items))
            for item in items:
                results.append(fn(item) if setup is None else fn(state, item))
                progress.advance(task)
        return results


class RayEngine:
    """Partitions on a Ray cluster (see the module docstring)."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None):
        import ray

        if not ray.is_initialized():
            address = address or os.environ.get("RAY_ADDRESS")
            if address:
                _check_reachable(address)
            try:
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise DataError(f"cannot start or reach the Ray cluster{f' at {address}' if address else ''}: "
                                f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0]}") from None
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, min(workers or cpus, cpus))

    def map(self, fn: Callable, items: Sequence, setup: Callable | None = None, label: str = "partitions") -> list:
        items = list(items)
        if not items:
            return []
        if setup is None:
            return self._map_tasks(fn, items, label)
        return self._map_actors(fn, items, setup, label)

    def _map_tasks(self, fn, items, label) -> list:
        """Tasks, at most ``workers`` at a time: ``--workers`` bounds a stateless map too."""
        import ray

        call = ray.remote(num_cpus=1, max_retries=RETRIES, retry_exceptions=False)(_apply)
        fn = ray.put(fn)  # a partial's arguments travel once, not with every call
        queue = iter(enumerate(items))
        position = {}

        def feed(_done=None):
            for k, item in queue:
                ref = call.remote(fn, item)
                position[ref] = k
                return ref
            return None

        first = [feed() for _ in range(self.workers)]
        return self._collect([r for r in first if r is not None], position, label, len(items), then=feed)

    def _map_actors(self, fn, items, setup, label) -> list:
        import ray

        worker_class = ray.remote(num_cpus=1, max_restarts=RETRIES, max_task_retries=RETRIES)(_Worker)
        actors = [worker_class.remote(setup) for _ in range(min(self.workers, len(items)))]
        queue = iter(enumerate(items))
        owner, position = {}, {}

        def feed(actor):
            """The next partition's call on ``actor``, or None when every partition is queued."""
            for k, item in queue:
                ref = actor.run.remote(fn, item)
                owner[ref], position[ref] = actor, k
                return ref
            return None

        first = [feed(actor) for actor in actors for _ in range(IN_FLIGHT)]
        try:
            return self._collect([r for r in first if r is not None], position, label, len(items),
                                 then=lambda ref: feed(owner.pop(ref)))
        finally:
            for actor in actors:
                ray.kill(actor)

    @staticmethod
    def _collect(pending: list, position: dict, label: str, total: int, then=None) -> list:
        """Wait for every call, in any order; ``then(ref)`` may start another call when one finishes."""
        import ray

        results: list = [None] * total
        try:
            with _progress(label, total) as progress:
                task = progress.add_task(label, total=total)
                while pending:
                    ready, pending = ray.wait(pending, num_returns=1, timeout=WAIT_SECONDS)
                    if not ready:
                        continue
                    results[position[ready[0]]] = _unwrap(ready[0])
                    progress.advance(task)
                    follow = then(ready[0]) if then is not None else None
                    if follow is not None:
                        pending.append(follow)
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        return results


def _check_reachable(address: str) -> None:
    """Fail in seconds on a ``host:port`` nothing listens on (Ray itself retries its GCS for minutes)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", "local" and other forms Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise DataError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


def _apply(fn: Callable, item):
    """A task: ``fn`` may be any picklable callable (a partial, say), which ``ray.remote`` alone does not take."""
    return fn(item)


class _Worker:
    """A Ray actor holding one worker's state (``setup()``, e.g. a loaded model) across its partitions."""

    def __init__(self, setup: Callable):
        self.state = setup()

    def run(self, fn: Callable, item):
        return fn(self.state, item)


def _unwrap(ref):
    """The result of one call; a :class:`DataError` raised on a worker comes back as the same one-line error."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, DataError):
            raise DataError(str(exc.cause)) from None
        raise

