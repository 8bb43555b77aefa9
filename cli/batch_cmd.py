"""``python main.py batch IMAGES_DIR --seeds SEEDS.geojson -o OUT_DIR``: trace a whole folder.

Images run in parallel: in ``--workers`` local processes (default: one per core;
``--workers 1`` runs in this process), or on an existing Dask cluster given by
``--scheduler tcp://HOST:8786`` (start its workers with ``--nthreads 1``; the scheduler and
the workers must be able to import the project). Every task traces with one numba thread:
parallel images scale better than parallel loops inside one trace, and do not collapse
when other programs share the cores (measured: docs/BENCHMARKS.md, "Batch mode").

One run at a time owns OUT_DIR (a second is refused); Ctrl-C or SIGTERM ends the workers,
writes the summary of what is done and exits with 130 (the same command resumes; with
``--overwrite``, the same command without it). Exit code 0 when everything traced, 1 when an
image, a seed or a segment failed, in this run or as recorded in an output kept from an
earlier one (see ``OUT_DIR/summary.csv``), 2 for a usage error. On a terminal, a progress bar
counts segments: those of the images traced in this process as they are traced, a worker's
once its image is done; elsewhere (a log file) a line says how many images are done every
``PROGRESS_LINE_SECONDS`` and at the end. The processes that trace at once (the local workers
and this one) share ``--memory-budget`` (else the memory available as they start).

GPU workers: locally, ``--backend gpu --workers N`` starts N worker processes, worker *i*
seeing only GPU *i* mod the number of GPUs (``CUDA_VISIBLE_DEVICES``); by default
``GPU_WORKERS_PER_DEVICE`` per GPU (at most one per two cores; none, in this process, for a
batch of at most ``GPU_POOL_MIN_SEGMENTS`` segments): a trace of a short segment is mostly
host work, so several processes keep one GPU busy, as clients of NVIDIA MPS (a running
daemon, or one started for the batch: :func:`gpu.mps.shared_gpu`; ``--no-mps``: by turns,
several times slower). On a cluster, start
single-threaded workers with ``CUDA_VISIBLE_DEVICES`` set, e.g. ``CUDA_VISIBLE_DEVICES=0
dask worker tcp://HOST:8786 --nworkers 8 --nthreads 1`` (and so on for each GPU), where the
project is importable (run it from the project's folder or install it).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import math
import os
import signal
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from cli import explains_gpu_fallback, note, note_compiling, one_line, set_examples
from cli.trace_cmd import (
    add_crs_arguments,
    add_trace_parameters,
    params_from_args,
    use_process_options,
)
from core.backend import TracerBackend
from core.output import printable
from core.vectors import Failure

if TYPE_CHECKING:
    from tqdm import tqdm

    from core.batch import ImageReport

#: Failures listed on stderr; the rest are in summary.csv.
MAX_LISTED_FAILURES = 20
#: Cores of this machine: the default number of local CPU workers (at most
#: ``WINDOWS_MAX_WORKERS`` on Windows).
CORES = os.cpu_count() or 1
#: The most local worker processes on Windows, where ``ProcessPoolExecutor`` refuses more.
WINDOWS_MAX_WORKERS = 61
#: Default local worker processes per GPU, at most one per two cores (measured:
#: docs/BENCHMARKS.md, "Batch on the GPU").
GPU_WORKERS_PER_DEVICE = 8
#: A GPU batch of at most this many segments runs in this process by default: starting GPU
#: workers (about 3 s for 8) costs more than they save (measured as above).
GPU_POOL_MIN_SEGMENTS = 2500
#: Seconds between the lines that tell how many images are done where stderr is no terminal.
PROGRESS_LINE_SECONDS = 30.0
#: Names listed in a note about many images or files; the others are counted.
MAX_LISTED_NAMES = 5
#: What ``help batch`` says after the command's summary (the details: docs/GEO.md, "Batch
#: mode").
ABOUT = """\
Resuming: the same command continues an interrupted batch, skipping the images
whose output records the same seeds, parameters and files (and no failure that
a rerun may not repeat, such as one over the memory budget). One run at a time
owns OUT_DIR (its lock file: OUT_DIR/.roadtracer-batch.lock). Exit code: 0 all
traced (seeds that cross none of the images are counted in summary.json, not
failures), 1 something failed (see OUT_DIR/summary.csv), 2 usage error, 130
interrupted (the summary of what is done is written)."""


def positive_int(text: str) -> int:
    """Parse a worker count (an integer >= 1)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def most_workers() -> float:
    """The most local worker processes this system allows: ``WINDOWS_MAX_WORKERS`` on
    Windows, else no limit (``math.inf``)."""
    return WINDOWS_MAX_WORKERS if sys.platform == "win32" else math.inf


def worker_count(text: str) -> int:
    """Parse ``--workers``: a positive integer, at most :func:`most_workers`."""
    value = positive_int(text)
    if value > most_workers():
        raise argparse.ArgumentTypeError(f"at most {WINDOWS_MAX_WORKERS} local worker "
                                         f"processes on Windows, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = f"{parser.description}\n\n{ABOUT}"
    set_examples(parser, "tiles/ --seeds roads.geojson -o traced/",
                 "tiles/ --seeds roads.geojson -o traced/ --crs source --workers 1",
                 "scans/ --seeds rivers.geojson -o traced/ --line-kind river --overwrite")
    parser.add_argument("images_dir", metavar="IMAGES_DIR",
                        help="folder of images (PNG, JPEG, TIFF/GeoTIFF, JPEG 2000; world "
                        "files beside)")
    parser.add_argument("--seeds", required=True, metavar="SEEDS",
                        help="GeoJSON or GeoJSONSeq LineStrings: lon/lat (or the CRS of a crs "
                        "member), or pixels with properties.image (source_image in roadtracer's "
                        "pixel exports)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT_DIR",
                        help="folder for <image stem>.geojson, summary.json and summary.csv")
    parser.add_argument("--overwrite", action="store_true",
                        help="trace images again whose output exists (default: skip them)")
    parser.add_argument("--workers", type=worker_count,
                        help="local worker processes (default: one per core, "
                             f"{min(CORES, most_workers())} here; "
                             f"with the GPU backend {GPU_WORKERS_PER_DEVICE} per GPU, at most "
                             "one per two cores, or 1 for a batch of at most "
                             f"{GPU_POOL_MIN_SEGMENTS} segments; 1 runs in this process)")
    parser.add_argument("--no-mps", dest="mps", action="store_false",
                        help="let local GPU workers share the GPU by turns instead of as clients "
                             "of NVIDIA's Multi-Process Service (default: a running MPS daemon, "
                             "or one started for the batch where the driver has "
                             "nvidia-cuda-mps-control)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="run on this Dask scheduler (tcp://HOST:PORT) instead of locally")
    parser.add_argument("--evidence-dir", metavar="DIR",
                        help="folder of rasters on each image's grid (or georeferenced: "
                             "resampled onto it), named like the images "
                             "(e.g. a segmentation model's road-probability maps): traced "
                             "instead of the images' pixels (with --score evidence: cost 1 - p)")
    add_crs_arguments(parser)
    add_trace_parameters(parser)


@functools.cache
def worker_backend(name: str) -> TracerBackend:
    """The backend ``name`` in this process (made once per worker process)."""
    from gpu.select import choose_backend

    return choose_backend(name, batch=True)[0]


def gpu_likely(backend: str) -> bool:
    """Whether ``--backend`` ``backend`` will trace on the GPU, guessed without touching a
    device (``auto``: where pycuda is installed)."""
    return backend == "gpu" or (backend == "auto"
                                and importlib.util.find_spec("pycuda") is not None)


def worker_modules(gpu: bool) -> tuple[str, ...]:
    """What local workers import, for the server they are forked from to import once: the
    batch module and the surface model's runtime (with ``gpu``, the GPU backend and the onnx
    model reader; else ONNX Runtime)."""
    from core.batch import WORKER_MODULES

    return (*WORKER_MODULES, *(("gpu.backend", "onnx") if gpu else ("onnxruntime",)))


def _same(backend: TracerBackend) -> TracerBackend:
    return backend


def check_scheduler_address(address: str) -> None:
    """BadParameter unless Dask's distributed package is installed and ``address`` reads as
    a Dask scheduler address (``PROTOCOL://HOST:PORT``, e.g. ``tcp://10.0.0.5:8786``)."""
    from core.errors import BadParameter

    try:
        from distributed.comm.addressing import parse_address, parse_host_port
    except ImportError as exc:
        raise BadParameter(f"--scheduler needs Dask's distributed package, which cannot be "
                           f"imported ({exc}): install the batch extra, "
                           'pip install -e ".[batch]"') from None
    try:
        protocol, location = parse_address(address, strict=True)
        if protocol in ("tcp", "tls"):
            parse_host_port(location)
    except (ValueError, TypeError):
        raise BadParameter(f"--scheduler {address!r} is not a Dask scheduler address such as "
                           "tcp://HOST:8786") from None


def local_workers(requested: int | None, tasks: int, gpus: int,
                  segments: int | None = None) -> int:
    """Local worker processes for ``tasks`` images of at most ``segments`` segments:
    ``requested`` (None: one per core, or with ``gpus`` > 0 GPUs ``GPU_WORKERS_PER_DEVICE`` per
    GPU, at most one per two cores, and one when ``segments`` is at most
    ``GPU_POOL_MIN_SEGMENTS``; never more than :func:`most_workers`), never more than the
    images."""
    if requested is None:
        if not gpus:
            requested = CORES
        elif segments is not None and segments <= GPU_POOL_MIN_SEGMENTS:
            requested = 1
        else:
            requested = min(GPU_WORKERS_PER_DEVICE * gpus, CORES // 2)
        requested = min(requested, most_workers())
    return max(min(requested, tasks), 1)


def open_executor(args: argparse.Namespace, tasks: int, gpu: bool,
                  segments: int | None = None, modules: tuple[str, ...] | None = None):
    """Where to run ``tasks`` images of at most ``segments`` segments: ``(executor or None,
    closer(interrupted), local workers or None on a cluster)``; local workers are forked
    from a server that imports ``modules`` (default :func:`worker_modules` of ``gpu``)."""
    if tasks and args.scheduler:
        from distributed import Client

        from core.errors import BadParameter

        try:
            client = Client(args.scheduler, timeout="10s", set_as_default=False)
        except (OSError, ValueError, TypeError) as exc:
            raise BadParameter(f"cannot reach Dask scheduler {args.scheduler}: "
                               f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                               ) from None
        return client.get_executor(pure=False), lambda interrupted: client.close(), None
    gpus = 0
    if gpu:
        from gpu.select import gpu_device_count

        gpus = max(gpu_device_count(), 1)
    workers = local_workers(args.workers, tasks, gpus, segments)
    if workers > 1:
        from core.batch import local_executor, stop_local_executor

        executor = local_executor(workers, gpus, modules or worker_modules(gpu))
        return executor, functools.partial(stop_local_executor, executor), workers
    return None, lambda interrupted: None, 1


class SegmentProgress:
    """The batch's progress in segments on ``bar``: advanced as the images traced in this
    process are (:meth:`traced`), and by the rest of an image's ``most_segments`` (per image
    name) when its report comes (:meth:`finished`). With ``line_seconds``, a line on stderr
    also says how many images are done, at most every ``line_seconds`` and once all are (for
    a log, where there is no bar)."""

    def __init__(self, bar: tqdm, most_segments: dict[str, int],
                 line_seconds: float | None = None):
        self.bar = bar
        self.most_segments = most_segments
        self.line_seconds = line_seconds
        self.images = 0
        self.of_current = 0  # traced in this process, of the image whose report comes next
        self.line_time = time.monotonic()
        bar.set_postfix_str(f"0/{len(most_segments)} images", refresh=False)

    def traced(self, segments: int) -> None:
        """``segments`` more traced in this process."""
        self.of_current += segments
        self.bar.update(segments)

    def finished(self, image: str, status: str) -> None:
        """The report of ``image`` came, with ``status``."""
        self.images += 1
        self.bar.set_postfix_str(f"{self.images}/{len(self.most_segments)} images, "
                                 f"{printable(image)}: {status}", refresh=False)
        self.bar.update(self.most_segments[image] - self.of_current)
        self.of_current = 0
        if self.line_seconds is not None and (
                self.images == len(self.most_segments)
                or time.monotonic() - self.line_time >= self.line_seconds):
            print(f"{self.images}/{len(self.most_segments)} images done", file=sys.stderr)
            self.line_time = time.monotonic()


def listed(names: list[str]) -> str:
    """``names`` for a note: the first ``MAX_LISTED_NAMES``, then how many more."""
    more = len(names) - MAX_LISTED_NAMES
    return ", ".join(map(printable, names[:MAX_LISTED_NAMES])) + (
        f" and {more} more" if more > 0 else "")


def seed_failure_line(failure: Failure) -> str:
    """The stderr line of a seed that was not traced."""
    where = "" if failure.seed is None else f" {failure.seed}"
    return f"bad seed{where}: {failure.reason}"


def _interrupt(signum, frame) -> None:
    """SIGINT and SIGTERM handler: stop (the workers are ended and the summary of what is
    done is written); further SIGINTs and SIGTERMs, while stopping, are ignored, so that a
    quick second Ctrl-C (or ``timeout``'s signal to the process and again to its group) does
    not cut the stopping short: no lost summary, no worker left running."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    """Run the batch, owning the output folder meanwhile; Ctrl-C or SIGTERM stops it
    (:func:`_interrupt`), and stderr closing (``2>&1 | head -1``) does not stop it."""
    from core.batch import lock_output_folder
    from core.output import PipeTolerantStream
    from core.surface import model_files

    use_process_options(args)
    if args.scheduler:
        check_scheduler_address(args.scheduler)
    previous = {number: signal.signal(number, _interrupt)
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        with contextlib.redirect_stderr(PipeTolerantStream(sys.stderr)), \
                lock_output_folder(args.output,
                                   inputs=(args.seeds, *model_files(args.surface_model))):
            return run_batch(args)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def run_batch(args: argparse.Namespace) -> int:
    """:func:`run` in an output folder this process owns."""
    from core.batch import plan_batch
    from gpu.mps import shared_gpu

    start = time.perf_counter()
    plan = plan_batch(args.images_dir, args.seeds, args.output, params_from_args(args),
                      overwrite=args.overwrite, crs=args.crs, image_crs=args.image_crs,
                      bands=args.bands, evidence_dir=args.evidence_dir)
    segments = sum(task.most_segments for task in plan.tasks)
    gpu = gpu_likely(args.backend)
    pool = not args.scheduler and local_workers(args.workers, len(plan.tasks), int(gpu),
                                                segments) > 1
    with contextlib.ExitStack() as stack:
        # Before any process here initialises CUDA (this one, the workers' server's children).
        sharing, sharing_notes = "turns", []
        if pool and gpu and args.mps and stack.enter_context(
                shared_gpu(notify=sharing_notes.append)):
            sharing = "mps"
        return _run_planned(args, plan, segments, pool, sharing, sharing_notes, start)


def _run_planned(args: argparse.Namespace, plan, segments: int, pool: bool, sharing: str,
                 sharing_notes: list[str], start: float) -> int:
    """:func:`run_batch` once planned: ``pool`` whether local workers are likely,
    ``sharing`` how GPU workers share a GPU ("mps" or "turns"), ``sharing_notes`` why not
    under MPS (told only once the backend is known to be the GPU's)."""
    from tqdm import tqdm

    from core.batch import (
        SUMMARY_CSV,
        SUMMARY_JSON,
        batch_failed,
        check_batch_params,
        images_per_call,
        run_tasks,
        start_worker_server,
        summarize,
        write_output,
        write_summary,
    )
    from core.surface import UNKNOWN_GROUND_NOTE
    from core.tracer import reads_ground_resolution
    from gpu.select import choose_backend
    modules = worker_modules(gpu_likely(args.backend))
    # One numba thread per task: images run in parallel instead (see the module docstring).
    tasks = [replace(task, threads=1) for task in plan.tasks]
    reports = []
    backend, close, workers, interrupted = None, None, None, False
    try:  # from here a Ctrl-C keeps what is done: the summary, then a resumable exit
        if pool:
            start_worker_server(modules)  # it imports what workers need while the backend is made
        # Resolve "auto" once, here (the GPU's kernels built before the workers start).
        backend, backend_note = choose_backend(args.backend,
                                               notify=lambda text: note(args, text))
        if explains_gpu_fallback(args, backend):
            note(args, f"using {backend_note}")
        note_compiling(args, backend)
        if backend.name == "gpu":
            for text in sharing_notes:
                note(args, text)
        for failure in plan.seed_failures:
            print(one_line(seed_failure_line(failure)), file=sys.stderr)
        passed_over = [f"{count} {what}" for count, what in (
            (plan.subfolders, "subfolder(s)"), (plan.broken_links, "broken link(s)")) if count]
        if passed_over:
            note(args, f"skipping {' and '.join(passed_over)} in {printable(args.images_dir)} "
                 "(batch reads the images directly in IMAGES_DIR)")
        if plan.skipped:
            note(args, f"skipping {len(plan.skipped)} image(s) whose output exists "
                 "(--overwrite traces them again)")
        if plan.changed:
            note(args, f"tracing {len(plan.changed)} image(s) again: their seeds, parameters "
                 f"or files changed since the earlier run, or their output has no record of "
                 f"them ({listed(plan.changed)})")
        if plan.retried:
            note(args, f"tracing {len(plan.retried)} image(s) again whose output records "
                 "failures a rerun may not repeat (over the memory budget, pixels that could "
                 f"not be read, …): {listed(plan.retried)}")
        if plan.orphans:
            note(args, f"{len(plan.orphans)} output(s) in {printable(args.output)} belong to "
                 "no image of IMAGES_DIR (an earlier batch wrote them for an image since "
                 "removed or renamed, or now written under another name); they are kept, "
                 f"delete them if they are stale: {listed(plan.orphans)}")
        executor, close, workers = open_executor(args, len(plan.tasks), backend.name == "gpu",
                                                 segments, modules)
        if workers and workers > 1:
            # The local workers and this process each trace with a share of the memory
            # budget (the plan was checked with all of it): over it, a usage error, now.
            check_batch_params(params_from_args(args))
        # Workers make that backend once each; in this process, the one made above traces
        # (all the images, or those it takes back from local workers while they start).
        here = functools.partial(_same, backend)
        factory = functools.partial(worker_backend, backend.name) if executor is not None \
            else here
        # None: a bar only on a terminal (tqdm's test); none for no segments to trace.
        with tqdm(total=segments, unit="segment", file=sys.stderr,
                  disable=True if args.quiet or not segments else None) as bar:
            lines = None if args.quiet or sys.stderr.isatty() else PROGRESS_LINE_SECONDS
            progress = SegmentProgress(bar, {os.path.basename(task.image): task.most_segments
                                             for task in tasks}, lines)
            images = images_per_call(len(tasks), workers) if workers else 1
            # Segments traced are counted only for a bar shown: counting splits the traces
            # into short runs (a GPU traces fewer segments at once).
            for report, document in run_tasks(tasks, factory, executor, images,
                                              here if workers else None,
                                              None if bar.disable else progress.traced,
                                              plan.out_dir):
                reports.append(write_output(plan, report, document))
                progress.finished(report.image, report.status)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if close is not None:
            close(interrupted)
    backend_name = backend.name if backend is not None else args.backend  # None: stopped first
    settings = {"seeds": args.seeds, "backend": backend_name, "crs": args.crs,
                "image_crs": args.image_crs, "bands": args.bands,
                "evidence_dir": args.evidence_dir,
                "params": params_from_args(args).as_dict(),
                "workers": workers,
                "gpu_sharing": sharing if backend_name == "gpu" and workers and workers > 1
                else None,
                "scheduler": args.scheduler, "interrupted": interrupted}
    summary = summarize(plan, reports, time.perf_counter() - start, settings)
    write_summary(plan.out_dir, summary)
    if interrupted:
        resume = ("run it again without --overwrite to resume" if args.overwrite
                  else "the same command resumes")
        print(f"stopped after {len(reports)} of {len(tasks)} image(s); {resume}",
              file=sys.stderr)
        raise KeyboardInterrupt
    pixel = [report.image for report in reports if report.coordinate_space == "pixel"]
    if pixel:
        params = params_from_args(args)
        unscaled = (f"; their ground resolution is unknown too: {UNKNOWN_GROUND_NOTE} "
                    "(give --ground-resolution M to run it once)" if reads_ground_resolution(params)
                    and params.ground_resolution is None else "")
        note(args, f"{len(pixel)} image(s) have no usable georeferencing; their GeoJSON "
             f"coordinates are pixels (x = column, y = row){unscaled}: {listed(pixel)}")
    report_failures(reports + plan.skipped)
    outside = summary["seeds_outside"]["count"]
    if outside:
        note(args, f"{outside} seed line(s) cross none of the images: not traced (counted, "
             f"the first ids listed: seeds_outside in {SUMMARY_JSON})")
    totals = summary["totals"]
    if not args.quiet:
        bad_seeds = f"{len(plan.seed_failures)} seed(s) failed; " if plan.seed_failures else ""
        print(f"{totals['images']} image(s): {totals['ok']} ok, {totals['partial']} partial, "
              f"{totals['failed']} failed, {totals['skipped']} skipped; {bad_seeds}"
              f"{totals['segments_traced']} segment(s) traced in {summary['seconds']:.1f} s; "
              f"summary in {plan.out_dir / SUMMARY_JSON} and {SUMMARY_CSV}", file=sys.stderr)
    return 1 if batch_failed(summary) else 0


def report_failures(reports: list[ImageReport]) -> None:
    """Print the failures of ``reports``, the first ``MAX_LISTED_FAILURES``, one
    a line: ``failed: IMAGE: why`` for an image without output, ``partial: IMAGE: seed S
    segment K: why`` for a segment's, ``(earlier run)`` after the image of a kept output."""
    failures = [(report, failure) for report in reports for failure in report.failures]
    for report, failure in failures[:MAX_LISTED_FAILURES]:
        kept = " (earlier run)" if report.output_status else ""
        print(f"{report.output_status or report.status}: {one_line(printable(report.image))}"
              f"{kept}: {one_line(failure.describe())}", file=sys.stderr)
    if len(failures) > MAX_LISTED_FAILURES:
        print(f"… and {len(failures) - MAX_LISTED_FAILURES} more failure(s)", file=sys.stderr)
