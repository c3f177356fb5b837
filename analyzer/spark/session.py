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
