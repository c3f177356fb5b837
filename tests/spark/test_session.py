"""The SparkSession msgcap builds (``analyzer.spark.session.get_spark``) runs its executors'
Python workers as ``msgcap``'s own process runs: Arrow's jemalloc pool and one OpenBLAS
thread (docs/spark.md, "Settings"), unless the user's ``--conf`` says otherwise.  Run in a
child process: the test session's shared SparkSession is not built by ``get_spark``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import sys
    from analyzer.spark.session import get_spark, parse_conf

    def probe(_):
        import os
        import pyarrow as pa
        yield (os.environ.get("ARROW_DEFAULT_MEMORY_POOL"), os.environ.get("OPENBLAS_NUM_THREADS"),
               pa.default_memory_pool().backend_name)

    spark = get_spark("local[2]", parse_conf(sys.argv[1:]))
    print(sorted(set(spark.sparkContext.parallelize(range(4), 2).mapPartitions(probe).collect())))
    spark.stop()
""")


def _workers(*conf: str) -> str:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ARROW_DEFAULT_MEMORY_POOL", "OPENBLAS_NUM_THREADS", "PYSPARK_PYTHON")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", PROBE, *conf], env=env, capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_executors_python_workers_get_jemalloc_and_one_blas_thread_unless_told() -> None:
    assert _workers() == "[('jemalloc', '1', 'jemalloc')]"
    # the user's settings win (``--conf``)
    assert _workers("spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL=system",
                    "spark.executorEnv.OPENBLAS_NUM_THREADS=4") == "[('system', '4', 'system')]"

