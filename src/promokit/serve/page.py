"""Live status page of the decision service (``GET /``).

:func:`render_page` turns the ``/v1/status`` dict into one self-contained HTML
document: inline CSS, inline SVG charts and a small vanilla script, no build step
and no external URL. Everything is rendered on the server first, so the page is
useful with JavaScript off; the script then fetches ``/v1/status`` every 2 s and
redraws the same elements. Data strings are escaped with :func:`html.escape` here
and only ever written with ``textContent`` in the browser.

Stable element ids (used by the tests): ``model``, ``live-since``, ``switches``, ``at-risk``, ``decisions``, ``lam``,
``burn-chart``, ``lam-chart``, ``levels``, ``updated``; the service's own figures:
``req-rate``, ``dec-rate``, ``req-total``, ``http-4xx``, ``http-5xx``, ``p50``/``p90``/``p99``,
``ledger-up``, ``ledger-read``, ``ledger-commit``, ``ledger-errors``.

Request figures come from ``status["requests"]`` (:func:`promokit.serve.metrics.summary`: all
workers since start) and ledger health from ``status["ledger"]``; either may be absent. The two
rates need two readings, so the script computes them between refreshes (the first from the reading
the page was rendered with, kept in ``data-`` attributes of ``req-rate``); the server shows a dash.

Example::

    >>> from promokit.serve.page import render_page
    >>> html_text = render_page(status)   # status = the /v1/status dict
"""

from __future__ import annotations

import html
import math
from datetime import datetime, timezone

DASH = "\u2013"
W, H, LEFT, RIGHT, TOP, BOTTOM = 640, 220, 64, 56, 14, 26  # chart geometry in SVG units; LEFT, RIGHT at least
CHAR_W = 7.1  # SVG units per character of an 11 px tick label: DejaVu Sans' digits are 7.0, "+" 9.2, "," 3.5


# --------------------------------------------------------------------------- formatting
def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def money(x) -> str:
    """``1234.5 -> '1,234.50'``."""
    return f"{x:,.2f}" if _num(x) else DASH


def count(x) -> str:
    return f"{int(round(x)):,}" if _num(x) else DASH


def sig4(x) -> str:
    """Four significant digits: ``0.0123456 -> '0.01235'``."""
    return f"{x:.4g}" if _num(x) else DASH


def pct(x) -> str:
    return f"{100 * x:.1f}%" if _num(x) else DASH


def ms(x) -> str:
    return f"{x:.1f} ms" if _num(x) else DASH


def rate(x) -> str:
    return f"{x:,.1f}/s" if _num(x) else DASH


def ago(x) -> str:
    """Seconds as ``'12.0 s ago'``, ``'2.5 min ago'`` or ``'1.2 h ago'``."""
    if not _num(x):
        return DASH
    return f"{x:.1f} s ago" if x < 60 else f"{x / 60:.1f} min ago" if x < 3600 else f"{x / 3600:.1f} h ago"


def up(x) -> str:
    return "up" if x is True else "down" if x is False else DASH


def clock(t) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S UTC") if _num(t) else DASH


def _e(x) -> str:
    return html.escape(str(x), quote=True)


# --------------------------------------------------------------------------- text fields
def fields(status: dict) -> dict[str, str]:
    """Element id -> text for every plain text field (``fields()`` in the script mirrors it)."""
    c, b, p = status.get("campaign") or {}, status.get("budget") or {}, status.get("pacing") or {}
    r, ledger = status.get("requests") or {}, status.get("ledger") or {}
    lat, by_class = r.get("latency_ms") or {}, r.get("by_class") or {}
    cap, at_risk = c.get("cap"), b.get("at_risk")
    share = at_risk / cap if _num(at_risk) and _num(cap) and cap > 0 else None
    return {
        "model": str(c.get("model_version", DASH)), "form": str(c.get("form", DASH)),
        "live-since": clock(c.get("live_since")), "switches": count(c.get("switches")),
        "budget-b": money(c.get("B")) if c.get("form") == "absolute" else sig4(c.get("B")),
        "cap": money(cap), "lam": sig4(p.get("lam")), "pacing": "on" if p.get("enabled") else "off",
        "at-risk": money(at_risk), "cap-card": money(cap), "at-risk-pct": f"{pct(share)} of cap",
        "paid": money(b.get("paid")), "committed": money(b.get("committed")),
        "remaining": money(b.get("remaining")) + overdraft(b.get("overdraft")),
        "decisions": count(b.get("decisions")),
        "responses": count(b.get("responses")), "capped": count(b.get("capped")),
        "replays": count(b.get("replays")), "explored": count(b.get("explored")),
        "lat-count": count(lat.get("count")),
        "p50": ms(lat.get("p50")), "p90": ms(lat.get("p90")), "p99": ms(lat.get("p99")),
        "req-total": count(r.get("total")), "http-4xx": count(by_class.get("4xx")),
        "http-5xx": count(by_class.get("5xx")), "ledger-up": ledger.get("state") or up(ledger.get("up")),
        "ledger-read": ms(ledger.get("read_ms")), "ledger-commit": ago(ledger.get("last_commit_age_s")),
        "ledger-errors": count(r.get("ledger_errors")), "updated": clock(status.get("time")),
    }


def overdraft(x) -> str:
    """`` (overdraft 800.00)`` after the remaining money while a lowered cap is below the money at risk, else ``""``."""
    return f" (overdraft {money(x)})" if _num(x) and x > 0 else ""


def _share(status: dict) -> float:
    """Money at risk as a fraction of the cap, clipped to [0, 1], for the meter."""
    cap = (status.get("campaign") or {}).get("cap")
    at_risk = (status.get("budget") or {}).get("at_risk")
    return min(max(at_risk / cap, 0.0), 1.0) if _num(cap) and _num(at_risk) and cap > 0 else 0.0


# --------------------------------------------------------------------------- charts
def _extent(values) -> tuple[float, float]:
    v = [x for x in values if _num(x)]
    lo, hi = min([0.0, *v]), max([0.0, *v])
    return (lo, hi) if hi > lo else (lo, lo + 1.0)


def margin(labels, least: float) -> int:
    """Room beside the plot for tick labels, so the longest ("200,000.00") is not cut off by the SVG's edge."""
    return max(least, 8 + math.ceil(CHAR_W * max(map(len, labels), default=0)))


def line_chart(svg_id: str, xs, series, hline=None, fmt=sig4) -> str:
    """Inline SVG line chart; mirrors ``chart()`` in the script.

    ``series`` holds ``(ys, css_class, right_axis)``; ``hline`` is ``(value, label)`` on the left axis.
    The side margins fit the axis labels: at least ``LEFT`` and ``RIGHT``, wider for long labels.
    """
    head = f'<svg id="{svg_id}" viewBox="0 0 {W} {H}" role="img">'
    if not xs:
        return f'{head}<text class="empty" x="{W / 2}" y="{H / 2}">no data yet</text></svg>'
    axes = []  # (right, lo, hi, [(value, label)]) per drawn axis
    for right in (False, True):
        ys = [y for s_ys, _, r in series if r == right for y in s_ys]
        if right and not any(_num(y) for y in ys):
            continue
        lo, hi = _extent(ys + ([hline[0]] if hline and not right else []))
        axes.append((right, lo, hi, [(v, (sig4 if right else fmt)(v)) for v in (lo, (lo + hi) / 2, hi)]))
    left = margin([t for r, *_, ticks in axes if not r for _, t in ticks], LEFT)
    right_edge = W - margin([t for r, *_, ticks in axes if r for _, t in ticks], RIGHT)
    x0, x1 = min(xs), max(xs)
    span = x1 - x0 if x1 > x0 else 1.0
    sx = lambda x: left + (x - x0) / span * (right_edge - left)  # noqa: E731
    out = [head]
    for right, lo, hi, ticks in axes:
        sy = lambda y, lo=lo, hi=hi: TOP + (hi - y) / (hi - lo) * (H - TOP - BOTTOM)  # noqa: E731
        for v, text in ticks:
            if not right:
                out.append(f'<line class="grid" x1="{left}" x2="{right_edge}" y1="{sy(v):.1f}" y2="{sy(v):.1f}"/>')
            tx, anchor = (right_edge + 6, "start") if right else (left - 6, "end")
            out.append(f'<text class="tick" x="{tx}" y="{sy(v) + 4:.1f}" text-anchor="{anchor}">{_e(text)}</text>')
        if hline and not right and _num(hline[0]):
            y = sy(hline[0])
            out.append(f'<line class="cap" x1="{left}" x2="{right_edge}" y1="{y:.1f}" y2="{y:.1f}"/>')
            out.append(f'<text class="tick cap-label" x="{right_edge - 4}" y="{y - 5:.1f}" '
                       f'text-anchor="end">{_e(hline[1])}</text>')
        for s_ys, cls, r in series:
            pts = [(sx(x), sy(y)) for x, y in zip(xs, s_ys) if r == right and _num(y)]
            if pts:
                out.append(f'<polyline class="{cls}" points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}"/>')
                out.append(f'<circle class="{cls}" cx="{pts[-1][0]:.1f}" cy="{pts[-1][1]:.1f}" r="3"/>')
    out.append(f'<text class="tick" x="{left}" y="{H - 6}">0 s</text>')
    out.append(f'<text class="tick" x="{right_edge}" y="{H - 6}" text-anchor="end">+{x1 - x0:.0f} s</text>')
    return "".join(out) + "</svg>"


def burn_chart(status: dict) -> str:
    tl = status.get("timeline") or []
    cap = (status.get("campaign") or {}).get("cap")
    return line_chart("burn-chart", [t["second"] for t in tl],
                      [([t.get("at_risk") for t in tl], "s0", False), ([t.get("paid") for t in tl], "s1", False)],
                      hline=(cap, f"cap {money(cap)}"), fmt=money)


def lam_chart(status: dict) -> str:
    tr = (status.get("pacing") or {}).get("trace") or []
    return line_chart("lam-chart", [t["time"] for t in tr],
                      [([t.get("lam") for t in tr], "s0", False), ([t.get("target") for t in tr], "s2", True)])


# --------------------------------------------------------------------------- table
def level_rows(levels: list[dict]) -> str:
    """``<tr>`` rows of the "By level" table; mirrors ``levelRows()`` in the script."""
    if not levels:
        return '<tr><td colspan="6" class="empty">no decisions yet</td></tr>'
    top = max([r["redemption_rate"] for r in levels if _num(r.get("redemption_rate"))] or [0.0])
    rows = []
    for r in levels:
        rate = r.get("redemption_rate")
        width = 100 * rate / top if _num(rate) and top > 0 else 0.0
        cells = [_e(r.get("population", DASH)), _e(sig4(r["level"]) if r.get("level") is not None else "none"),
                 count(r.get("decisions")), count(r.get("responses"))]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells)
                    + f'<td><span class="bar"><span style="width:{width:.1f}%"></span></span>{_e(pct(rate))}</td>'
                    + f"<td>{_e(money(r.get('paid')))}</td></tr>")
    return "".join(rows)


# --------------------------------------------------------------------------- page
def _card(label: str, value_html: str, sub_html: str = "") -> str:
    return f'<div class="card"><div class="k">{label}</div><div class="v">{value_html}</div>{sub_html}</div>'


def _rate_span(status: dict) -> str:
    """``req-rate``, a dash until the script has a second reading; the first is this one, kept in ``data-``."""
    r = status.get("requests") or {}
    sample = {"time": r.get("time"), "total": r.get("total"), "decisions": (r.get("latency_ms") or {}).get("count")}
    data = "".join(f' data-{k}="{_e(repr(v))}"' for k, v in sample.items() if _num(v))
    return f'<span id="req-rate"{data}>{DASH}</span>'


def render_page(status: dict) -> str:
    """The complete HTML document of the live status page for one ``/v1/status`` dict."""
    f = {k: _e(v) for k, v in fields(status).items()}
    span = lambda i: f'<span id="{i}">{f[i]}</span>'  # noqa: E731
    cards = [
        _card("money at risk / cap", f'{span("at-risk")} / {span("cap-card")}',
              f'<div class="meter"><span id="at-risk-bar" style="width:{100 * _share(status):.1f}%"></span></div>'
              f'<div class="sub">{span("at-risk-pct")}</div>'),
        *(_card(label, span(i)) for label, i in [
            ("paid", "paid"), ("committed", "committed"), ("remaining", "remaining"), ("decisions", "decisions"),
            ("responses", "responses"), ("capped (cap reached)", "capped"), ("replays", "replays"),
            ("explored (random level)", "explored")]),
        _card("requests / s", _rate_span(status), f'<div class="sub">{span("req-total")} since start</div>'),
        _card("decisions / s", f'<span id="dec-rate">{DASH}</span>',
              f'<div class="sub">{span("lat-count")} answered</div>'),
        _card("4xx / 5xx", f'{span("http-4xx")} / {span("http-5xx")}',
              '<div class="sub">client / server errors since start</div>'),
        _card("ledger", f'<span id="ledger-up" class="{f["ledger-up"]}">{f["ledger-up"]}</span>',
              f'<div class="sub">read {span("ledger-read")} · last commit {span("ledger-commit")}'
              f' · errors {span("ledger-errors")}</div>'),
    ]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>promokit · decision service</title>
<style>{CSS}</style></head>
<body>
<header><h1>promokit decision service</h1>
<p class="meta">model <b>{span("model")}</b> (live since {span("live-since")}, {span("switches")} switches)
 · budget {span("form")} B = {span("budget-b")} · cap {span("cap")}
 · λ now <b>{span("lam")}</b> · pacing {span("pacing")}
 · updated {span("updated")} <span id="conn" class="conn"></span></p></header>
<section class="cards">{"".join(cards)}</section>
<section class="charts">
<figure><figcaption>Budget burn <span class="key s0">at risk</span><span class="key s1">paid</span>
<span class="key cap">cap</span></figcaption>{burn_chart(status)}</figure>
<figure><figcaption>λ over time <span class="key s0">λ</span>
<span class="key s2">target B<sub>t</sub> (right axis)</span>
</figcaption>{lam_chart(status)}</figure>
</section>
<section class="bottom">
<figure class="wide"><figcaption>By level</figcaption>
<table id="levels"><thead><tr><th>population</th><th>level</th><th>decisions</th><th>responses</th>
<th>redemption rate</th><th>paid</th></tr></thead>
<tbody>{level_rows(status.get("levels") or [])}</tbody></table></figure>
<figure><figcaption>Decision latency</figcaption><table class="lat"><tbody>
<tr><th>p50</th><td>{span("p50")}</td></tr><tr><th>p90</th><td>{span("p90")}</td></tr>
<tr><th>p99</th><td>{span("p99")}</td></tr></tbody></table>
<p class="sub">answered decisions of all workers since start; estimated from histogram buckets</p></figure>
</section>
<script>{SCRIPT}</script>
</body></html>
"""


CSS = """
:root { --fg: #1d2430; --muted: #667085; --line: #e4e7ec; --bg: #f6f7f9;
        --s0: #2563eb; --s1: #16a34a; --s2: #d97706; --cap: #dc2626; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1180px; padding: 18px 22px; font: 14px/1.4 system-ui, sans-serif;
       color: var(--fg); background: var(--bg); }
h1 { font-size: 20px; margin: 0 0 4px; }
.meta { margin: 0 0 14px; color: var(--muted); }
.meta b { color: var(--fg); }
.conn { color: var(--cap); }
#ledger-up.up { color: var(--s1); } #ledger-up.degraded { color: var(--s2); } #ledger-up.down { color: var(--cap); }
.cards { display: grid; grid-template-columns: repeat(4, 1fr); gap: 10px; }
.card, figure { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; margin: 0; }
.k { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
figcaption { font-weight: 600; }
.v { font-size: 22px; font-variant-numeric: tabular-nums; margin-top: 2px; }
.sub { color: var(--muted); font-size: 12px; }
.meter { height: 6px; background: var(--line); border-radius: 3px; margin: 6px 0 2px; overflow: hidden; }
.meter span { display: block; height: 100%; background: var(--cap); }
.charts, .bottom { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 10px;
                   margin-top: 10px; }
.bottom { grid-template-columns: 3fr 1fr; }
@media (max-width: 760px) { .cards { grid-template-columns: repeat(2, 1fr); } .bottom { grid-template-columns: 1fr; } }
svg { width: 100%; height: auto; display: block; margin-top: 6px; }
svg .grid { stroke: var(--line); }
svg .tick { fill: var(--muted); font-size: 11px; }
svg .empty { fill: var(--muted); font-size: 15px; text-anchor: middle; }
svg polyline { fill: none; stroke-width: 2; }
svg .cap { stroke: var(--cap); stroke-dasharray: 6 4; stroke-width: 1.5; }
svg .cap-label { fill: var(--cap); }
.s0 { stroke: var(--s0); fill: var(--s0); } .s1 { stroke: var(--s1); fill: var(--s1); }
.s2 { stroke: var(--s2); fill: var(--s2); }
svg polyline.s0, svg polyline.s1, svg polyline.s2 { fill: none; }
.key { margin-left: 12px; font-weight: normal; color: var(--muted); }
.key::before { content: ""; display: inline-block; width: 14px; height: 3px; margin-right: 4px;
               vertical-align: middle; background: var(--s0); }
.key.s1::before { background: var(--s1); } .key.s2::before { background: var(--s2); }
.key.cap::before { background: repeating-linear-gradient(90deg, var(--cap) 0 4px, transparent 4px 7px); }
table { border-collapse: collapse; width: 100%; margin-top: 6px; font-variant-numeric: tabular-nums; }
th, td { text-align: right; padding: 4px 8px; border-bottom: 1px solid var(--line); }
th:first-child, td:first-child { text-align: left; }
td.empty { text-align: center; color: var(--muted); }
.bar { display: inline-block; width: 80px; height: 8px; background: var(--line); border-radius: 4px;
       margin-right: 8px; vertical-align: middle; overflow: hidden; }
.bar span { display: block; height: 100%; background: var(--s1); }
"""

SCRIPT = r"""
(function () {
  "use strict";
  const NS = "http://www.w3.org/2000/svg", DASH = "\u2013";
  const W = 640, H = 220, LEFT = 64, RIGHT = 56, TOP = 14, BOTTOM = 26, CHAR_W = 7.1;
  const num = (x) => typeof x === "number" && isFinite(x);
  const money = (x) => num(x) ? x.toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2}) : DASH;
  const count = (x) => num(x) ? Math.round(x).toLocaleString("en-US") : DASH;
  const pct = (x) => num(x) ? (100 * x).toFixed(1) + "%" : DASH;
  const ms = (x) => num(x) ? x.toFixed(1) + " ms" : DASH;
  const rate = (x) => num(x)
    ? x.toLocaleString("en-US", {minimumFractionDigits: 1, maximumFractionDigits: 1}) + "/s" : DASH;
  const ago = (x) => !num(x) ? DASH : x < 60 ? x.toFixed(1) + " s ago"
    : x < 3600 ? (x / 60).toFixed(1) + " min ago" : (x / 3600).toFixed(1) + " h ago";
  const up = (x) => x === true ? "up" : x === false ? "down" : DASH;
  const margin = (labels, least) =>  // mirrors page.margin()
    Math.max(least, 8 + Math.ceil(CHAR_W * Math.max(0, ...labels.map((t) => t.length))));
  const clock = (t) => num(t) ? new Date(t * 1000).toISOString().slice(11, 19) + " UTC" : DASH;

  function sig4(x) {  // like Python's f"{x:.4g}"
    if (!num(x)) return DASH;
    if (x === 0) return "0";
    const e = Math.floor(Math.log10(Math.abs(Number(x.toPrecision(4)))));
    if (e >= -4 && e < 4) return String(Number(x.toPrecision(4)));
    const [m, p] = x.toExponential(3).split("e"), k = Math.abs(Number(p));
    return m.replace(/\.?0+$/, "") + "e" + (Number(p) < 0 ? "-" : "+") + (k < 10 ? "0" : "") + k;
  }

  function fields(s) {  // mirrors page.fields()
    const c = s.campaign || {}, b = s.budget || {}, p = s.pacing || {}, r = s.requests || {}, l = s.ledger || {};
    const lat = r.latency_ms || {}, byClass = r.by_class || {};
    const share = num(b.at_risk) && num(c.cap) && c.cap > 0 ? b.at_risk / c.cap : null;
    return {
      "model": String(c.model_version ?? DASH), "form": String(c.form ?? DASH),
      "live-since": clock(c.live_since), "switches": count(c.switches),
      "budget-b": c.form === "absolute" ? money(c.B) : sig4(c.B),
      "cap": money(c.cap), "lam": sig4(p.lam), "pacing": p.enabled ? "on" : "off",
      "at-risk": money(b.at_risk), "cap-card": money(c.cap), "at-risk-pct": pct(share) + " of cap",
      "paid": money(b.paid), "committed": money(b.committed),
      "remaining": money(b.remaining) + (num(b.overdraft) && b.overdraft > 0
                                         ? " (overdraft " + money(b.overdraft) + ")" : ""),
      "decisions": count(b.decisions), "responses": count(b.responses), "capped": count(b.capped),
      "replays": count(b.replays), "explored": count(b.explored), "lat-count": count(lat.count),
      "p50": ms(lat.p50), "p90": ms(lat.p90), "p99": ms(lat.p99),
      "req-total": count(r.total), "http-4xx": count(byClass["4xx"]), "http-5xx": count(byClass["5xx"]),
      "ledger-up": l.state || up(l.up), "ledger-read": ms(l.read_ms), "ledger-commit": ago(l.last_commit_age_s),
      "ledger-errors": count(r.ledger_errors), "updated": clock(s.time),
    };
  }

  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function extent(values) {
    let lo = 0, hi = 0;
    for (const v of values) if (num(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    return hi > lo ? [lo, hi] : [lo, lo + 1];
  }

  function chart(svg, xs, series, hline, fmt) {  // mirrors page.line_chart()
    svg.replaceChildren();
    if (!xs.length) { svg.appendChild(svgEl("text", {class: "empty", x: W / 2, y: H / 2}, "no data yet")); return; }
    const axes = [];  // {right, lo, hi, ticks: [[value, label]]} per drawn axis
    for (const right of [false, true]) {
      const ys = series.filter((s) => s.right === right).flatMap((s) => s.ys);
      if (right && !ys.some(num)) continue;
      const [lo, hi] = extent(hline && !right ? ys.concat([hline.value]) : ys);
      axes.push({right, lo, hi, ticks: [lo, (lo + hi) / 2, hi].map((v) => [v, right ? sig4(v) : fmt(v)])});
    }
    const labels = (right) => axes.filter((a) => a.right === right).flatMap((a) => a.ticks.map((t) => t[1]));
    const left = margin(labels(false), LEFT), rightEdge = W - margin(labels(true), RIGHT);
    const x0 = Math.min(...xs), x1 = Math.max(...xs), span = x1 > x0 ? x1 - x0 : 1;
    const sx = (x) => left + (x - x0) / span * (rightEdge - left);
    for (const {right, lo, hi, ticks} of axes) {
      const sy = (y) => TOP + (hi - y) / (hi - lo) * (H - TOP - BOTTOM);
      for (const [v, text] of ticks) {
        if (!right) svg.appendChild(svgEl("line", {class: "grid", x1: left, x2: rightEdge, y1: sy(v), y2: sy(v)}));
        svg.appendChild(svgEl("text", {class: "tick", x: right ? rightEdge + 6 : left - 6, y: sy(v) + 4,
                                       "text-anchor": right ? "start" : "end"}, text));
      }
      if (hline && !right && num(hline.value)) {
        const y = sy(hline.value);
        svg.appendChild(svgEl("line", {class: "cap", x1: left, x2: rightEdge, y1: y, y2: y}));
        svg.appendChild(svgEl("text", {class: "tick cap-label", x: rightEdge - 4, y: y - 5, "text-anchor": "end"},
                              hline.label));
      }
      for (const s of series.filter((s) => s.right === right)) {
        const pts = xs.map((x, i) => [sx(x), sy(s.ys[i])]).filter((_, i) => num(s.ys[i]));
        if (!pts.length) continue;
        const points = pts.map((p) => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" ");
        svg.appendChild(svgEl("polyline", {class: s.cls, points: points}));
        svg.appendChild(svgEl("circle", {class: s.cls, cx: pts[pts.length - 1][0], cy: pts[pts.length - 1][1], r: 3}));
      }
    }
    svg.appendChild(svgEl("text", {class: "tick", x: left, y: H - 6}, "0 s"));
    svg.appendChild(svgEl("text", {class: "tick", x: rightEdge, y: H - 6, "text-anchor": "end"},
                          "+" + (x1 - x0).toFixed(0) + " s"));
  }

  function levelRows(tbody, levels) {  // mirrors page.level_rows()
    const rows = [];
    if (!levels.length) {
      const td = document.createElement("td");
      td.colSpan = 6; td.className = "empty"; td.textContent = "no decisions yet";
      rows.push(document.createElement("tr")); rows[0].appendChild(td);
    }
    const top = levels.reduce((m, r) => num(r.redemption_rate) ? Math.max(m, r.redemption_rate) : m, 0);
    for (const r of levels) {
      const tr = document.createElement("tr");
      const cells = [String(r.population ?? DASH), r.level == null ? "none" : sig4(r.level),
                     count(r.decisions), count(r.responses), pct(r.redemption_rate), money(r.paid)];
      cells.forEach((text, i) => {
        const td = document.createElement("td");
        if (i === 4) {
          const bar = document.createElement("span"), fill = document.createElement("span");
          bar.className = "bar";
          fill.style.width = (num(r.redemption_rate) && top > 0 ? 100 * r.redemption_rate / top : 0).toFixed(1) + "%";
          bar.appendChild(fill); td.appendChild(bar);
        }
        td.appendChild(document.createTextNode(text));
        tr.appendChild(td);
      });
      rows.push(tr);
    }
    tbody.replaceChildren(...rows);
  }

  // The previous reading {time, total, decisions}: at first the one the page was rendered with.
  let last = (({time, total, decisions}) => ({time: Number(time), total: Number(total), decisions: Number(decisions)}))(
    document.getElementById("req-rate").dataset);

  function rates(s) {  // per second between the last reading and this one; a dash after a restart (counts fell)
    const r = s.requests || {}, now = {time: r.time, total: r.total, decisions: (r.latency_ms || {}).count};
    const per = (k) => num(now[k]) && num(last[k]) && num(now.time) && num(last.time) && now.time > last.time
      && now[k] >= last[k] ? (now[k] - last[k]) / (now.time - last.time) : null;
    document.getElementById("req-rate").textContent = rate(per("total"));
    document.getElementById("dec-rate").textContent = rate(per("decisions"));
    if (num(now.time)) last = now;
  }

  function draw(s) {
    for (const [id, text] of Object.entries(fields(s))) {
      const e = document.getElementById(id);
      if (e) e.textContent = text;
    }
    document.getElementById("ledger-up").className = (s.ledger || {}).state || up((s.ledger || {}).up);
    rates(s);
    const c = s.campaign || {}, b = s.budget || {}, tl = s.timeline || [], tr = (s.pacing || {}).trace || [];
    const share = num(b.at_risk) && num(c.cap) && c.cap > 0 ? Math.min(Math.max(b.at_risk / c.cap, 0), 1) : 0;
    document.getElementById("at-risk-bar").style.width = (100 * share).toFixed(1) + "%";
    chart(document.getElementById("burn-chart"), tl.map((t) => t.second),
          [{ys: tl.map((t) => t.at_risk), cls: "s0", right: false},
           {ys: tl.map((t) => t.paid), cls: "s1", right: false}],
          {value: c.cap, label: "cap " + money(c.cap)}, money);
    chart(document.getElementById("lam-chart"), tr.map((t) => t.time),
          [{ys: tr.map((t) => t.lam), cls: "s0", right: false}, {ys: tr.map((t) => t.target), cls: "s2", right: true}],
          null, sig4);
    levelRows(document.querySelector("#levels tbody"), s.levels || []);
  }

  async function refresh() {
    const conn = document.getElementById("conn");
    try {
      const r = await fetch("/v1/status", {cache: "no-store", headers: {Accept: "application/json"}});
      if (!r.ok) throw new Error("HTTP " + r.status);
      draw(await r.json());
      conn.textContent = "";
    } catch (err) {
      conn.textContent = "(refresh failed: " + err.message + ")";
    } finally {
      setTimeout(refresh, 2000);
    }
  }
  setTimeout(refresh, 2000);
})();
"""
