"""Build of the compiled fast paths (everything else is declared in pyproject.toml).

``dissectors.nats._speedups`` is a plain C extension (no Cython, no build dependency
beyond a C compiler and Python's headers, both on every supported machine).  It is
``optional``: if it cannot be built the pure-Python reference runs instead, and
``msgcap dissect`` says so; the tests require it (tests/perf/test_fastpath.py).

``dissectors.pulsar._speedups`` (the Pulsar batch split of ``dissectors/pulsar/fastpath.py``)
is built on the same terms; its reference is ``dissectors/pulsar/session.py``
(tests/pulsar/test_fastpath.py, tests/perf/test_pulsar_fastpath.py).

``reassembly._engine`` (the native packet engine, issue 22: record walk, decode,
in-order TCP delivery) is built the same way and is optional for the same reason; the
reference is ``reassembly.network``/``flows``/``tcp`` (tests/perf/test_engine_native.py).
``reassembly/_engine.c`` includes ``reassembly/_pcapng_walk.c``, the pcapng block walk
(it makes that file's batches, whose types are static there); the reference of the walk
is ``reassembly.pcapng`` (tests/perf/test_engine_pcapng.py).  It also includes
``reassembly/_conn_keys.c``, the connection keys of Spark's split ingest (reference:
``analyzer.spark.task.conn_key``, tests/spark/test_conn_keys.py).

``dissectors.proto._walk`` (STAN and Liftbridge row values from clean protobufs,
``dissectors/proto/walk.py``) likewise; its reference is ``dissectors.proto.wire``
(tests/stan/test_walk.py).

``dissectors._rows`` (row dicts transposed into one list per key, or their simple columns
straight into Arrow buffers, for ``dissectors.schema.rows_to_batch`` and the payload rows'
envelope) likewise; its references are that module's Python loop and ``pa.array``
(tests/analyzer/test_schema.py, tests/perf/test_stan_liftbridge_columns.py).
"""

from setuptools import Extension, setup

_WIRE_H = "dissectors/proto/_wire.h"  # the protobuf varint and scalars the three share

setup(
    ext_modules=[
        Extension(
            "dissectors.nats._speedups",
            ["dissectors/nats/_speedups.c"],
            depends=[_WIRE_H],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(  # the Pulsar batch split (dissectors/pulsar/fastpath.py), same terms
            "dissectors.pulsar._speedups",
            ["dissectors/pulsar/_speedups.c"],
            depends=[_WIRE_H],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(  # STAN/Liftbridge row values from clean protobufs (dissectors/proto/walk.py)
            "dissectors.proto._walk",
            ["dissectors/proto/_walk.c"],
            depends=[_WIRE_H],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(  # row dicts into one list per key (dissectors.schema.rows_to_batch)
            "dissectors._rows",
            ["dissectors/_rows.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(  # one unit: _engine.c includes _pcapng_walk.c, _conn_keys.c (module docstring)
            "reassembly._engine",
            ["reassembly/_engine.c"],
            depends=["reassembly/_pcapng_walk.c", "reassembly/_conn_keys.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wno-missing-field-initializers"],
            optional=True,
        ),
    ]
)
