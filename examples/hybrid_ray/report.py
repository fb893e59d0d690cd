"""examples/hybrid_ray: the run's self-contained HTML report (inline SVG charts, no scripts or external files)
from jitembed.ray.hybrid's summary: losses, tokens/s, step time per step, peak bytes per module, boundary bytes."""

from __future__ import annotations

import html
import json
from typing import Dict, List, Sequence, Tuple

COLOURS = {"encoder": "#1f77b4", "llm": "#ff7f0e", "boundary": "#2ca02c"}


def _nice(v: float) -> float:
    """The smallest 1/2/5 x 10^k at or above v (an axis' top)."""
    if v <= 0:
        return 1.0
    k = 10 ** len(str(int(v))) / 10 if v >= 1 else 1.0
    while k > v:
        k /= 10
    for m in (1, 2, 5, 10):
        if m * k >= v:
            return m * k
    return 10 * k


def _chart(title: str, xlabel: str, ylabel: str, series: Sequence[Tuple[str, str, List[Tuple[float, float]]]],
           markers: Sequence[float] = (), bars: bool = False) -> str:
    W, H, L, R, T, B = 680, 240, 64, 16, 28, 36
    pts = [p for _, _, s in series for p in s]
    if not pts:
        return ""
    xmin, xmax = min(x for x, _ in pts), max(x for x, _ in pts)
    ymin = 0.0 if bars else min(y for _, y in pts)
    ymax = max(y for _, y in pts)
    if bars:
        xmin, xmax, ymax = xmin - 0.5, xmax + 0.5, _nice(ymax)
    else:  # a loss curve: the data's own range, a little margin
        pad = (ymax - ymin) * 0.1 or abs(ymax) * 0.05 or 1.0
        ymin, ymax = ymin - pad, ymax + pad
    if xmax == xmin:
        xmax = xmin + 1

    def X(x):
        return L + (x - xmin) / (xmax - xmin) * (W - L - R)

    def Y(y):
        return H - B - (y - ymin) / (ymax - ymin) * (H - T - B)

    o = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' viewBox='0 0 {W} {H}' font-family='sans-serif' "
         f"font-size='11'>",
         f"<text x='{W / 2}' y='16' text-anchor='middle' font-size='13' font-weight='bold'>{html.escape(title)}</text>",
         f"<line x1='{L}' y1='{H - B}' x2='{W - R}' y2='{H - B}' stroke='#333'/>",
         f"<line x1='{L}' y1='{T}' x2='{L}' y2='{H - B}' stroke='#333'/>"]
    for i in range(5):
        y = ymin + (ymax - ymin) * i / 4
        label = f"{y:,.0f}" if ymax >= 1000 else f"{y:.4g}"
        o.append(f"<line x1='{L}' y1='{Y(y):.1f}' x2='{W - R}' y2='{Y(y):.1f}' stroke='#ddd'/>"
                 f"<text x='{L - 5}' y='{Y(y) + 4:.1f}' text-anchor='end'>{label}</text>")
    for m in markers:
        o.append(f"<line x1='{X(m):.1f}' y1='{T}' x2='{X(m):.1f}' y2='{H - B}' stroke='#999' stroke-dasharray='4 3'/>")
    ticks = sorted({x for x, _ in pts})
    step = max(1, len(ticks) // 10)
    for x in ([] if bars else ticks[::step]):  # bars: one group, named by the legend
        o.append(f"<text x='{X(x):.1f}' y='{H - B + 15}' text-anchor='middle'>{x:g}</text>")
    o.append(f"<text x='{(L + W - R) / 2}' y='{H - 6}' text-anchor='middle'>{html.escape(xlabel)}</text>")
    o.append(f"<text x='14' y='{(T + H - B) / 2}' text-anchor='middle' transform='rotate(-90 14 {(T + H - B) / 2})'>"
             f"{html.escape(ylabel)}</text>")
    bw = (W - L - R) / (xmax - xmin) * 0.8 / max(len(series), 1)
    for k, (name, colour, s) in enumerate(series):
        if bars:
            for x, y in s:
                x0 = X(x) - bw * len(series) / 2 + bw * k
                o.append(f"<rect x='{x0:.1f}' y='{Y(y):.1f}' width='{bw:.1f}' height='{Y(0) - Y(y):.1f}' fill='{colour}'>"
                         f"<title>{html.escape(name)}: {y:,.0f}</title></rect>"
                         f"<text x='{x0 + bw / 2:.1f}' y='{Y(y) - 3:.1f}' text-anchor='middle'>{y:,.0f}</text>")
        else:
            o.append(f"<polyline fill='none' stroke='{colour}' stroke-width='1.8' points='"
                     + " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in s) + "'/>")
        if len(series) > 1:
            o.append(f"<rect x='{W - R - 150}' y='{T + 4 + 14 * k}' width='10' height='10' fill='{colour}'/>"
                     f"<text x='{W - R - 135}' y='{T + 13 + 14 * k}'>{html.escape(name)}</text>")
    o.append("</svg>")
    return "\n".join(o)


def write_report(path: str, s: Dict) -> None:
    steps = s["per_step"]
    restarts_at = [s["resumed_from"] + 0.5] if s["restarts"] else []
    loss = [(i + 1, l) for i, l in enumerate(s["losses"])]
    tput = [(p["step"], p["tokens_per_s"]) for p in steps]
    step_ms = [(p["step"], p["step_s"] * 1e3) for p in steps]
    peaks = [(m, COLOURS[m], [(1, s["peak_bytes"][m])]) for m in ("encoder", "llm", "boundary")]
    bnd = [(p["step"], p["boundary_bytes"]) for p in steps]
    g = s["groups"]
    rows = [("world", f"{s['world']} ranks, one Ray actor each"),
            ("encoder group", f"SP={len(g['encoder']['ranks'])} on ranks {g['encoder']['ranks']}, "
                              f"{g['encoder']['num_cpus']:g} CPU + {g['encoder']['num_gpus']:g} GPU per actor"),
            ("llm group", f"TP={len(g['llm']['ranks'])} on ranks {g['llm']['ranks']}, "
                          f"{g['llm']['num_cpus']:g} CPU + {g['llm']['num_gpus']:g} GPU per actor"),
            ("placement", s["placement"]),
            ("step", f"batch {s['batch']} in {s['microbatches']} microbatch(es), schedule {s['schedule']}, "
                     f"{s['tokens_per_step']} tokens"),
            ("loss", f"{s['loss_first']:.6f} -> {s['loss_last']:.6f} over {s['steps']} steps"),
            ("tokens/s", f"{s['tokens_per_s']:,.0f} (median over steps; step time {s['step_s_median'] * 1e3:.1f} ms)"),
            ("peak bytes per rank", ", ".join(f"{m} {s['peak_bytes'][m]:,}" for m in ("encoder", "llm", "boundary"))),
            ("boundary bytes per step", f"{s['boundary_bytes_per_step']:,} (sent, all ranks)"),
            ("restarts", f"{s['restarts']}" + (f", resumed from step {s['resumed_from']}" if s["restarts"] else "")),
            ("wall time", f"{s['wall_s']:.1f} s")]
    actors = "".join(f"<tr><td>{a['rank']}</td><td>{m}</td><td>{a.get('pid', '')}</td><td>{a.get('node', '')}</td>"
                     f"<td>{','.join(a.get('gpu_ids', [])) or '-'}</td></tr>" for m, gr in g.items() for a in gr["actors"])
    out = ["<!doctype html>\n<html><head><meta charset='utf-8'><title>hybrid_ray</title>",
           "<style>body{font-family:sans-serif;max-width:720px;margin:2em auto;color:#222}pre{background:#f6f6f6;"
           "padding:8px;overflow-x:auto;font-size:12px}svg{display:block;margin:1em 0}td,th{padding:2px 8px;"
           "text-align:left}</style></head><body>",
           "<h1>hybrid_ray — a module per Ray actor group</h1>",
           "<p>A vision encoder, sequence parallel (Ulysses), feeding a language model, tensor parallel (Megatron); "
           "each module on its own group of Ray actors, each actor running its rank as a child process of "
           "<code>hybrid_parallel</code>. The ranks talk Gloo over TCP on 127.0.0.1; Ray places and supervises them. "
           "Peak bytes: the largest over a module's ranks of what its ops allocated live during a step.</p>",
           "<h2>Summary</h2><table>" + "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
                                                for k, v in rows) + "</table>",
           _chart("Loss per step", "step", "loss", [("loss", "#9467bd", loss)], restarts_at),
           _chart("Tokens/s per step (the slowest rank's step time)", "step", "tokens/s",
                  [("tokens/s", "#1f77b4", tput)], restarts_at),
           _chart("Step time", "step", "ms", [("step ms", "#8c564b", step_ms)], restarts_at),
           _chart("Peak live bytes per rank, by module", "", "bytes", peaks, bars=True),
           _chart("Boundary bytes per step (activation forward, gradient back)", "step", "bytes",
                  [("boundary", COLOURS["boundary"], bnd)]),
           "<h2>Actors</h2><table><tr><th>rank</th><th>group</th><th>pid</th><th>node</th><th>GPU ids</th></tr>"
           + actors + "</table>"]
    if s["failures"]:
        out.append("<h2>Restarts</h2><ul>" + "".join(f"<li>{html.escape(f)}</li>" for f in s["failures"]) + "</ul>"
                   f"<p>Dashed line: the step the run resumed after (the latest complete checkpoint).</p>")
    line = {k: v for k, v in s.items() if k not in ("per_step", "groups")}
    out.append("<h2>Result line</h2><pre>" + html.escape(json.dumps(line)) + "</pre></body></html>\n")
    with open(path, "w") as f:
        f.write("\n".join(out))
