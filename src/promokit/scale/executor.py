"""Where the work of a partitioned job runs: in this process (``local``) or on a Ray cluster (``ray``).

An executor has two verbs. :meth:`map` applies a module-level function to each item (a partition's description:
a file path, an index, a few numbers — never its rows) and returns the results in the items' order. With a
``setup`` callable, every worker calls it once and passes what it returns (a loaded model, say) to each
call: ``fn(state, item)``. :meth:`train` trains a planned job (:class:`~promokit.training.shard_loop.TrainJob`): in
this process, or data-parallel on Ray Train (:mod:`promokit.scale.train`). The domains and ``allocation/`` write
the per-partition functions and plan the jobs, and are handed an executor (or its ``map``); they never import this
package, nor Ray.

On Ray every map runs on the executor's pool of at most ``workers`` actors, one CPU each, started by the first
map and kept until :meth:`RayExecutor.release`: a job of several passes (the graph layers, a dual method's
sweeps) starts its worker processes once, and each actor keeps the state of the last ``setup`` it ran, so a
model is loaded once per worker for every map that passes that ``setup``. Calls are fed to the actors as they
finish (a slow partition does not hold the others). Ray core rather than Ray Data: a job here maps input part
*k* to output part *k* with its keys in order, which Ray Data's block repartitioning would not keep. A worker
that dies is restarted by Ray and its partition runs again (up to ``RETRIES`` times); since every partition
function is deterministic and writes its output atomically, a retried partition gives the same result. Ctrl-C
stops the pool (what is queued or running) and raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from promokit.console import map_progress
from promokit.data.errors import DataError
from promokit.extras import require_extra

EXECUTORS = ("local", "ray")
RETRIES = 3  # a partition whose worker died runs again at most this many times
IN_FLIGHT = 2  # calls queued per actor: the next partition is ready when one finishes
CONNECT_SECONDS = 5.0
WAIT_SECONDS = 0.2  # ray.wait returns this often, so that Ctrl-C is seen while a long partition runs


def make_executor(kind: str = "local", address: str | None = None, workers: int | None = None):
    """The executor of ``kind``: ``local`` or ``ray`` (``address``: an existing cluster, else ``$RAY_ADDRESS``, else a
    cluster on this machine with ``workers`` CPUs); ``workers`` also bounds the actors of a map."""
    if kind not in EXECUTORS:
        raise DataError(f"`kind` must be one of {list(EXECUTORS)}, got {kind!r}")
    if workers is not None and workers < 1:
        raise DataError(f"`workers` must be at least 1, got {workers}")
    if kind == "local":
        if address is not None:
            raise DataError(f"`address` names a Ray cluster, for the ray executor only (`kind` 'ray'), got {address!r}")
        return LocalExecutor()
    return RayExecutor(address, workers)


class LocalExecutor:
    """One partition after another in this process: memory is bounded by one partition and its result."""

    name = "local"
    workers = 1

    def map(self, fn: Callable, items: Sequence, setup: Callable | None = None, label: str = "partitions") -> list:
        state = setup() if setup is not None else None
        results = []
        with map_progress(label, len(items)) as progress:
            task = progress.add_task(label, total=len(items))
            for item in items:
                results.append(fn(item) if setup is None else fn(state, item))
                progress.advance(task)
        return results

    def train(self, job, checkpoint_dir: str | os.PathLike | None = None, resume: bool = False):
        """Train ``job`` in this process (:func:`promokit.training.shard_loop.train_in_process`): the kept network
        and the history."""
        from promokit.training.shard_loop import train_in_process

        return train_in_process(job, checkpoint_dir, resume)

    def release(self) -> None:
        """Nothing to stop: a map's state lives as long as the map."""


class RayExecutor:
    """Partitions on a Ray cluster (see the module docstring)."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None):
        require_extra("scale", "the Ray executor")
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
        self._actors: list = []  # the pool, started by the first map
        self._setups: list = []  # every setup seen: a setup's token is its index (held, so ids stay unique)

    def map(self, fn: Callable, items: Sequence, setup: Callable | None = None, label: str = "partitions") -> list:
        """On the executor's pool of at most ``workers`` actors, fed as they finish (module docstring)."""
        import ray

        items = list(items)
        if not items:
            return []
        actors = self._pool(min(self.workers, len(items)))
        call = (ray.put(fn), None, None) if setup is None else (ray.put(fn), self._token(setup), ray.put(setup))
        queue = iter(enumerate(items))
        owner, position = {}, {}

        def feed(actor):
            """The next partition's call on ``actor``, or None when every partition is queued."""
            for k, item in queue:
                ref = actor.run.remote(call[0], item, *call[1:])
                owner[ref], position[ref] = actor, k
                return ref
            return None

        first = [feed(actor) for actor in actors for _ in range(IN_FLIGHT)]
        try:
            return self._collect([r for r in first if r is not None], position, label, len(items),
                                 then=lambda ref: feed(owner.pop(ref)))
        except BaseException:
            self.release()  # stops what runs and what is queued on them (Ctrl-C, an error)
            raise

    def train(self, job, checkpoint_dir: str | os.PathLike | None = None, resume: bool = False):
        """Train ``job`` on ``workers`` Ray Train workers (:func:`promokit.scale.train.train_on_ray`), after stopping
        the pool, whose actors hold the CPUs Ray Train's workers need: the kept network and the history."""
        from promokit.scale.train import train_on_ray
        from promokit.training.shard_loop import checkpoint_folder

        checkpoint_folder(checkpoint_dir)  # a local folder: a URI is refused before the pool stops
        self.release()
        return train_on_ray(job, self.workers, checkpoint_dir, resume, retries=RETRIES)

    def release(self) -> None:
        """Stop the pool's actors and free their CPUs (the next map starts a new pool). Ray Train, which needs the
        CPUs, runs after this; the actors also stop when the executor is dropped."""
        import ray

        for actor in self._actors:
            ray.kill(actor)
        self._actors = []

    def _pool(self, n: int) -> list:
        import ray

        if len(self._actors) < n:
            worker_class = ray.remote(num_cpus=1, max_restarts=RETRIES, max_task_retries=RETRIES)(_Worker)
            self._actors += [worker_class.remote() for _ in range(n - len(self._actors))]
        return self._actors[:n]

    def _token(self, setup: Callable) -> int:
        for token, seen in enumerate(self._setups):
            if seen is setup:
                return token
        self._setups.append(setup)
        return len(self._setups) - 1

    @staticmethod
    def _collect(pending: list, position: dict, label: str, total: int, then) -> list:
        """Wait for every call, in any order; ``then(ref)`` may start another call when one finishes."""
        import ray

        results: list = [None] * total
        with map_progress(label, total) as progress:
            task = progress.add_task(label, total=total)
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=WAIT_SECONDS)
                if not ready:
                    continue
                results[position[ready[0]]] = _unwrap(ready[0])
                progress.advance(task)
                follow = then(ready[0])
                if follow is not None:
                    pending.append(follow)
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


class _Worker:
    """A Ray actor of the executor's pool: runs any map's calls, and keeps the state of the last ``setup`` it was given
    (a loaded model, say) for the calls that pass the same one. A restarted actor has none and builds it again."""

    def __init__(self):
        self.token, self.state = None, None

    def run(self, fn: Callable, item, token: int | None = None, setup: Callable | None = None):
        if setup is None:
            return fn(item)
        if token != self.token:
            self.token = self.state = None  # the old state goes first: two models need not fit at once
            self.state, self.token = setup(), token
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

