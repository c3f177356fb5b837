"""``msgcap spark ingest`` / ``msgcap spark analyze`` (wired in ``analyzer.cli``)."""

from __future__ import annotations

import argparse
import sys
import time

from rich.console import Console

EXIT_CLEAN, EXIT_DEGRADED, EXIT_FAILED = 0, 1, 2


def run_ingest(args: argparse.Namespace) -> int:
    from analyzer.cli import _parse_decode_as, print_run_summary
    from analyzer.pipeline import Options
    from analyzer.spark.ingest import ingest
    from analyzer.spark.session import get_spark, parse_conf
    from dissectors.registry import discover

    err = Console(stderr=True)
    try:
        decode_as = _parse_decode_as(args.decode_as)
        registry = discover()
        for name in decode_as.values():
            registry.get(name)
        conf = parse_conf(args.conf)
    except (argparse.ArgumentTypeError, KeyError, ValueError) as exc:
        err.print(f"[red]error:[/] {exc}")
        return EXIT_FAILED
    options = Options(payload_cap=args.payload_cap, decode_as=decode_as,
                      overwrite=args.overwrite)
    if args.keylog:
        options.keylog = args.keylog
    spark = get_spark(args.master, conf, "msgcap spark ingest")
    started = time.perf_counter()
    report = ingest(spark, args.captures, args.output, options=options,
                    split_bytes=args.split_bytes, partitions=args.partitions,
                    merge_scopes=args.merge_scopes)
    elapsed = time.perf_counter() - started
    for path, how in report.how.items():
        err.print(f"{path}: {how}")
    manifest = report.manifest
    print_run_summary(report.results, manifest, elapsed)
    return {"clean": EXIT_CLEAN, "degraded": EXIT_DEGRADED}.get(manifest["status"], EXIT_FAILED)


def run_analyze(args: argparse.Namespace) -> int:
    from analyzer.spark.analyses import ANALYSES, run_all
    from analyzer.spark.session import get_spark, parse_conf

    unknown = [n for n in args.only or [] if n not in ANALYSES]
    if unknown:
        Console(stderr=True).print(
            f"[red]error:[/] unknown analyses {unknown} (known: {', '.join(ANALYSES)})"
        )
        return EXIT_FAILED
    spark = get_spark(args.master, parse_conf(args.conf), "msgcap spark analyze")
    run_all(spark, args.dataset, args.output, names=args.only,
            echo=lambda line: print(line, file=sys.stdout))
    return EXIT_CLEAN
