"""``msgcap spark ingest`` / ``msgcap spark analyze`` (wired in ``analyzer.cli``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console

from analyzer.cliutil import (
    EXIT_CLEAN,
    EXIT_DEGRADED,
    EXIT_FAILED,
    STDIN,
    UserError,
    check_capture,
    check_keylog,
    check_output_dir,
    parse_decode_as,
)


def _conf(items: list[str]) -> dict:
    from analyzer.spark.session import parse_conf

    try:
        return parse_conf(items)
    except ValueError as exc:
        raise UserError(str(exc), "write each setting as --conf KEY=VALUE") from None


URI_FIX = ("give a local or shared path, or a URI of a filesystem pyarrow can open here "
           "(s3://, gs://, hdfs:// with its client library; S3 endpoint and keys from the "
           "AWS_* variables; docs/spark.md, 'Object storage')")


def _check_uri(uri: str, *, capture: bool) -> None:
    """``UserError`` unless the filesystem of ``uri`` can be opened (and, for a
    capture, holds that file) -- before Spark starts."""
    import pyarrow.fs as pafs

    from analyzer.spark.storage import resolve

    try:
        fs, path = resolve(uri)
        kind = fs.get_file_info(path).type
    except Exception as exc:  # unknown scheme, missing client library, no access
        raise UserError(f"cannot open {uri}: {exc}", URI_FIX) from None
    if capture and kind != pafs.FileType.File:
        raise UserError(f"{uri} is not a file there", "check the bucket and key "
                        "(`aws s3 ls` or your storage's browser), or give a local path")
    if not capture and kind == pafs.FileType.File:
        raise UserError(f"-o {uri} is a file; the output is a dataset directory",
                        f"give -o a prefix that is not a file, e.g. -o {uri}-out")


def run_ingest(args: argparse.Namespace) -> int:
    """Every argument is checked before Spark starts (which takes seconds)."""
    from analyzer.cli import print_run_summary
    from analyzer.spark.storage import is_uri

    for path in args.captures:
        if path == STDIN:
            raise UserError("spark ingest reads files its tasks can open; - (standard "
                            "input) cannot be split", "save the stream to a file first, or "
                            "use `msgcap dissect - -o OUT`")
        if is_uri(path):
            _check_uri(path, capture=True)
        else:
            check_capture(path)
    if is_uri(args.output):
        _check_uri(args.output, capture=False)
    else:
        check_output_dir(args.output)
    parse_decode_as(args.decode_as)  # the cheap checks before the registry loads
    if args.keylog:
        check_keylog(args.keylog)
    conf = _conf(args.conf)
    from analyzer.runoptions import options_from_args
    from analyzer.spark.ingest import ingest
    from analyzer.spark.progress import Progress
    from analyzer.spark.session import get_spark
    from analyzer.spark.storage import file_size
    from analyzer.spark.storage import normalize as storage_location
    from dissectors.registry import discover

    err = Console(stderr=True)
    options = options_from_args(args, discover())
    spark = get_spark(args.master, conf, "msgcap spark ingest")
    started = time.perf_counter()
    progress = Progress(spark.sparkContext.statusTracker(),
                        sum(file_size(storage_location(c)) for c in args.captures),
                        sys.stderr, bar=args.progress or sys.stderr.isatty()).start()
    try:
        report = ingest(spark, args.captures, args.output, options=options,
                        split_bytes=args.split_bytes, partitions=args.partitions,
                        merge_scopes=args.merge_scopes, progress=progress)
    finally:
        progress.stop()
    elapsed = time.perf_counter() - started
    for path, how in report.how.items():
        err.print(f"{path}: {how}")
    manifest = report.manifest
    print_run_summary(report.results, manifest, elapsed)
    return {"clean": EXIT_CLEAN, "degraded": EXIT_DEGRADED}.get(manifest["status"], EXIT_FAILED)


def check_dataset(path: str) -> None:
    """``UserError`` unless ``path`` is a dataset directory (before Spark starts)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{path} does not exist",
                        "give a dataset directory written by `msgcap dissect CAPTURE -o DIR` "
                        "or `msgcap spark ingest`")
    if not p.is_dir():
        raise UserError(f"{path} is a file, not a dataset directory",
                        f"dissect it first: `msgcap dissect {path} -o DIR`, then give DIR")
    if not ((p / "manifest.json").is_file() or (p / "flows").is_dir()):
        raise UserError(f"{path} is a directory but not a msgcap dataset (no manifest.json, "
                        "no flows/)", f"create one with `msgcap dissect CAPTURE -o {path}`")


def run_analyze(args: argparse.Namespace) -> int:
    from analyzer.spark.analyses import ANALYSES

    check_dataset(args.dataset)
    check_output_dir(args.output)
    unknown = [n for n in args.only or [] if n not in ANALYSES]
    if unknown:
        raise UserError(f"unknown analyses {unknown}", f"give --only one of: "
                        f"{', '.join(ANALYSES)}")
    conf = _conf(args.conf)
    from analyzer.spark.analyses import run_all
    from analyzer.spark.session import get_spark

    spark = get_spark(args.master, conf, "msgcap spark analyze")
    run_all(spark, args.dataset, args.output, names=args.only,
            echo=lambda line: print(line, file=sys.stdout))
    return EXIT_CLEAN
