"""Forest plots on one axis per unit: private scales side by side invite comparing lengths of different meaning."""
from __future__ import annotations

import math

WIDTH, PLOT_H, AXIS_H = 220, 26, 14
CHAR = 5.6  # px per character of the 10 px tick labels, a sans-serif average
COLORS = {"v-holds": "#15803d", "v-fails": "#b91c1c", "v-outside-regime": "#6d28d9"}


def axis_name(r: dict) -> str:
    """The axis a row is drawn on: its unit, else the quantity it compares (a cosine, a ratio)."""
    return r.get("unit") or r.get("quantity") or "effect"


def _extent(r: dict) -> list[float]:
    d = r.get("toward") or {}
    if d.get("effect") is None:
        return []
    return [x for x in (d["effect"], d.get("paper"), 0.0, *(d.get("ci") or ())) if x is not None]


def domain(r: dict, rows: list[dict] | None = None) -> tuple[float, float]:
    """The range every row of ``rows`` on r's axis spans (0, effects, intervals, the paper's), padded."""
    xs = [x for o in rows or [r] if axis_name(o) == axis_name(r) for x in _extent(o)] or _extent(r)
    lo, hi = min(xs), max(xs)
    pad = (hi - lo) * 0.08 or 1.0
    return lo - pad, hi + pad


def ticks(lo: float, hi: float, most: int = 5) -> list[float]:
    """Round values (1, 2, 2.5 or 5 times a power of ten apart) inside [lo, hi], at most ``most`` of them."""
    raw = (hi - lo) / (most - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _axis(lo: float, hi: float, px, name: str) -> list[str]:
    """The axis line, its ticks and their values, the unit at its right end (ticks under the unit left out)."""
    y, label_w = PLOT_H + 1, len(name) * CHAR * 1.1  # the unit is bold
    parts = [f'<line x1="6" y1="{y}" x2="{WIDTH - 6}" y2="{y}" stroke="#8a8f99"/>',
             f'<text x="{WIDTH - 2}" y="{y + 11}" text-anchor="end" class="unit">{name}</text>']
    for t in ticks(lo, hi):
        text, x = ("0" if t == 0 else f"{t:+g}"), px(t)
        if x - len(text) * CHAR / 2 < 0 or x + len(text) * CHAR / 2 > WIDTH - label_w - 10:
            continue
        parts += [f'<line x1="{x}" y1="{y}" x2="{x}" y2="{y + 3}" stroke="#8a8f99"/>',
                  f'<text x="{x}" y="{y + 11}" text-anchor="middle">{text}</text>']
    return parts


def forest_svg(r: dict, rows: list[dict] | None = None) -> str:
    """Ours and the paper's effect in the claim's direction on the axis ``rows`` share; dashed: the threshold."""
    d = r.get("toward") or {}
    if d.get("effect") is None:
        return ""
    lo, hi = domain(r, rows)
    px = lambda x: round(6 + (WIDTH - 12) * (x - lo) / (hi - lo), 1)  # noqa: E731
    y, zero, color = PLOT_H / 2, px(0.0), COLORS.get(r["cls"], "#a16207")
    parts = [f'<rect x="{zero}" y="2" width="{round(WIDTH - 6 - zero, 1)}" height="{PLOT_H - 4}" fill="#e8f6ec"/>',
             f'<line x1="{zero}" y1="1" x2="{zero}" y2="{PLOT_H - 1}" stroke="#333" stroke-dasharray="3 2"/>']
    if d.get("ci"):
        parts.append(f'<line x1="{px(d["ci"][0])}" y1="{y}" x2="{px(d["ci"][1])}" y2="{y}" stroke="{color}" '
                     f'stroke-width="2.5"/>')
    parts.append(f'<circle cx="{px(d["effect"])}" cy="{y}" r="4.5" fill="{color}"/>')
    if d.get("paper") is not None:
        x = px(d["paper"])
        parts.append(f'<path d="M{x} {y - 6} L{x + 6} {y} L{x} {y + 6} L{x - 6} {y} Z" fill="none" stroke="#222" '
                     f'stroke-width="1.3"/>')
    parts += _axis(lo, hi, px, axis_name(r))
    title = (f"in the claim's direction ({axis_name(r)}): ours {d['effect']:+.3g}"
             + (f" [{d['ci'][0]:+.3g}, {d['ci'][1]:+.3g}]" if d.get("ci") else "")
             + (f"; paper {d['paper']:+.3g}" if d.get("paper") is not None else "")
             + "; dashed: the threshold" + (f" (margin {r['margin']:g} taken off)" if r.get("margin") else ""))
    height = PLOT_H + AXIS_H
    return (f'<svg class="forest" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img">'
            f'<title>{title}</title>{"".join(parts)}</svg>')
