"""docs/analyses.md is what ``python -m analyzer.analyses.docs`` writes now."""

from analyzer.analyses import ANALYSES
from analyzer.analyses.docs import DOC, render_doc


def test_doc_is_current() -> None:
    text = DOC.read_text("utf-8")
    assert text == render_doc(), "run: python -m analyzer.analyses.docs"
    for name in ANALYSES:
        assert f"## `{name}`" in text
