"""Run report: metrics.json and a self-contained report.html (PNG plots embedded as base64)."""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: the CronJob has no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from training.kinds import load_kind  # noqa: E402
from training.pipeline import RunResult, best_baseline  # noqa: E402
from artifacts.registry import Registry  # noqa: E402


def metrics_doc(result: RunResult, registry: str) -> dict:
    return {"source": result.source, "window": result.window, "registry": registry,
            "hygiene": result.hygiene, "stage_seconds": result.stages,
            "peak_rss_mb": result.peak_mb,
            "kinds": {k.kind: {"status": k.status, "reason": k.reason, "version": k.version,
                               "best_baseline": best_baseline(k.metrics),
                               "in_service_before": k.in_service, "backtest": k.metrics,
                               "in_service_backtest": k.service_metrics, "seconds": k.seconds}
                      for k in result.kinds}}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _history_plot(reg: Registry, kind: str) -> tuple[str, str] | None:
    rows = []
    for body in reg.history(kind):
        m = body.get("metrics") or {}
        p = m.get("primary")
        if p and isinstance(m.get(p), (int, float)):
            base = best_baseline(m)
            rows.append((int(body["version"]), m[p], p, base[1] if base else None))
    if not rows:
        return None
    df = pd.DataFrame(rows, columns=["version", "value", "metric", "baseline"])
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(df["version"], df["value"], "o-", label=f"backtest {df['metric'].iloc[0]}")
    if df["baseline"].notna().any():
        ax.plot(df["version"], df["baseline"], "s:", label="best baseline (same window)")
    cur = reg.current(kind)
    if cur is not None:
        ax.axvline(int(cur), color="g", ls="--", lw=0.8, label=f"current v{cur}")
    ax.set_xlabel("version")
    ax.set_title(f"{kind}: backtest metric across versions", fontsize=9)
    ax.set_xticks(df["version"])
    ax.legend(fontsize=7)
    last = df.iloc[-1]
    reading = (f"v{int(last['version'])}: {last['metric']} {last['value']:.4g}"
               + (f" vs best baseline {last['baseline']:.4g} on its window"
                  if pd.notna(last["baseline"]) else "")
               + (f"; v{cur} in service." if cur is not None else "; none in service."))
    return _png(fig), reading


def _table(d: dict) -> str:
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>"
                    for k, v in d.items() if k != "traceback")
    return f"<table>{cells}</table>"


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    return str(v)


def write_report(result: RunResult, registry: str, out_dir: str | Path) -> tuple[Path, Path]:
    """Write metrics.json and report.html into `out_dir`; returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = metrics_doc(result, registry)
    mpath = out / "metrics.json"
    mpath.write_text(json.dumps(doc, indent=1, default=str))
    reg = Registry(registry)
    parts = [f"<h1>Foresight retraining run</h1><p>{html.escape(result.source)} &middot; "
             f"window {result.window['start']} .. {result.window['end']} &middot; backtest from "
             f"{result.window['cutoff']} &middot; registry {html.escape(registry)}</p>",
             "<h2>Data hygiene</h2>", _table(result.hygiene)]
    for k in result.kinds:
        parts.append(f"<h2>{k.kind}: {k.status}</h2><p>{html.escape(k.reason)}</p>")
        base = best_baseline(k.metrics)
        if base is not None:
            p = k.metrics.get("primary", "mae")
            parts.append(f"<p class='gate'>compared with its best baseline on the same window: "
                         f"<b>{html.escape(base[0])}</b> {p} {base[1]:.4g} (model "
                         f"{_fmt(k.metrics.get(p))}); served: "
                         f"{html.escape(_fmt(k.metrics.get('served') or {'model': 'all'}))}</p>")
        if k.metrics:
            parts += ["<h3>backtest (new model)</h3>", _table(k.metrics)]
        if k.service_metrics:
            parts += [f"<h3>backtest (v{k.in_service} in service, same window)</h3>",
                      _table(k.service_metrics)]
        imgs = []
        if k.predictions is not None and len(k.predictions):
            mod = load_kind(k.kind)
            for draw in (mod.plot, getattr(mod, "extra_plot", None)):
                if draw is not None:
                    fig, ax = plt.subplots(figsize=(6, 3.6))
                    reading = draw(k.predictions, ax)
                    imgs.append((_png(fig), reading or ""))
        hist = _history_plot(reg, k.kind)
        if hist:
            imgs.append(hist)
        parts += [f'<figure><img alt="{k.kind} plot" src="data:image/png;base64,{b}">'
                  f"<figcaption>{html.escape(r)}</figcaption></figure>" for b, r in imgs]
    parts += ["<h2>Stage times (s)</h2>", _table(result.stages),
              f"<p>peak resident memory {result.peak_mb:.0f} MB</p>"]
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:"
             "collapse;margin:6px 0}th,td{border:1px solid #ccc;padding:2px 8px;text-align:left;"
             "font-size:13px}img{border:1px solid #eee}figure{display:inline-block;margin:6px;"
             "max-width:560px;vertical-align:top}figcaption{font-size:13px;color:#333}")
    rpath = out / "report.html"
    rpath.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>Foresight "
                     f"training report</title><style>{style}</style></head><body>"
                     + "\n".join(parts) + "</body></html>")
    return mpath, rpath
