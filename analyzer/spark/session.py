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
    ``PYSPARK_PYTHON`` says otherwise (the workers import msgcap)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    master = master or os.environ.get("MSGCAP_SPARK_MASTER")
    if master:
        builder = builder.master(master)
    elif "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", "") and not os.environ.get(
        "SPARK_ENV_LOADED"
    ):
        builder = builder.master("local[*]")
    for key, value in {**DEFAULTS, **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
