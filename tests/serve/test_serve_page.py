"""The live status page: server-side rendering, and a headless Chromium run of its live refresh.

The browser test uses Debian's ``chromium`` and ``chromium-driver`` through Selenium, with the
driver path given explicitly (never Selenium Manager); it skips when either is missing.
"""

import html
import json
import os
import re
import shutil
import tempfile
import threading
import time
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from promokit.serve.page import CHAR_W, W, fields, level_rows, render_page

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
IDS = ["at-risk", "decisions", "lam", "burn-chart", "lam-chart", "levels", "updated", "req-rate", "dec-rate",
       "req-total", "http-4xx", "http-5xx", "p50", "p90", "p99", "ledger-up", "ledger-read", "ledger-commit",
       "ledger-errors", "model", "live-since", "switches"]
T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


def make_status(step: int = 0, seconds: int = 30) -> dict:
    """A /v1/status dict of a campaign ``seconds`` in; ``step`` adds 250 decisions and 300 requests per call,
    2 s apart: 125 decisions/s, 150 requests/s."""
    decisions = 1000 + 250 * step
    timeline = [{"second": int(T0) + s, "decisions": 40, "responses": 3, "at_risk": 40.0 * s + 25 * step,
                 "paid": 12.5 * s, "lam": 0.01 + 0.0005 * s} for s in range(seconds)]
    trace = [{"time": T0 + 2 * i, "decisions": 80 * i, "lam": 0.0123456 + 0.001 * i + 0.0001 * step,
              "target": 500.0 + 3 * i * i, "realised": None if i == 0 else 0.9} for i in range(seconds // 2)]
    return {
        "time": T0 + seconds + 2 * step,
        "campaign": {"model_version": "uplift-2026-01" + (f" <i>step {step}</i>" if step else ""),
                     "levels": [5.0, 10.0], "form": "absolute", "B": 5000.0,
                     "cap": 2000.0, "coupon_ttl_seconds": 3600.0, "when_exhausted": "none",
                     "populations": {"customer": 900, "merchant": 40}, "assignments": 940,
                     "live_since": T0 + 2 * step, "switches": step},
        "budget": {"cap": 2000.0, "committed": 1500.0, "paid": 362.5, "at_risk": 1234.5 + 25 * step,
                   "remaining": 765.5, "decisions": decisions, "responses": 87, "capped": 3, "replays": 2,
                   "explored": 50, "expected_cost": 900.0, "expected_responses": 80.0},
        "pacing": {"enabled": True, "lam": 0.0123456 + 0.0001 * step, "target": 1600.0, "B": 5000.0,
                   "realised_ratio": 0.92, "trace": trace},
        "levels": [
            {"population": "customer", "level_index": None, "level": None, "decisions": 400, "responses": 10,
             "redemption_rate": 0.025, "paid": 0.0},
            {"population": "customer", "level_index": 0, "level": 5.0, "decisions": 350, "responses": 42,
             "redemption_rate": 0.12, "paid": 210.0},
            {"population": "merchant", "level_index": 1, "level": 10.0, "decisions": 250 + 250 * step,
             "responses": 35, "redemption_rate": 0.14, "paid": 152.5},
        ],
        "timeline": timeline,
        "requests": {"time": T0 + seconds + 2 * step, "total": 5000 + 300 * step,
                     "by_class": {"2xx": 4890 + 300 * step, "4xx": 107, "5xx": 3},
                     "by_status": {"200": 4890 + 300 * step, "401": 7, "422": 100, "503": 3},
                     "by_route": {"/v1/decisions": 5000 + 300 * step},
                     "latency_ms": {"route": "/v1/decisions", "count": decisions, "p50": 1.234, "p90": 3.5,
                                    "p99": 9.87},
                     "ledger_errors": 1},
        "ledger": {"up": True, "read_ms": 0.84, "last_commit_age_s": 0.3 + 75 * step},
    }


def big_money(status: dict) -> dict:
    """``status`` with a cap of 200,000 and B_t above 100,000: the longest axis labels."""
    status["campaign"]["cap"] = status["budget"]["cap"] = 200_000.0
    for t in status["timeline"]:
        t["at_risk"] *= 100
    for t in status["pacing"]["trace"]:
        t["target"] *= 250
    return status


def text_of(page: str, element_id: str) -> str:
    """Text of the (leaf) element with that id."""
    m = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', page)
    assert m, element_id
    return m.group(1)


def table_cells(rows_html: str) -> list[list[str]]:
    """Cell texts of ``<tr>`` rows, bars dropped, entities unescaped."""
    rows = re.findall(r"<tr>(.*?)</tr>", rows_html, re.S)
    return [[html.unescape(c) for c in re.findall(r"<td>(?:<span.*?</span></span>)?(.*?)</td>", r)] for r in rows]


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = []

    def handle_starttag(self, tag, attrs):
        self.ids += [v for k, v in attrs if k == "id"]


# --------------------------------------------------------------------------- render_page
def test_page_has_ids_and_formatted_numbers():
    page = render_page(make_status())
    parser = _Ids()
    parser.feed(page)
    assert set(IDS) <= set(parser.ids) and len(parser.ids) == len(set(parser.ids))
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert text_of(page, "at-risk") == "1,234.50"
    assert text_of(page, "cap-card") == "2,000.00"
    assert text_of(page, "at-risk-pct") == "61.7% of cap"
    assert text_of(page, "decisions") == "1,000" and text_of(page, "explored") == "50"
    assert text_of(page, "lam") == "0.01235"
    assert text_of(page, "budget-b") == "5,000.00"
    assert text_of(page, "p99") == "9.9 ms"
    assert text_of(page, "updated") == "00:00:30 UTC"
    assert text_of(page, "req-total") == "5,000" and text_of(page, "lat-count") == "1,000"
    assert (text_of(page, "http-4xx"), text_of(page, "http-5xx")) == ("107", "3")
    assert text_of(page, "req-rate") == text_of(page, "dec-rate") == "\u2013"  # a rate needs two readings
    assert f'data-time="{T0 + 30!r}" data-total="5000" data-decisions="1000"' in page
    assert text_of(page, "ledger-up") == "up" and 'id="ledger-up" class="up"' in page
    assert text_of(page, "ledger-read") == "0.8 ms" and text_of(page, "ledger-commit") == "0.3 s ago"
    assert text_of(page, "ledger-errors") == "1"
    burn = re.search(r'<svg id="burn-chart".*?</svg>', page, re.S).group(0)
    assert burn.count("<polyline") == 2 and 'class="cap"' in burn and "cap 2,000.00" in burn
    lam = re.search(r'<svg id="lam-chart".*?</svg>', page, re.S).group(0)
    assert lam.count("<polyline") == 2


def test_levels_table_shows_none_rate_and_bar():
    page = render_page(make_status())
    body = re.search(r'<table id="levels">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    cells = table_cells(body)
    assert cells[0] == ["customer", "none", "400", "10", "2.5%", "0.00"]
    assert cells[1] == ["customer", "5", "350", "42", "12.0%", "210.00"]
    assert 'style="width:100.0%"' in body.split("<tr>")[3]  # the highest redemption rate fills its bar


def test_data_strings_are_escaped():
    status = make_status()
    status["campaign"]["model_version"] = "<script>alert(1)</script>"
    status["levels"][0]["population"] = '"><img src=x onerror=alert(2)>'
    page = render_page(status)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img" not in page and "&quot;&gt;&lt;img src=x" in page
    assert page.count("<script>") == 1  # only the page's own script


def test_no_external_urls():
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", render_page(make_status())))
    assert urls <= {"http://www.w3.org/2000/svg"}  # the SVG namespace name, never fetched


def test_empty_status_renders():
    status = make_status(seconds=0)
    status["levels"] = []
    status["requests"]["latency_ms"] = {"route": "/v1/decisions", "count": 0, "p50": None, "p90": None, "p99": None}
    status["pacing"]["realised_ratio"] = None
    del status["ledger"]
    page = render_page(status)
    assert page.count(">no data yet</text></svg>") == 2 and ">no decisions yet</td>" in page
    assert text_of(page, "p50") == "\u2013"
    assert text_of(page, "ledger-up") == text_of(page, "ledger-read") == text_of(page, "ledger-commit") == "\u2013"
    assert ">no data yet</text>" in render_page({})  # even an empty dict renders


def test_ledger_down_and_long_ages():
    status = make_status()
    status["ledger"] = {"up": False, "read_ms": None, "last_commit_age_s": 5400.0}
    page = render_page(status)
    assert 'id="ledger-up" class="down">down<' in page and text_of(page, "ledger-commit") == "1.5 h ago"
    assert fields({"ledger": {"last_commit_age_s": 150.0}})["ledger-commit"] == "2.5 min ago"


def tick_extents(page: str, svg_id: str) -> list[tuple[str, float, float]]:
    """``(label, left, right)`` of each text of one chart, its width estimated at ``CHAR_W`` per character."""
    svg = re.search(rf'<svg id="{svg_id}".*?</svg>', page, re.S).group(0)
    out = []
    for x, anchor, text in re.findall(r'<text class="tick[^"]*" x="([\d.]+)" y="[\d.]+"(?: text-anchor="(\w+)")?>'
                                      r'([^<]*)</text>', svg):
        width, x = CHAR_W * len(html.unescape(text)), float(x)
        out.append((text, x - width if anchor == "end" else x, x if anchor == "end" else x + width))
    return out


def test_axis_labels_fit_the_chart():
    page = render_page(big_money(make_status()))
    burn, lam = tick_extents(page, "burn-chart"), tick_extents(page, "lam-chart")
    assert "200,000.00" in [t for t, *_ in burn] and any("e+05" in t for t, *_ in lam)
    assert all(0 <= left and right <= W for _, left, right in burn + lam), burn + lam
    assert CHAR_W * len("200,000.00") > 64 - 6  # the label the old fixed margin cut off


def test_single_point_and_null_values():
    status = make_status(seconds=1)
    status["timeline"][0]["lam"] = None
    status["levels"][1]["redemption_rate"] = None
    status["campaign"].update(form="ratio", B=0.25)
    page = render_page(status)
    assert text_of(page, "budget-b") == "0.25" and "<circle" in page


# --------------------------------------------------------------------------- headless Chromium
class _Server:
    """``/`` -> render_page(make(0)); each ``/v1/status`` call -> make(1), make(2), ..."""

    def __init__(self, make=make_status):
        self.calls, self.paths = 0, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.paths.append(self.path)
                if self.path == "/":
                    body, kind = render_page(make(0)).encode(), "text/html; charset=utf-8"
                elif self.path == "/v1/status":
                    outer.calls += 1
                    body, kind = json.dumps(make(outer.calls)).encode(), "application/json"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}); "
                    "apt-get install chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (test extra)")
    profile = tempfile.mkdtemp(prefix="promokit-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,900"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_live_page_in_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = _Server()
    try:
        start = time.monotonic()
        browser.get(server.url)
        assert browser.find_element(By.ID, "decisions").text == "1,000"
        assert browser.find_element(By.ID, "at-risk").text == "1,234.50"
        assert browser.find_element(By.ID, "lam").text == "0.01235"
        first_update = browser.find_element(By.ID, "updated").text

        WebDriverWait(browser, 6, poll_frequency=0.1).until(
            lambda d: d.find_element(By.ID, "decisions").text != "1,000")
        waited = time.monotonic() - start
        shown = browser.execute_script(  # one atomic read, so no refresh lands in between
            "const t = {};"
            "for (const id of arguments[0]) t[id] = document.getElementById(id).textContent;"
            "t.rows = [...document.querySelectorAll('#levels tbody tr')].map("
            "  r => [...r.cells].map(c => c.textContent));"
            "return t;", [*fields(make_status()), "req-rate", "dec-rate"])
        step = (int(shown["decisions"].replace(",", "")) - 1000) // 250
        assert 1 <= step <= server.calls
        expected = make_status(step)
        assert shown.pop("rows") == table_cells(level_rows(expected["levels"]))
        assert (shown.pop("req-rate"), shown.pop("dec-rate")) == ("150.0/s", "125.0/s")
        assert browser.find_element(By.ID, "ledger-up").get_attribute("class") == "up"
        assert shown == fields(expected)  # the script formats exactly like the server
        assert shown["model"].endswith(f"<i>step {step}</i>") and not browser.find_elements(By.TAG_NAME, "i")
        assert browser.find_element(By.ID, "updated").text != first_update
        assert browser.find_element(By.ID, "conn").text == ""
        assert len(browser.find_elements(By.CSS_SELECTOR, "#burn-chart polyline")) == 2
        assert len(browser.find_elements(By.CSS_SELECTOR, "#lam-chart polyline")) == 2
        assert browser.find_element(By.CSS_SELECTOR, "#levels tbody tr td:nth-child(2)").text == "none"

        resources = browser.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)")
        assert all(r.startswith(server.url) for r in resources), resources
        assert set(server.paths) <= {"/", "/v1/status"}, server.paths
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors

        shot = tmp_path / "status_page.png"
        assert browser.save_screenshot(str(shot))
        print(f"\nscreenshot of the live status page: {shot} (live refresh after {waited:.1f} s)")
        assert shot.stat().st_size > 5_000
    finally:
        server.close()


def test_axis_labels_inside_the_svg_in_chromium(browser):
    """The tick labels' rendered boxes (real font) lie inside the viewBox, server-drawn and script-drawn."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    boxes = ("return [...document.querySelectorAll('#burn-chart text, #lam-chart text')].map("
             "  t => { const b = t.getBBox(); return [t.textContent, b.x, b.x + b.width]; });")
    server = _Server(lambda step: big_money(make_status(step)))
    try:
        browser.get(server.url)
        for drawn_by in ("server", "script"):
            if drawn_by == "script":
                WebDriverWait(browser, 6, poll_frequency=0.1).until(
                    lambda d: d.find_element(By.ID, "decisions").text != "1,000")
            labels = browser.execute_script(boxes)
            assert "200,000.00" in [t for t, *_ in labels], labels
            assert all(0 <= left and right <= W for _, left, right in labels), (drawn_by, labels)
    finally:
        server.close()
