"""Scale-out on dask.distributed: frame ranges of every stack as tasks, results taken back in frame order.

``workers=N`` starts ``LocalCluster(n_workers=N, threads_per_worker=1, processes=True)``; ``scheduler`` joins
an existing cluster. Each task is ``predict_range(stack, start, stop, settings)``: the stack travels as its
path (a ``Stack`` pickles as path + options), each worker process loads the model once (``cached_model``)
and returns one emitter table per range. The client keeps about two tasks per worker thread in flight,
across stack boundaries, and hands results out strictly in (stack, frame) order, so memory on the client
holds a few ranges' emitters at most and the files are those of a single-process run.

Workers of a LocalCluster start without dask's ``MALLOC_TRIM_THRESHOLD_`` (see ``NO_MALLOC_TRIM``); start
the workers of an existing cluster the same way (unset it in ``distributed.nanny.pre-spawn-environ``).
GPUs: run one worker per GPU, each with ``CUDA_VISIBLE_DEVICES`` set to its own device (e.g. with
``dask-cuda``'s ``LocalCUDACluster``, then pass its address as ``scheduler``) and ``device='cuda'``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from decode_mem.errors import ConfigError
from decode_mem.infer.config import InferConfig
from decode_mem.infer.ranges import split_frames
from decode_mem.infer.work import StackJob, predict_range, warm_up
from decode_mem.io.damage import DamageLog
from decode_mem.io.stack import Stack
from decode_mem.io.table import EmitterTable

TASKS_PER_THREAD = 2
# dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in its workers; any explicit value freezes glibc's mmap threshold,
# every tensor above 128 KiB is then mmapped and zeroed afresh: torch CPU inference ran 3.3x slower (measured)
NO_MALLOC_TRIM = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


class DaskBackend:
    """``with DaskBackend(cfg, jobs) as b: for table, n, peak in b.emitters(job): ...`` for each job in order."""

    def __init__(self, cfg: InferConfig, jobs: list[StackJob]) -> None:
        self.cfg, self.jobs = cfg, jobs
        self._tasks = iter([(job, start, stop) for job in jobs
                            for start, stop in split_frames(job.shape[0], cfg.frames_per_task, job.settings.block,
                                                            start=job.start)])
        self._pending: deque[tuple[StackJob, Any]] = deque()
        self._peaks: dict[str, float] = {}
        self.damage: dict[str, DamageLog] = {}  # stem -> the damage its ranges' workers repaired as they read
        self._current = 0
        self.client: Any = None
        self.cluster: Any = None

    def __enter__(self) -> DaskBackend:
        import dask
        from distributed import Client, LocalCluster

        try:
            if self.cfg.scheduler:
                self.client = Client(self.cfg.scheduler, timeout="30s")
            else:
                with dask.config.set(NO_MALLOC_TRIM):
                    self.cluster = LocalCluster(n_workers=self.cfg.workers, threads_per_worker=1, processes=True,
                                                dashboard_address=None)
                self.client = Client(self.cluster)
        except OSError as e:
            self.__exit__()
            raise ConfigError(f"dask: cannot reach the scheduler {self.cfg.scheduler!r}: {e}") from e
        threads = sum(self.client.nthreads().values()) or 1
        # every worker imports decode_mem and loads the model now, once, not inside the first tasks
        self.client.run(warm_up, str(self.cfg.model_path), self.cfg.device, self.cfg.threads or 1)
        self._in_flight = TASKS_PER_THREAD * threads
        return self

    def __exit__(self, *exc: object) -> None:
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def _submit(self) -> bool:
        task = next(self._tasks, None)
        while task is not None and task[0].index < self._current:  # a job that failed midway
            task = next(self._tasks, None)
        if task is None:
            return False
        job, start, stop = task
        stack = Stack(job.path, **self.cfg.stack_options)  # unopened: pickles as path + options, opens on the worker
        future = self.client.submit(predict_range, stack, start, stop, job.settings, pure=False,
                                    key=f"decode_mem-{job.stem}-{start}-{stop}-{id(self)}")
        self._pending.append((job, future))
        return True

    def emitters(self, job: StackJob) -> Iterator[tuple[EmitterTable, int, float | None]]:
        """``(table, frames, worker peak RssAnon)`` of ``job``'s ranges in frame order (jobs in order)."""
        self._current = job.index
        while self._pending and self._pending[0][0].index < job.index:  # left by a job that failed midway
            self._pending.popleft()[1].cancel()
        while len(self._pending) < self._in_flight and self._submit():
            pass
        while self._pending and self._pending[0][0].index == job.index:
            _, future = self._pending.popleft()
            result = future.result()
            future.release()
            self._submit()
            self.damage.setdefault(job.stem, DamageLog()).extend(result.damage)
            if result.peak_rss_anon_mb is not None:
                key = f"pid {result.pid}"
                self._peaks[key] = max(self._peaks.get(key, 0.0), result.peak_rss_anon_mb)
            yield result.table, result.stop - result.start, result.peak_rss_anon_mb

    def worker_peaks(self) -> dict[str, float]:
        """Peak RssAnon (MB) seen in each worker process while it ran tasks of this run."""
        return dict(self._peaks)
