"""Entry file for ``spark-submit`` (which wants a ``.py`` path, not a console script)::

    SUBMIT=$(python -c 'import analyzer.spark.submit as m; print(m.__file__)')
    spark-submit --master URL "$SUBMIT" spark ingest CAPTURE -o OUT

The arguments are those of ``msgcap``; the session ``spark-submit`` configured is used.
"""

from __future__ import annotations

import sys

from analyzer.cli import main

if __name__ == "__main__":
    sys.exit(main())
