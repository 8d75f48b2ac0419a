"""Small SVG charts written by hand: no plotting library to install, text stays sharp at any zoom,
and the page stays one file (SVG inlines into HTML as it is)."""

from __future__ import annotations

import math
from html import escape

W, H = 460, 240
LEFT, RIGHT, TOP, BOTTOM = 58, 12, 28, 34
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 12))
        t += step
    return ticks


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-2:
        return f"{v:.1e}"
    return f"{v:.3g}"


def _smooth(points: list[tuple[float, float]], window: int) -> list[tuple[float, float]]:
    """A trailing mean, so a noisy per-step loss shows its trend (the raw line is drawn faintly too)."""
    out, acc = [], []
    for x, y in points:
        acc.append(y)
        if len(acc) > window:
            acc.pop(0)
        out.append((x, sum(acc) / len(acc)))
    return out


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], xlabel: str = "step") -> str:
    """One chart, one line per named series (a run, or a run's data source)."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return ""
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    yt = _nice_ticks(min(ys), max(ys))
    y0, y1 = min(yt[0], min(ys)), max(yt[-1], max(ys))
    if y1 == y0:
        y1 = y0 + 1
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x):
        return LEFT + (x - x0) / (x1 - x0) * pw

    def py(y):
        return TOP + ph - (y - y0) / (y1 - y0) * ph

    el = [(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="11"><title>{escape(title)}</title>'),
          f'<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>',
          f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>']
    for t in yt:
        el.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#e4e4e4"/>'
                  f'<text x="{LEFT - 4}" y="{py(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for t in _nice_ticks(x0, x1):
        el.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{TOP + ph}" y2="{TOP + ph + 4}" stroke="#555"/>'
                  f'<text x="{px(t):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{_fmt(t)}</text>')
    el.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#555"/>'
              f'<text x="{LEFT + pw / 2}" y="{H - 4}" text-anchor="middle" fill="#555">{escape(xlabel)}</text>')
    for i, (name, s) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        s = sorted(s)
        window = max(1, len(s) // 40)
        if window > 1:  # noisy per-step series: the raw values faint, the trend bold
            el.append(_path(s, px, py, colour, 0.25))
            s = _smooth(s, window)
        el.append(_path(s, px, py, colour, 1.0))
        if len(s) <= 12:  # few points (eval): mark each
            el.extend(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>' for x, y in s)
        if len(series) > 1:
            el.append(f'<text x="{LEFT + 6}" y="{TOP + 14 + 13 * i}" fill="{colour}">{escape(name)}</text>')
    el.append("</svg>")
    return "".join(el)


def _path(s, px, py, colour: str, opacity: float) -> str:
    d = " ".join(f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for j, (x, y) in enumerate(s))
    return f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="1.6" stroke-opacity="{opacity}"/>'


def bar_chart(title: str, bars: list[tuple[str, float]], unit: str = "") -> str:
    """Horizontal bars with their values written on them (planned vs measured memory, skip reasons)."""
    bars = [(k, v) for k, v in bars if v is not None]
    if not bars:
        return ""
    top = max(v for _, v in bars) or 1.0
    row, label_w = 26, 170
    h = TOP + row * len(bars) + 10
    el = [(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h}" width="{W}" height="{h}" '
           f'font-family="sans-serif" font-size="11"><title>{escape(title)}</title>'),
          f'<rect x="0" y="0" width="{W}" height="{h}" fill="white"/>',
          f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{escape(title)}</text>']
    for i, (name, v) in enumerate(bars):
        y = TOP + i * row
        w = (W - label_w - 70) * v / top
        el.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{escape(name)}</text>'
                  f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" fill="{COLOURS[i % len(COLOURS)]}"/>'
                  f'<text x="{label_w + w + 4:.1f}" y="{y + 15}">{_fmt(v)}{escape(unit)}</text>')
    el.append("</svg>")
    return "".join(el)
