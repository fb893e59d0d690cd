"""What a python_train run measured, and how it is shown: the summary table, the self-contained HTML report (inline
SVG charts, no scripts or external files) and the one-line JSON result — the content and layout of
examples/jit_train_demo/report.hpp."""
import html
import json
import math


class RunRecord:
    def __init__(self):
        self.mode, self.ranks, self.data_dir, self.endpoints, self.models = "", 1, "", "", ""
        self.dataset_size = self.batch = self.parameters = 0
        self.wall_s = self.stall_s = self.train_s = 0.0
        self.samples = self.embed_requests = self.retries = self.hedges = 0
        self.failed_samples = self.lost_samples = self.duplicated_samples = 0
        self.verified_samples = self.verify_mismatches = 0
        self.verify_max_abs = None
        self.steps = []   # {"t_end", "stall_s", "train_s", "epoch", "samples"} as rank 0 saw them
        self.epochs = []  # {"loss", "samples", "seconds", "stall_s", "embed_requests", "cache_hits", "cache_lookups"}
        self.resumed_from = None
        self.notes = []

    def samples_per_s(self):
        return self.samples / self.wall_s if self.wall_s > 0 else 0.0

    def stall_fraction(self):
        return self.stall_s / self.wall_s if self.wall_s > 0 else 0.0


def _stall(e):
    return e["stall_s"] / e["seconds"] if e["seconds"] > 0 else 0.0


def _hit(e):
    return e["cache_hits"] / e["cache_lookups"] if e["cache_lookups"] else 0.0


def to_json(r):
    return {
        "bench": "python_train", "mode": r.mode, "ranks": r.ranks, "epochs": len(r.epochs), "samples": r.samples,
        "dataset_samples": r.dataset_size, "batch": r.batch, "models": r.models, "parameters": r.parameters,
        "wall_s": round(r.wall_s, 3), "samples_per_s": round(r.samples_per_s(), 1),
        "trainer_stall_fraction": round(r.stall_fraction(), 4), "embed_requests": r.embed_requests,
        "cache_hit_rate_epoch": [round(_hit(e), 4) for e in r.epochs],
        "embed_requests_epoch": [e["embed_requests"] for e in r.epochs],
        "samples_per_s_epoch": [round(e["samples"] / e["seconds"], 1) if e["seconds"] > 0 else 0 for e in r.epochs],
        "trainer_stall_fraction_epoch": [round(_stall(e), 4) for e in r.epochs],
        "seconds_epoch": [round(e["seconds"], 4) for e in r.epochs], "steps_epoch": [e.get("steps", 0) for e in r.epochs],
        "stall_s_epoch": [round(e["stall_s"], 4) for e in r.epochs],
        "train_s_epoch": [round(e.get("train_s", 0.0), 4) for e in r.epochs],
        "samples_epoch": [e["samples"] for e in r.epochs],
        "retries": r.retries, "hedges": r.hedges, "failed_samples": r.failed_samples, "lost_samples": r.lost_samples,
        "duplicated_samples": r.duplicated_samples, "verified_samples": r.verified_samples,
        "verify_mismatches": r.verify_mismatches, "verify_max_abs": r.verify_max_abs, "resumed_from": r.resumed_from,
        "loss_epoch": [e["loss"] for e in r.epochs],  # repr: two runs print the same only if their doubles agree
    }


def summary_table(r):
    o = [f"\npython_train: mode {r.mode}, {r.ranks} rank(s) (DDP, gloo), {r.dataset_size} samples, batch {r.batch}, "
         f"{r.models}, {r.parameters} parameters"
         + (f", resumed from {r.resumed_from}" if r.resumed_from else ""),
         "  epoch   loss            samples   seconds   samples/s   stall   requests   cache hit"]
    for i, e in enumerate(r.epochs):
        sps = e["samples"] / e["seconds"] if e["seconds"] > 0 else 0.0
        o.append(f"  {i + 1:<5}   {e['loss']:<13.9g}   {e['samples']:7d}   {e['seconds']:7.2f}   {sps:9.1f}   "
                 f"{100 * _stall(e):4.1f}%   {e['embed_requests']:8d}   {100 * _hit(e):8.1f}%")
    o.append(f"  total: {r.samples} samples in {r.wall_s:.2f} s = {r.samples_per_s():.1f} samples/s; trainer stalled "
             f"{100 * r.stall_fraction():.1f}% ({r.stall_s:.2f} s), trained {r.train_s:.2f} s")
    o.append(f"  requests {r.embed_requests}, retries {r.retries}, failed {r.failed_samples}, lost {r.lost_samples}, "
             f"duplicated {r.duplicated_samples}, verified {r.verified_samples} (mismatches {r.verify_mismatches}"
             + (f", max abs {r.verify_max_abs:.3g}" if r.verify_max_abs is not None else "") + ")")
    o += [f"  note: {n}" for n in r.notes]
    return "\n".join(o) + "\n"


def _nice_ceil(v):
    if v <= 0:
        return 1.0
    p = 10.0 ** math.floor(math.log10(v))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * p >= v:
            return m * p
    return 10 * p


def chart(title, xlabel, ylabel, series, bars=False, ymax_fixed=0.0, markers=(), timeline=False):
    """A line chart (or bars, one per x) with axes, ticks, a legend and dashed vertical markers, as inline SVG."""
    W, H, L, R, T, B = 640, 260, 60, 20, 30, 45
    pts = [p for s in series for p in s["points"]]
    xmin = min((x for x, _ in pts), default=0.0)
    xmax = max((x for x, _ in pts), default=1.0)
    ymax = max((y for _, y in pts), default=0.0)
    if bars:
        xmin, xmax = xmin - 0.5, xmax + 0.5
    if timeline:
        xmin = 0.0
    if xmax == xmin:
        xmax = xmin + 1
    ymax = ymax_fixed if ymax_fixed > 0 else 4 * _nice_ceil(ymax / 4)
    X = lambda x: L + (x - xmin) / (xmax - xmin) * (W - L - R)  # noqa: E731
    Y = lambda y: H - B - y / ymax * (H - T - B)  # noqa: E731
    o = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' viewBox='0 0 {W} {H}' font-family='sans-serif' "
         f"font-size='11'>",
         f"<text x='{W / 2}' y='16' text-anchor='middle' font-size='13' font-weight='bold'>{html.escape(title)}</text>",
         f"<line x1='{L}' y1='{H - B}' x2='{W - R}' y2='{H - B}' stroke='#333'/>",
         f"<line x1='{L}' y1='{T}' x2='{L}' y2='{H - B}' stroke='#333'/>"]
    for i in range(5):
        y = ymax * i / 4
        o.append(f"<line x1='{L}' y1='{Y(y):.1f}' x2='{W - R}' y2='{Y(y):.1f}' stroke='#ddd'/>"
                 f"<text x='{L - 5}' y='{Y(y) + 4:.1f}' text-anchor='end'>{y:.2f}</text>" if ymax < 10 else
                 f"<line x1='{L}' y1='{Y(y):.1f}' x2='{W - R}' y2='{Y(y):.1f}' stroke='#ddd'/>"
                 f"<text x='{L - 5}' y='{Y(y) + 4:.1f}' text-anchor='end'>{y:.0f}</text>")
    for m in markers:
        o.append(f"<line x1='{X(m):.1f}' y1='{T}' x2='{X(m):.1f}' y2='{H - B}' stroke='#999' stroke-dasharray='4 3'/>")
    whole = bars or not timeline
    xt = round(xmax - xmin) if whole else 5
    for i in range(xt + 1):
        if bars and i == xt:
            break
        x = xmin + 0.5 + i if bars else xmin + (xmax - xmin) * i / max(xt, 1)
        label = f"{x:.0f}" if whole else (f"{x:.2f}" if xmax - xmin < 2 else f"{x:.1f}")
        o.append(f"<text x='{X(x):.1f}' y='{H - B + 15}' text-anchor='middle'>{label}</text>")
    o.append(f"<text x='{(L + W - R) / 2}' y='{H - 8}' text-anchor='middle'>{html.escape(xlabel)}</text>")
    o.append(f"<text x='14' y='{(T + H - B) / 2}' text-anchor='middle' transform='rotate(-90 14 {(T + H - B) / 2})'>"
             f"{html.escape(ylabel)}</text>")
    bw = (W - L - R) / (xmax - xmin) * 0.8 / max(len(series), 1) if bars else 0
    for k, s in enumerate(series):
        if bars:
            for x, y in s["points"]:
                x0 = X(x) - bw * len(series) / 2 + bw * k
                o.append(f"<rect x='{x0:.1f}' y='{Y(y):.1f}' width='{bw:.1f}' height='{Y(0) - Y(y):.1f}' fill='{s['colour']}'>"
                         f"<title>{html.escape(s['name'])}: {y:.3f}</title></rect>"
                         f"<text x='{x0 + bw / 2:.1f}' y='{Y(y) - 3:.1f}' text-anchor='middle'>{100 * y:.0f}%</text>")
        else:
            o.append(f"<polyline fill='none' stroke='{s['colour']}' stroke-width='1.8' points='"
                     + " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in s["points"]) + "'/>")
        if len(series) > 1:
            o.append(f"<rect x='{W - R - 150}' y='{T + 4 + 14 * k}' width='10' height='10' fill='{s['colour']}'/>"
                     f"<text x='{W - R - 135}' y='{T + 13 + 14 * k}'>{html.escape(s['name'])}</text>")
    o.append("</svg>")
    return "\n".join(o) + "\n"


def time_series(r):
    """Throughput and stall over time, in windows of about a 40th of the run (at least one step each)."""
    tput, stall = {"name": "samples/s", "colour": "#1f77b4", "points": []}, {"name": "stall fraction", "colour": "#d62728", "points": []}
    window = max(r.wall_s / 40, 0.05)
    t0, acc, n = 0.0, 0.0, 0
    for i, s in enumerate(r.steps):
        n += s["samples"]
        acc += s["stall_s"]
        if s["t_end"] - t0 >= window or i == len(r.steps) - 1:
            dt = max(s["t_end"] - t0, 1e-9)
            tput["points"].append((s["t_end"], n / dt))
            stall["points"].append((s["t_end"], min(1.0, acc / dt)))
            t0, n, acc = s["t_end"], 0, 0.0
    return tput, stall


def write_html_report(path, r, j):
    tput, stall = time_series(r)
    hits = {"name": "cache hit rate", "colour": "#2ca02c", "points": [(i + 1, _hit(e)) for i, e in enumerate(r.epochs)]}
    loss = {"name": "loss (MSE)", "colour": "#9467bd", "points": [(i + 1, e["loss"]) for i, e in enumerate(r.epochs)]}
    ends = [r.steps[i]["t_end"] for i in range(len(r.steps) - 1) if r.steps[i + 1]["epoch"] != r.steps[i]["epoch"]]
    how = (f"Embeddings came just in time from {html.escape(r.endpoints)} through the prefetching jitembed.torch.Loader."
           if r.mode == "jit" else "Embeddings were computed inside the training step by the same encoders in this process "
           "(TorchScript + torchvision / sentencepiece preprocessing; the baseline).")
    with open(path, "w", encoding="utf-8") as f:
        f.write("<!doctype html>\n<html><head><meta charset='utf-8'><title>python_train: " + html.escape(r.mode) + "</title>\n"
                "<style>body{font-family:sans-serif;max-width:720px;margin:2em auto;color:#222}pre{background:#f6f6f6;"
                "padding:8px;overflow-x:auto;font-size:12px}svg{display:block;margin:1em 0}</style></head><body>\n")
        f.write(f"<h1>python_train — {html.escape(r.mode)} mode</h1>\n<p>A text-conditioned diffusion transformer "
                f"(PyTorch, DDP over {r.ranks} gloo rank(s)) trained on VAE latents conditioned on T5 caption embeddings. "
                f"{how} Data: <code>{html.escape(r.data_dir)}</code>.</p>\n")
        f.write("<h2>Summary</h2><pre>" + html.escape(summary_table(r)) + "</pre>\n")
        f.write(chart("Throughput over time (dashed: epoch ends)", "seconds", "samples / s", [tput], markers=ends, timeline=True))
        f.write(chart("Trainer stall over time (dashed: epoch ends)", "seconds", "fraction of the time waiting", [stall],
                      ymax_fixed=1.0, markers=ends, timeline=True))
        f.write(chart("Cache hit rate per epoch", "epoch", "hit rate", [hits], bars=True, ymax_fixed=1.0))
        f.write(chart("Loss per epoch", "epoch", "MSE", [loss]))
        f.write("<h2>Result line</h2><pre>" + html.escape(json.dumps(j)) + "</pre>\n</body></html>\n")
    return True
