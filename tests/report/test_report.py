"""`msgcap report`: one self-contained HTML file, checked as a file and then in a real
headless browser (Debian's chromium over the DevTools protocol, tests/report/browser.py).

The browser tests do not skip: without chromium they fail and say how to install it
(`.ci/run` installs it)."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.report import PLOT_IDS
from tests.report.browser import Browser, find_chromium
from tests.report.conftest import ARTIFACTS

SCREENSHOT = ARTIFACTS / "report.png"


@pytest.fixture(scope="module")
def report(report_dataset) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    out = ARTIFACTS / "report.html"
    code = main(["report", str(report_dataset), "-o", str(out), "--quiet"])
    assert code == 1  # written; the dataset is degraded (the damaged capture)
    return out


@pytest.fixture(scope="module")
def browser():
    binary = find_chromium()
    if binary is None:
        pytest.fail(
            "chromium not found: the report must be checked in a real browser. Install "
            "Debian's chromium (apt-get update && apt-get install -y chromium; .ci/run does "
            "it) or point MSGCAP_CHROMIUM at a Chromium/Chrome binary.",
            pytrace=False,
        )
    with Browser(binary) as b:
        yield b


@pytest.fixture(scope="module")
def loaded(browser, report) -> Browser:
    browser.load(report.resolve().as_uri())
    browser.evaluate("new Promise(r => setTimeout(r, 500))")  # let plotly finish drawing
    browser.drain(0.5)
    return browser


# ------------------------------------------------------------------ the file


def test_report_is_one_self_contained_file(report, report_dataset):
    page = report.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    # nothing to fetch: no external scripts, stylesheets, images or fonts in the markup
    # (inline scripts set aside: plotly.js holds link texts such as its own home page;
    # what the page really fetches is checked in the browser below)
    markup = re.sub(r"<script>.*?</script>", "<script></script>", page, flags=re.S)
    assert not re.search(r"<script[^>]*\bsrc=", markup)
    assert not re.search(r"<link\b", markup)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", markup)
    assert not re.search(r"@import|url\(", markup)
    # plotly.js itself is inline, once
    assert page.count("Plotly.newPlot(") == len(PLOT_IDS)
    assert len(page) > 3_000_000
    for plot_id in PLOT_IDS:
        assert f'id="{plot_id}"' in page
    flows = json.loads(re.search(r'<script id="flows-data" type="application/json">(.*?)'
                                 r"</script>", page, re.S).group(1))
    from analyzer.summary import Dataset

    assert len(flows["rows"]) == Dataset(report_dataset).read("flows", ["flow_id"]).num_rows


def test_report_of_unknown_flow_is_a_user_error(capsys, report_dataset, tmp_path):
    code = main(["report", str(report_dataset), "-o", str(tmp_path / "r.html"), "--flow",
                 "77"])
    assert code == 2
    assert "no flow 77" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


# ------------------------------------------------------------------ in the browser


def test_console_error_detection_works(browser):
    """The collector must see console.error, uncaught exceptions and failed loads, or a
    clean report would prove nothing."""
    page = ("data:text/html,<p>x</p><script>console.error('boom');</script>"
            "<script>undefinedFunction()</script><img src='file:///no/such/image.png'>")
    browser.load(page)
    errors = browser.console_errors()
    assert any("boom" in e for e in errors), errors
    assert any("undefinedFunction" in e for e in errors), errors
    assert any("no/such/image.png" in e or "ERR_FILE_NOT_FOUND" in e for e in errors), errors


def test_page_loads_without_console_errors(loaded, report):
    assert loaded.console_errors() == []
    assert loaded.evaluate("typeof Plotly") == "object"
    assert loaded.evaluate("document.title").startswith("msgcap report")


def test_page_fetches_nothing(loaded, report):
    urls = loaded.requests()
    assert report.resolve().as_uri() in urls
    assert [u for u in urls if not u.startswith(("file:", "data:", "blob:"))] == []


_PLOT_STATE = """
(() => {
  const out = {};
  for (const id of %s) {
    const g = document.getElementById(id);
    if (!g) { out[id] = null; continue; }
    const r = g.getBoundingClientRect();
    const pts = (g.data || []).map(t =>
      Math.max((t.x || []).length, (t.y || []).length, (t.text || []).length));
    out[id] = {
      traces: (g.data || []).length,
      points: pts.reduce((a, b) => a + b, 0),
      emptyTraces: pts.filter(n => n === 0).length,
      svg: g.querySelectorAll(".main-svg").length,
      drawn: g.querySelectorAll(".trace, .bars path, .scatterlayer path, .textpoint").length,
      width: r.width, height: r.height,
      title: ((g.layout || {}).title || {}).text || "",
    };
  }
  return out;
})()
"""


def test_every_plot_is_present_and_not_empty(loaded):
    state = loaded.evaluate(_PLOT_STATE % json.dumps(list(PLOT_IDS)))
    for plot_id in PLOT_IDS:
        s = state[plot_id]
        assert s is not None, f"{plot_id} missing"
        assert s["traces"] > 0 and s["points"] > 0, (plot_id, s)
        assert s["emptyTraces"] == 0, (plot_id, s)
        assert s["svg"] > 0 and s["drawn"] > 0, (plot_id, s)
        assert s["width"] > 400 and s["height"] > 200, (plot_id, s)
    assert "per second" in state["plot-rates"]["title"]
    assert state["plot-latency-delivery"]["traces"] == 4  # nats + pulsar: histogram + CDF
    assert state["plot-latency-request"]["traces"] == 2
    assert "nats.unknown_op" in json.dumps(
        loaded.evaluate("document.getElementById('plot-anomalies').data.map(t => t.name)"))


def test_ladder_has_arrows_and_a_conversation_menu(loaded):
    info = loaded.evaluate("""(() => {
      const g = document.getElementById('plot-ladder');
      const anns = g.layout.annotations.filter(a => a.showarrow);
      return {arrows: anns.length, menus: (g.layout.updatemenus || []).length,
              buttons: ((g.layout.updatemenus || [{}])[0].buttons || []).length,
              drawnArrows: g.querySelectorAll('.annotation-arrow-g').length};
    })()""")
    assert info["arrows"] > 10 and info["drawnArrows"] == info["arrows"]
    assert info["menus"] == 1 and info["buttons"] > 1


def test_flows_table_filters(loaded, report):
    rows = lambda: loaded.evaluate(  # noqa: E731
        "document.querySelectorAll('#flows-table tbody tr').length")
    total = rows()
    assert total == 14  # 6 + 6 NATS flows, 2 Pulsar flows
    loaded.evaluate("""(() => { const s = document.getElementById('f-protocol');
      s.value = 'pulsar'; s.dispatchEvent(new Event('change')); })()""")
    assert rows() == 2
    assert loaded.evaluate("document.getElementById('f-count').textContent") == "2 of 14 flows"
    loaded.evaluate("""(() => { const s = document.getElementById('f-protocol');
      s.value = ''; s.dispatchEvent(new Event('change'));
      const c = document.getElementById('f-problems'); c.checked = true;
      c.dispatchEvent(new Event('change')); })()""")
    problem_rows = rows()
    assert 0 < problem_rows < total  # the damaged capture's flows
    loaded.evaluate("""(() => { const c = document.getElementById('f-problems');
      c.checked = false; c.dispatchEvent(new Event('change'));
      const t = document.getElementById('f-text'); t.value = 'responder';
      t.dispatchEvent(new Event('input')); })()""")
    assert rows() == 2  # the responder of nats-basic and of its damaged copy
    loaded.evaluate("""(() => { const t = document.getElementById('f-text'); t.value = '';
      t.dispatchEvent(new Event('input')); })()""")
    assert rows() == total
    assert loaded.console_errors() == []


def test_screenshot_artifact(loaded):
    data = loaded.screenshot(SCREENSHOT)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 1200 and height > 3000  # the whole page
    assert SCREENSHOT.stat().st_size > 100_000
