"""Command line: ``python -m profiler.agent compute|comm|validate``.

Exit codes: 0 done; 2 bad arguments (unknown model, bad shape, bad size range, no CUDA for
``--device cuda``...); 1 the profile failed while running. Errors are one ``error: ...`` line
on stderr, and an ``error`` event when ``--report-to`` is given.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from profiler.agent.posting import RetryPolicy
from profiler.agent.units import ArgumentValueError, parse_int_list, parse_shape, parse_size, parse_size_range

log = logging.getLogger("profiler.agent")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(ValueError):
    """Bad arguments discovered after parsing (exit code 2)."""


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ArgumentValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _shape(text: str) -> tuple[int, ...]:
    try:
        return parse_shape(text)
    except ArgumentValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _batch_sizes(text: str) -> list[int] | None:
    if text.strip().lower() == "auto":
        return None
    try:
        return parse_int_list(text, "batch sizes")
    except ArgumentValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or 'auto')") from None


def _size_range(text: str) -> tuple[int, int]:
    try:
        return parse_size_range(text)
    except ArgumentValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _add_reporting(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("reporting")
    group.add_argument("--out", required=True, help="profile JSON file to write (always written first)")
    group.add_argument("--report-to", metavar="URL", help="POST progress/sample/result/error events here")
    group.add_argument("--token", help="bearer token for --report-to (default: $SRIFTY_TOKEN)")
    group.add_argument(
        "--report-retries", type=_nonneg_int, default=5, help="retries per failed post (default 5)"
    )
    group.add_argument(
        "--report-backoff",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="first retry delay, doubled per retry up to 8 s (default 0.5)",
    )
    group.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m profiler.agent", description="Srifty profiling agent")
    commands = parser.add_subparsers(dest="command", required=True)

    compute = commands.add_parser("compute", help="time training steps of a model per batch size")
    compute.add_argument(
        "--model",
        required=True,
        help="torchvision:NAME, timm:NAME, transformers:MODEL_TYPE or package.module:factory",
    )
    compute.add_argument("--input-shape", required=True, type=_shape, help="per-sample shape, e.g. 3,224,224")
    compute.add_argument(
        "--batch-sizes",
        type=_batch_sizes,
        default=None,
        metavar="N,N,...|auto",
        help="batch sizes to time, or 'auto' (default): find the largest that fits, then a ladder",
    )
    compute.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    compute.add_argument(
        "--precision",
        choices=("fp32", "amp", "bf16"),
        default="fp32",
        help="amp: fp16 autocast + GradScaler on CUDA, bf16 autocast on CPU",
    )
    compute.add_argument(
        "--iters", type=_positive_int, help="timed steps per batch size (default: cpu 5, cuda 20)"
    )
    compute.add_argument(
        "--warmup", type=_nonneg_int, help="untimed steps per batch size (default: cpu 1, cuda 5)"
    )
    compute.add_argument(
        "--min-iters",
        type=_positive_int,
        default=2,
        help="timed steps taken even past --max-seconds-per-size (default 2)",
    )
    compute.add_argument(
        "--max-seconds-per-size",
        type=float,
        help="stop timing a batch size after this many seconds (default: cpu 8, cuda 30)",
    )
    compute.add_argument(
        "--max-memory",
        type=_size,
        metavar="SIZE",
        help="memory bound, e.g. 2GB: on CPU for the estimated peak (default 80%% of MemAvailable), "
        "on CUDA a cap on the caching allocator",
    )
    compute.add_argument(
        "--max-batch", type=_positive_int, default=1024, help="upper bound of the batch search"
    )
    compute.add_argument("--min-batch", type=_positive_int, default=1, help="lower bound of the batch search")
    compute.add_argument("--num-classes", type=_positive_int, default=1000)
    compute.add_argument(
        "--threads", type=_positive_int, help="torch intra-op threads (default: torch's choice)"
    )
    compute.add_argument("--seed", type=int, default=0)
    compute.add_argument(
        "--input-pipeline-seconds",
        type=float,
        default=1.0,
        help="seconds to measure one data-loader worker's rate for the input's kind (image, "
        "small_image, text); 0 skips it (default 1)",
    )
    _add_reporting(compute)

    comm = commands.add_parser("comm", help="time all_reduce over message sizes")
    comm.add_argument("--world-size", required=True, type=_positive_int, help="total ranks over all nodes")
    comm.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    comm.add_argument(
        "--sizes",
        type=_size_range,
        metavar="MIN..MAX",
        help="message sizes, e.g. 1KB..256MB (default: gloo 1KB..64MB, nccl 1KB..1GB)",
    )
    comm.add_argument("--factor", type=int, choices=(2, 4), default=2, help="ratio between successive sizes")
    comm.add_argument(
        "--repeats", type=_positive_int, help="timed collectives per size (default: gloo 10, nccl 20)"
    )
    comm.add_argument(
        "--warmup", type=_nonneg_int, help="untimed collectives per size (default: gloo 2, nccl 5)"
    )
    comm.add_argument("--master-addr", help="rendezvous host (node 0) for multi-node groups")
    comm.add_argument(
        "--master-port", type=_positive_int, help="rendezvous port (default: a free one locally, else 29500)"
    )
    comm.add_argument("--rank", type=_nonneg_int, help="run as exactly this global rank, without spawning")
    comm.add_argument("--nnodes", type=_positive_int, default=1)
    comm.add_argument("--node-rank", type=_nonneg_int, default=0)
    comm.add_argument("--timeout", type=float, default=600.0, help="process-group timeout in seconds")
    _add_reporting(comm)

    validate = commands.add_parser("validate", help="check profile files against the version-1 schema")
    validate.add_argument("files", nargs="+")
    return parser


def _setup_logging(quiet: bool) -> int:
    level = logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(message)s", stream=sys.stderr)
    return level


def _token(args: argparse.Namespace) -> str | None:
    return args.token or os.environ.get("SRIFTY_TOKEN")


def _retry_policy(args: argparse.Namespace) -> RetryPolicy:
    return RetryPolicy(attempts=args.report_retries + 1, initial_delay_s=max(args.report_backoff, 0.0))


def _resolve_device(requested: str | None) -> str:
    import torch

    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested != "cpu" and not requested.startswith("cuda"):
        raise UsageError(f"--device must be cpu, cuda or cuda:N, got {requested!r}")
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError("--device cuda, but torch sees no CUDA device")
        index = requested.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise UsageError(f"--device {requested}: only {torch.cuda.device_count()} GPU(s) visible")
    return requested


def run_compute(args: argparse.Namespace) -> int:
    from profiler.agent.compute import ComputeOptions, ComputeProfiler
    from profiler.agent.output import write_profile
    from profiler.agent.run_events import make_event_poster
    from profiler.agent.schema import validate_profile
    from workload.specs import SpecError, parse_spec

    reporter = make_event_poster(args.report_to, _token(args), retry=_retry_policy(args))
    try:
        try:
            parse_spec(args.model)
            if args.threads:
                import torch

                torch.set_num_threads(args.threads)
            options = ComputeOptions(
                model=args.model,
                input_shape=args.input_shape,
                batch_sizes=args.batch_sizes,
                device=_resolve_device(args.device),
                precision=args.precision,
                iters=args.iters,
                warmup=args.warmup,
                min_iters=args.min_iters,
                max_seconds_per_size=args.max_seconds_per_size,
                max_memory=args.max_memory,
                max_batch=args.max_batch,
                min_batch=args.min_batch,
                num_classes=args.num_classes,
                seed=args.seed,
                input_pipeline_seconds=args.input_pipeline_seconds,
            ).resolved()
            profiler = ComputeProfiler(options, reporter)
        except (SpecError, UsageError, ValueError) as exc:  # bad option values
            return _fail(reporter, str(exc), EXIT_USAGE)
        try:
            doc = profiler.run()
        except SpecError as exc:  # the model spec only fails once it is loaded
            return _fail(reporter, str(exc), EXIT_USAGE)
        path = write_profile(doc, args.out)  # the file first: a dead server must not cost it
        validate_profile(doc)
        reporter.result(doc)
        log.info("wrote %s", path)
        return EXIT_OK
    except KeyboardInterrupt:
        return _fail(reporter, "interrupted", EXIT_FAILED)
    except Exception as exc:
        log.debug("compute failed", exc_info=True)
        return _fail(reporter, f"{type(exc).__name__}: {exc}", EXIT_FAILED)
    finally:
        reporter.close()


def run_comm_command(args: argparse.Namespace) -> int:
    from profiler.agent.comm import CommError, CommOptions, run_comm

    low, high = args.sizes if args.sizes else (None, None)
    options = CommOptions(
        world_size=args.world_size,
        out=args.out,
        backend=args.backend,
        min_size=low,
        max_size=high,
        factor=args.factor,
        repeats=args.repeats,
        warmup=args.warmup,
        master_addr=args.master_addr,
        master_port=args.master_port,
        rank=args.rank,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        timeout_s=args.timeout,
        report_to=args.report_to,
        token=_token(args),
        report_retry=_retry_policy(args),
        log_level=logging.WARNING if args.quiet else logging.INFO,
    )
    try:
        options = options.resolved()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        doc = run_comm(options)
    except CommError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:
        log.debug("comm failed", exc_info=True)
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if doc is not None:
        log.info("wrote %s", options.out)
    return EXIT_OK


def run_validate(args: argparse.Namespace) -> int:
    from profiler.agent.schema import ProfileValidationError, validate_profile

    status = EXIT_OK
    for name in args.files:
        try:
            with open(name) as handle:
                validate_profile(json.load(handle))
        except (OSError, json.JSONDecodeError, ProfileValidationError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            status = EXIT_FAILED
        else:
            print(f"{name}: ok")
    return status


def _fail(reporter: object, message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    reporter.error(message)  # type: ignore[attr-defined]
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 with a usage message on bad syntax
    if args.command == "validate":
        return run_validate(args)
    _setup_logging(args.quiet)
    if args.command == "compute":
        return run_compute(args)
    return run_comm_command(args)
