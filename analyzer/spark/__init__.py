"""msgcap on Spark (DESIGN §6; user guide: docs/spark.md).

* ``analyzer.spark.ingest.ingest(spark, captures, out, ...)``: the dataset ``msgcap
  dissect`` writes, one task per file or, for a huge capture, byte ranges whose frames are
  re-keyed by connection and dissected in ``mapInArrow`` tasks; paths or URIs
  (``analyzer.spark.storage``), progress on stderr (``analyzer.spark.progress``).
* ``analyzer.spark.analyses``: ``load`` a dataset, ``run`` the analyses defined once as
  SQL in ``analyzer.analyses`` (DataFrames by name); ``run_all`` writes them as Parquet.
* ``analyzer.spark.session.get_spark``: the session msgcap uses.

Nothing here imports pyspark at import time except through those functions.
"""
