"""report.html of a what-if replay: self-contained (PNG plots as base64, no script), every plot
with a one-line reading under it, as the training report has."""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import numpy as np

from simulator.timeline.workload import CLASSES
from simulator.whatif.metrics import pick_sentence
from simulator.whatif.summary import summary_lines

STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:"
         "collapse;margin:6px 0}th,td{border:1px solid #ccc;padding:2px 8px;text-align:right;"
         "font-size:13px}th:first-child,td:first-child{text-align:left}figure{display:inline-"
         "block;margin:6px;max-width:540px;vertical-align:top}img{border:1px solid #eee;"
         "max-width:100%}figcaption{font-size:13px;color:#333}li{font-size:13px}")


def _fig(w: float = 5.4, h: float = 3.3):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(w, h))


def _encode(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _num(x) -> float:
    return np.nan if x is None else float(x)


def _bars(ax, names: list[str], groups: list[str], values: np.ndarray, ylabel: str) -> None:
    """Grouped bars: one group per entry of ``groups``, one bar per policy in ``names``."""
    k = len(names)
    x = np.arange(len(groups))
    for i, n in enumerate(names):
        ax.bar(x + (i - (k - 1) / 2) * 0.8 / k, np.nan_to_num(values[i]), 0.8 / k, label=n)
    ax.set_xticks(x)
    ax.set_xticklabels(groups, fontsize=7, rotation=30 if len(groups) > 5 else 0)
    ax.set_ylabel(ylabel)
    positive = values[np.isfinite(values) & (values > 0)]  # none: every bar 0 or unknown
    if positive.size and positive.max() > 20 * max(float(np.median(positive)), 1.0):
        # one bar dwarfs the rest
        ax.set_yscale("symlog", linthresh=10)
        ax.set_ylabel(ylabel + " (log above 10)")
    ax.legend(fontsize=6, ncol=2)


def _best(names, vals, low=True) -> tuple[str, float]:
    """The best policy's name and value; "every policy (tied)" when all are equal."""
    v = np.where(np.isnan(vals), np.inf if low else -np.inf, vals)
    i = int(np.argmin(v) if low else np.argmax(v))
    ties = int((v == v[i]).sum())
    if ties == len(v):
        return "every policy (tied)", float(vals[i])
    return names[i] + (f" (and {ties - 1} tied)" if ties > 1 else ""), float(vals[i])


def plots(doc: dict, inp, raw: dict) -> list[tuple[str, bytes, str]]:
    """(name, PNG, one-line reading) per plot."""
    rows = doc["policies"]
    names = [r["policy"] for r in rows]
    base = next((r for r in rows if r["policy"] == "kube-default"), rows[0])
    out = []
    fig, ax = _fig()
    v = np.array([[_num(r["all"][k]) for k in ("p50_min", "p95_min", "mean_min")]
                  for r in rows])
    _bars(ax, names, ["p50", "p95", "mean"], v, "queueing delay (min)")
    ax.set_title("Queueing delay, all jobs", fontsize=9)
    b, bv = _best(names, v[:, 1])
    m, mv = _best(names, v[:, 2])
    out.append(("delay_all", _encode(fig), f"Lowest p95 delay: {b} at {bv:.1f} min, against "
                f"{_num(base['all']['p95_min']):.1f} min with {base['policy']}; lowest mean: "
                f"{m} at {mv:.1f} min ({_num(base['all']['mean_min']):.1f} with "
                f"{base['policy']})."))
    fig, ax = _fig()
    v = np.array([[_num(r[c]["p95_min"]) for c in CLASSES] for r in rows])
    _bars(ax, names, [f"{c} ({rows[0][c]['n']})" for c in CLASSES], v, "p95 delay (min)")
    ax.set_title("p95 queueing delay by size class (jobs)", fontsize=9)
    worst = CLASSES[int(np.nanargmax(np.nan_to_num(v, nan=-1).max(axis=0)))]
    out.append(("delay_class", _encode(fig), f"Size class {worst} waits longest "
                f"({np.nanmax(v):.1f} min at p95 under some policy); per class "
                f"the lowest p95 is with: " + ", ".join(
                    f"{c} {_best(names, v[:, i])[0]}" for i, c in enumerate(CLASSES)
                    if rows[0][c]["n"]) + "."))
    queues = sorted(rows[0]["queues"], key=lambda q: -rows[0]["queues"][q]["n"])[:12]
    fig, ax = _fig()
    v = np.array([[_num(r["queues"][q]["p95_min"]) for q in queues] for r in rows])
    _bars(ax, names, queues, v, "p95 delay (min)")
    ax.set_title("p95 queueing delay by queue (12 largest)", fontsize=9)
    wins = [f"{q} {_best(names, v[:, i])[0]}" for i, q in enumerate(queues[:6])]
    out.append(("delay_queue", _encode(fig), "Lowest p95 per queue: " + "; ".join(wins)
                + (f"; {len(queues) - 6} more in the table below." if len(queues) > 6 else ".")))
    for key, ylabel, what in (("alloc", "GPU allocation (%)", "allocation"),
                              ("queue_gpus", "GPUs asked by waiting jobs", "queue")):
        fig, ax = _fig(10.8, 3.3)
        for n in names:
            s = raw[n].samples
            keep = (s["t"] >= 0) & (s["t"] < inp.t_end)
            ax.plot(s["t"][keep] / 86400, s[key][keep], lw=0.8, label=n)
        ax.set_xlabel("day of the replay")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7, ncol=3)
        ax.set_title(f"{ylabel} over time", fontsize=9)
        if key == "alloc":
            m = np.array([r["alloc_mean"] for r in rows])
            reading = (f"Mean allocation from {m.min():.1f}% ({names[int(m.argmin())]}) to "
                       f"{m.max():.1f}% ({names[int(m.argmax())]})." if m.min() < m.max()
                       else f"Mean allocation {m.min():.1f}% under every policy.")
        else:
            m = np.array([float(np.mean(raw[n].samples["queue_gpus"])) for n in names])
            reading = (f"Mean GPUs waiting: {m.min():.1f} ({names[int(m.argmin())]}) to "
                       f"{m.max():.1f} ({names[int(m.argmax())]})." if m.min() < m.max()
                       else f"Mean GPUs waiting: {m.min():.1f} under every policy.")
        out.append((what, _encode(fig), reading))
    fig, ax = _fig()
    v = np.array([[r["idle_gpu_h_waiting"], r["frag_blocked_jobs"]] for r in rows], float)
    _bars(ax, names, ["idle GPU-h while jobs waited", "jobs blocked by fragmentation"], v,
          "count / GPU-hours")
    ax.set_title("Waste: idle GPUs while jobs waited, fragmentation", fontsize=9)
    b, bv = _best(names, v[:, 0])
    out.append(("waste", _encode(fig), f"Fewest idle GPU-hours while jobs waited: {b} "
                f"({bv:.0f}; {base['policy']} {base['idle_gpu_h_waiting']:.0f}); fewest "
                f"fragmentation-blocked jobs: {_best(names, v[:, 1])[0]}."))
    rs = doc["right_size"]
    if rs.get("tried"):
        fig, ax = _fig()
        t = rs["tried"]
        ax.plot([x["gpus"] for x in t], [x["p95_min"] for x in t], "o", label=rs["policy"])
        ax.axhline(rs["target_p95_min"], color="k", ls="--", lw=0.8,
                   label="kube-default p95, every node")
        ax.set_xlabel("GPUs in the cluster")
        ax.set_ylabel("p95 delay (min)")
        ax.legend(fontsize=7)
        ax.set_title("Right-sizing: p95 delay on fewer nodes", fontsize=9)
        out.append(("right_size", _encode(fig), f"{rs['policy']} keeps the baseline's p95 "
                    f"with {rs['spare_gpus']} of {rs['gpus']} GPUs fewer (of the sizes "
                    "tried)."))
    return out


def _table(rows: list[dict]) -> str:
    head = ["policy", "p50 min", "p95 min", "mean min", "8+/gang p95", "alloc %",
            "idle GPU-h waiting",
            "frag-blocked jobs", "gang deadlocks", "never started"]
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in (
            r["policy"], r["all"]["p50_min"], r["all"]["p95_min"], r["all"]["mean_min"],
            r["8+gang"]["p95_min"],
            r["alloc_mean"], r["idle_gpu_h_waiting"], r["frag_blocked_jobs"],
            r["gang_deadlocks"], r["unstarted"])) + "</tr>" for r in rows)
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + f"</tr>{body}</table>"


def _queue_table(rows: list[dict]) -> str:
    """p50 / p95 (min) per queue (rows, largest first) and policy (columns)."""
    queues = sorted(rows[0]["queues"], key=lambda q: -rows[0]["queues"][q]["n"])
    head = "".join(f"<th>{html.escape(r['policy'])}</th>" for r in rows)
    body = "".join(
        f"<tr><td>{html.escape(q)}</td><td>{rows[0]['queues'][q]['n']}</td>" + "".join(
            f"<td>{r['queues'][q]['p50_min']} / {r['queues'][q]['p95_min']}</td>"
            for r in rows) + "</tr>" for q in queues)
    return f"<table><tr><th>queue</th><th>jobs</th>{head}</tr>{body}</table>"


def write_report(doc: dict, inp, raw: dict, out: Path, png_dir: Path | None = None) -> Path:
    """Write out/report.html (and each plot as PNG into ``png_dir`` when given)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figs = plots(doc, inp, raw)
    if png_dir is not None:
        png_dir.mkdir(parents=True, exist_ok=True)
        for name, png, _ in figs:
            (png_dir / f"{name}.png").write_bytes(png)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in doc["notes"]) or "<li>none</li>"
    pick = "".join(f"<p><b>{html.escape(s)}</b></p>" for s in pick_sentence(doc["pick"]))
    parts = [f"<h1>What-if: {html.escape(doc['source'])}</h1>", pick,
             "<h2>Per policy</h2>", _table(doc["policies"]),
             "<h2>Plots</h2>"] + [
        f'<figure><img alt="{name}" src="data:image/png;base64,'
        f'{base64.b64encode(png).decode()}"><figcaption>{html.escape(reading)}</figcaption>'
        "</figure>" for name, png, reading in figs] + [
        "<h2>Queueing delay p50 / p95 (min) per queue</h2>", _queue_table(doc["policies"]),
        "<h2>What the input lacked or got wrong</h2>", f"<ul>{notes}</ul>",
        "<h2>Terminal summary</h2>",
        f"<pre>{html.escape(chr(10).join(summary_lines(doc)))}</pre>"]
    path = out / "report.html"
    tmp = out / "report.html.tmp"
    tmp.write_text("<!doctype html><html><head><meta charset='utf-8'><title>Foresight what-if"
                   f"</title><style>{STYLE}</style></head><body>" + "\n".join(parts)
                   + "</body></html>")
    tmp.replace(path)
    return path


def plots_to_dir(report: Path, out: Path) -> list[tuple[str, str]]:
    """Each plot of a written report.html as out/<name>.png; (name, reading) per plot."""
    import re

    out.mkdir(parents=True, exist_ok=True)
    got = []
    for name, b64, reading in re.findall(r'<img alt="(\w+)" src="data:image/png;base64,'
                                         r'([^"]+)"><figcaption>([^<]*)</figcaption>',
                                         Path(report).read_text()):
        (out / f"{name}.png").write_bytes(base64.b64decode(b64))
        got.append((name, html.unescape(reading)))
    return got
