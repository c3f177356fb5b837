"""The SparkSession msgcap uses: ``local[*]`` unless told otherwise, UTC, Arrow on."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

DEFAULTS: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    # The executors' Python workers as ``msgcap``'s own process runs (``analyzer.cliutil``
    # ``prefer_jemalloc``, ``one_blas_thread``): Arrow's jemalloc pool, which gives freed
    # batches back where pyarrow's default (mimalloc) kept them in a worker that every
    # pass of a job reuses (split ``spark ingest`` on the tests' standalone cluster, peak
    # RSS a Python worker: the 103 MB bulk NATS recording 358-365 -> 317-322 MB, the 1 GB
    # one 350-409 -> 333-342 MB, 2026-11-28); and one OpenBLAS thread, since numpy
    # (imported by the tasks) otherwise starts one per core in every worker for no work.
    "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
    "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
}


def parse_conf(items: Iterable[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--conf wants KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def get_spark(master: str | None = None, conf: Mapping[str, str] | None = None,
              app_name: str = "msgcap") -> SparkSession:
    """An active session if there is one (``spark-submit`` made it), else a new one.

    ``master`` defaults to ``$MSGCAP_SPARK_MASTER`` or ``local[*]`` when not run
    under ``spark-submit``.  The Python of this process is used for the workers unless
    ``--conf spark.pyspark.python=...`` or ``PYSPARK_PYTHON`` says otherwise (the
    workers import msgcap: ``analyzer.spark.ingest.check_executors``)."""
    from pyspark.sql import SparkSession

    conf = dict(conf or {})
    # the executors' Python: the user's --conf spark.pyspark.python wins (PySpark reads
    # only PYSPARK_PYTHON when the session is built here), then PYSPARK_PYTHON, then ours
    if conf.get("spark.pyspark.python"):
        os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    master = master or os.environ.get("MSGCAP_SPARK_MASTER")
    if master:
        builder = builder.master(master)
    elif "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", "") and not os.environ.get(
        "SPARK_ENV_LOADED"
    ):
        builder = builder.master("local[*]")
    for key, value in {**DEFAULTS, **conf}.items():  # the user's settings win
        builder = builder.config(key, value)
    return builder.getOrCreate()
