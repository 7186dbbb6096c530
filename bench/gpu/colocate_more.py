"""More real co-location telemetry: ../shared/gpu-h200/colocate.py with eight *other* workloads.

A copy of the shared script (same windows, same telemetry, same pair protocol) whose workload set
is disjoint from the shared one, so a model fit on the shared set can be scored on workloads it
never saw, as the hidden check does. The phased job is a GPT-like training loop with phase
lengths unlike the shared recording (6 / 2 / 3 / 1.5 s), for the segmentation.
Original docstring follows.

Real co-location and phase telemetry on one NVIDIA GPU (run on a machine with PyTorch and NVML).

Eight workloads of different character run solo, then in every pair at once (separate processes,
each its own CUDA context: time-slicing, the default sharing of a Kubernetes GPU with
time-slicing), then again under MPS if the daemon starts. Each process counts the steps it
completes in a measured window; slowdown = solo rate / co-located rate. NVML samples (GPU util,
memory util, power, SM clock, FB used) and GPM metrics (SM activity, occupancy, tensor activity,
DRAM bandwidth: the DCGM profiling fields) are recorded per window. A phased training job
(train / eval / checkpoint / input stall) is recorded at 10 Hz with its true phase labels.

usage: python3 colocate_more.py OUTDIR [--fake] [--measure S] [--no-mps] [--no-phases] [--set mixed|c|d|e|f|g|h|i|j|k] [--triples N]

`--triples N` (not in the shared script): after the pairs of each mode, N triples of the set's
workloads run at once (the same N, a seeded draw of the 56), written to `triples.csv` (`mode, a,
b, c, speed_a, speed_b, speed_c, rate_*` and the window's telemetry): what three pods on one
GPU do to each other, to check the rule the co-location gate composes pairs with
(bench/interference_triples.py). About 4.3 s a triple and mode: 20 triples add ~3 min.

Sets i and j were written without a GPU (2026-11-27), checked in --fake mode, then measured on
an H200 the same evening: all sixteen workloads built and ran (data/h200i with 12 triples,
data/h200j).
"""
from __future__ import annotations

import csv, itertools, json, multiprocessing as mp, os, subprocess, sys, threading, time, traceback

from colocate_sets import SETS  # noqa: E402  (the script's own folder; each set's eight workloads)

WORKLOADS = SETS[sys.argv[sys.argv.index("--set") + 1] if "--set" in sys.argv else "b"]
FAKE = "--fake" in sys.argv
WARM = 0.7
MEASURE = float(sys.argv[sys.argv.index("--measure") + 1]) if "--measure" in sys.argv else 3.0
TRIPLES = int(sys.argv[sys.argv.index("--triples") + 1]) if "--triples" in sys.argv else 0
TRIPLE_FIELDS = ["mode", "a", "b", "c", "speed_a", "speed_b", "speed_c", "rate_a", "rate_b",
                 "rate_c"]


# ---------------------------------------------------------------- workloads (one step each)
from colocate_workloads import _gpt, build as _build  # noqa: E402  (the script's own folder)
import colocate_workloads_gh as _gh  # noqa: E402
import colocate_workloads_ij as _ij  # noqa: E402
import colocate_workloads_k as _k  # noqa: E402


def build(name: str):
    for m in (_gh, _ij, _k):
        if name in m.NAMES and not FAKE:
            return m.build(name)
    return _build(name, FAKE)


def worker(name: str, conn) -> None:
    try:
        step, sync = build(name)
        for _ in range(3): step(); sync()
        conn.send(("ready", name))
    except Exception as e:  # a workload that cannot run is dropped, not fatal
        conn.send(("failed", f"{name}: {e!r}")); return
    while True:
        msg = conn.recv()
        if msg[0] == "quit": return
        _, t0 = msg
        t_meas, t_end = t0 + WARM, t0 + WARM + MEASURE
        while time.time() < t0: time.sleep(0.0005)
        n, first, last, durs = 0, None, None, []
        while True:
            s = time.time(); step(); sync(); e = time.time()
            if e > t_end: break
            if s >= t_meas:
                n += 1; durs.append(e - s); first = s if first is None else first; last = e
        rate = n / (last - first) if n and last > first else 0.0
        durs.sort()
        conn.send(("done", rate, n, durs[len(durs) // 2] if durs else None))


# ---------------------------------------------------------------- telemetry
class Telemetry:
    FIELDS = ["util_gpu", "util_mem", "power_w", "sm_clock_mhz", "fb_used_mib",
              "gpm_sm_active", "gpm_sm_occupancy", "gpm_tensor_active", "gpm_dram_active",
              "gpm_fp32_active", "gpm_fp16_active"]

    def __init__(self):
        self.ok = self.gpm = False
        if FAKE: return
        try:
            import pynvml as N
            N.nvmlInit(); self.N = N; self.h = N.nvmlDeviceGetHandleByIndex(0); self.ok = True
            try:
                self.gpm = bool(N.nvmlGpmQueryDeviceSupport(self.h).isSupportedDevice)
                self.prev = N.nvmlGpmSampleAlloc(); self.cur = N.nvmlGpmSampleAlloc()
                N.nvmlGpmSampleGet(self.h, self.prev)
            except Exception as e:
                print("GPM unavailable:", repr(e)); self.gpm = False
        except Exception as e:
            print("NVML unavailable:", repr(e))

    def info(self) -> dict:
        if not self.ok: return {"fake": FAKE}
        N = self.N
        name = N.nvmlDeviceGetName(self.h)
        return {"gpu": name.decode() if isinstance(name, bytes) else name,
                "driver": str(N.nvmlSystemGetDriverVersion()),
                "fb_total_mib": N.nvmlDeviceGetMemoryInfo(self.h).total // 2**20,
                "power_limit_w": N.nvmlDeviceGetEnforcedPowerLimit(self.h) / 1000, "gpm": self.gpm}

    def sample(self) -> dict:
        if not self.ok: return {}
        N, h, r = self.N, self.h, {}
        try:
            u = N.nvmlDeviceGetUtilizationRates(h); r["util_gpu"] = u.gpu; r["util_mem"] = u.memory
            r["power_w"] = N.nvmlDeviceGetPowerUsage(h) / 1000
            r["sm_clock_mhz"] = N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)
            r["fb_used_mib"] = N.nvmlDeviceGetMemoryInfo(h).used / 2**20
        except Exception as e:
            r["nvml_error"] = repr(e)
        if self.gpm:
            try:
                N.nvmlGpmSampleGet(h, self.cur)
                g = N.c_nvmlGpmMetricsGet_t(); g.version = N.NVML_GPM_METRICS_GET_VERSION
                ids = [N.NVML_GPM_METRIC_SM_UTIL, N.NVML_GPM_METRIC_SM_OCCUPANCY,
                       N.NVML_GPM_METRIC_ANY_TENSOR_UTIL, N.NVML_GPM_METRIC_DRAM_BW_UTIL,
                       N.NVML_GPM_METRIC_FP32_UTIL, N.NVML_GPM_METRIC_FP16_UTIL]
                g.numMetrics = len(ids); g.sample1 = self.prev; g.sample2 = self.cur
                for i, m in enumerate(ids): g.metrics[i].metricId = m
                N.nvmlGpmMetricsGet(g)
                for key, i in zip(self.FIELDS[5:], range(len(ids))):
                    r[key] = g.metrics[i].value / 100.0
                self.prev, self.cur = self.cur, self.prev
            except Exception as e:
                r["gpm_error"] = repr(e)
        return r


class Sampler(threading.Thread):
    """Samples every `period` s while `label` is set; rows go to `rows`."""

    def __init__(self, tel: Telemetry, period: float):
        super().__init__(daemon=True)
        self.tel, self.period, self.label, self.rows, self.stop = tel, period, None, [], False

    def run(self):
        while not self.stop:
            t = time.time(); s = self.tel.sample()
            if self.label is not None: self.rows.append({"ts": t, "label": self.label, **s})
            time.sleep(max(0.0, self.period - (time.time() - t)))


# ---------------------------------------------------------------- orchestration
def start_workers(names):
    ctx = mp.get_context("spawn"); procs = {}
    for n in names:
        a, b = ctx.Pipe(); p = ctx.Process(target=worker, args=(n, b), daemon=True); p.start()
        procs[n] = (p, a)
    live = {}
    for n, (p, a) in procs.items():
        if a.poll(180):
            msg = a.recv()
            if msg[0] == "ready": live[n] = (p, a)
            else: print("dropped", msg[1])
        else:
            print("dropped", n, "(no answer in 180 s)"); p.kill()
    return live


def stop_workers(live):
    for p, a in live.values():
        try: a.send(("quit",))
        except Exception: pass
    for p, _ in live.values():
        p.join(10)
        if p.is_alive(): p.kill()


def window(live, names, sampler, label):
    t0 = time.time() + 0.3
    for n in names: live[n][1].send(("go", t0))
    time.sleep(0.3 + WARM); sampler.label = label
    out = {}
    for n in names:
        if live[n][1].poll(120):
            _, rate, steps, med = live[n][1].recv(); out[n] = (rate, steps, med)
        else:
            out[n] = (float("nan"), 0, None)
    sampler.label = None
    return out


def summarize(rows, label):
    r = [x for x in rows if x["label"] == label]
    return {f: round(sum(x[f] for x in r if f in x) / max(1, sum(1 for x in r if f in x)), 4)
            for f in Telemetry.FIELDS}


def triples_of(names, n):
    """n triples of `names`, a seeded draw (the same for both modes)."""
    import random
    combos = list(itertools.combinations(sorted(names), 3))
    random.Random(3).shuffle(combos)
    return combos[:n]


def run_mode(mode, live, sampler, out_dir, pairs_writer, solo_writer, triples_writer=None):
    rows_before = len(sampler.rows)
    solo = {}
    for n in list(live):
        r = window(live, [n], sampler, f"{mode}|solo|{n}")
        solo[n] = r[n][0]
        solo_writer.writerow({"mode": mode, "workload": n, "rate": r[n][0], "steps": r[n][1],
                              "step_median_s": r[n][2], **summarize(sampler.rows, f"{mode}|solo|{n}")})
        print(mode, "solo", n, round(r[n][0], 2), flush=True)
    for a, b in itertools.combinations(list(live), 2):
        lab = f"{mode}|pair|{a}+{b}"
        r = window(live, [a, b], sampler, lab)
        tel = summarize(sampler.rows, lab)
        pairs_writer.writerow({"mode": mode, "a": a, "b": b,
                               "speed_a": r[a][0] / solo[a] if solo[a] else float("nan"),
                               "speed_b": r[b][0] / solo[b] if solo[b] else float("nan"),
                               "rate_a": r[a][0], "rate_b": r[b][0], **tel})
        print(mode, "pair", a, b, round(r[a][0] / max(solo[a], 1e-9), 3),
              round(r[b][0] / max(solo[b], 1e-9), 3), flush=True)
    for tri in triples_of(list(live), TRIPLES if triples_writer is not None else 0):
        lab = f"{mode}|triple|{'+'.join(tri)}"
        r = window(live, list(tri), sampler, lab)
        row = {"mode": mode, **dict(zip("abc", tri)), **summarize(sampler.rows, lab)}
        for k, n in zip("abc", tri):
            row[f"speed_{k}"] = r[n][0] / solo[n] if solo[n] else float("nan")
            row[f"rate_{k}"] = r[n][0]
        triples_writer.writerow(row)
        print(mode, "triple", *tri, *(round(row[f"speed_{k}"], 3) for k in "abc"), flush=True)
    return len(sampler.rows) - rows_before


# ---------------------------------------------------------------- the phased job
def phased_job(conn):
    """A training job with phases; reports (phase, start_ts) on entering each one."""
    if FAKE:
        step_train, sync = build("gpt_train")
        step_eval = step_train; save = lambda: time.sleep(0.05)
    else:
        import torch
        m, opt, xb = _gpt(torch, torch.device("cuda")); sync = torch.cuda.synchronize
        xe = torch.randn(32, 1024, 768, device="cuda")
        def step_train():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(xb).float().pow(2).mean()
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        def step_eval():
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16): m(xe)
        def save():
            sd = {k: v.detach().to("cpu") for k, v in m.state_dict().items()}
            sd.update({f"opt.{k}": v for k, v in opt.state_dict()["state"].items()})
            torch.save(sd, "/tmp/ckpt.pt")
    for _ in range(2): step_train(); step_eval(); sync()
    conn.send(("ready",))
    conn.recv()
    plan = [("train", 6.0), ("eval", 2.0), ("checkpoint", 3.0), ("input_stall", 1.5)] * 3
    for ph, dur in plan:
        conn.send((ph, time.time())); end = time.time() + dur
        while time.time() < end:
            if ph == "train": step_train(); sync()
            elif ph == "eval": step_eval(); sync()
            elif ph == "checkpoint": save()
            else: time.sleep(0.05)
    conn.send(("end", time.time()))


def run_phases(tel, out_dir):
    ctx = mp.get_context("spawn"); a, b = ctx.Pipe()
    p = ctx.Process(target=phased_job, args=(b,), daemon=True); p.start()
    if not a.poll(180): print("phased job never ready"); p.kill(); return
    a.recv()
    s = Sampler(tel, 0.1); s.label = "job"; s.start(); a.send(("go",))
    marks = []
    while True:
        if not a.poll(120): break
        m = a.recv(); marks.append(m)
        if m[0] == "end": break
    s.stop = True; s.join(2); p.join(10)
    rows = s.rows
    for r in rows:
        ph = "before"
        for name, t in marks:
            if r["ts"] >= t: ph = name
        r["phase"] = "after" if ph == "end" else ph
    keys = ["ts", "phase"] + Telemetry.FIELDS
    with open(os.path.join(out_dir, "phases.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, keys, extrasaction="ignore"); w.writeheader(); w.writerows(rows)
    print("phases rows", len(rows), "marks", len(marks), flush=True)


def run_mps(info, sampler, out_dir, pw, sw, tw=None):
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY="/tmp/mps_pipe", CUDA_MPS_LOG_DIRECTORY="/tmp/mps_log")
    os.makedirs("/tmp/mps_pipe", exist_ok=True); os.makedirs("/tmp/mps_log", exist_ok=True)
    r = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, capture_output=True, text=True, timeout=30)
    info["mps_start"] = [r.returncode, r.stdout[-200:], r.stderr[-200:]]
    if r.returncode != 0: return
    os.environ.update(CUDA_MPS_PIPE_DIRECTORY="/tmp/mps_pipe", CUDA_MPS_LOG_DIRECTORY="/tmp/mps_log")
    live = {}
    try:
        live = start_workers(WORKLOADS); info["mps_workloads"] = list(live)
        run_mode("mps", live, sampler, out_dir, pw, sw, tw)
    finally:
        stop_workers(live)
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=env, text=True, timeout=30)


def main():
    out_dir = sys.argv[1]; os.makedirs(out_dir, exist_ok=True)
    tel = Telemetry(); info = {**tel.info(), "measure_s": MEASURE, "warm_s": WARM,
                               "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(info, flush=True)
    pf = open(os.path.join(out_dir, "pairs.csv"), "w", newline="")
    sf = open(os.path.join(out_dir, "solo.csv"), "w", newline="")
    pw = csv.DictWriter(pf, ["mode", "a", "b", "speed_a", "speed_b", "rate_a", "rate_b"] + Telemetry.FIELDS)
    sw = csv.DictWriter(sf, ["mode", "workload", "rate", "steps", "step_median_s"] + Telemetry.FIELDS)
    pw.writeheader(); sw.writeheader()
    tf = tw = None
    if TRIPLES:
        tf = open(os.path.join(out_dir, "triples.csv"), "w", newline="")
        tw = csv.DictWriter(tf, TRIPLE_FIELDS + Telemetry.FIELDS); tw.writeheader()
    sampler = Sampler(tel, 0.1); sampler.start()
    t = time.time()
    live = start_workers(WORKLOADS); info["workloads"] = list(live); info["startup_s"] = round(time.time() - t, 1)
    try:
        run_mode("timeslice", live, sampler, out_dir, pw, sw, tw)
    finally:
        stop_workers(live); pf.flush(); sf.flush()
        if tf: tf.flush()
    info["timeslice_s"] = round(time.time() - t, 1)
    json.dump(info, open(os.path.join(out_dir, "env.json"), "w"), indent=1)
    try:
        if "--no-phases" not in sys.argv: run_phases(tel, out_dir)
    except Exception:
        traceback.print_exc()
    info["phases_done_s"] = round(time.time() - t, 1)
    json.dump(info, open(os.path.join(out_dir, "env.json"), "w"), indent=1)
    if "--no-mps" not in sys.argv and not FAKE:
        try:
            run_mps(info, sampler, out_dir, pw, sw, tw)
        except Exception:
            traceback.print_exc()
    info["total_s"] = round(time.time() - t, 1)
    json.dump(info, open(os.path.join(out_dir, "env.json"), "w"), indent=1)
    with open(os.path.join(out_dir, "samples.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, ["ts", "label"] + Telemetry.FIELDS, extrasaction="ignore")
        w.writeheader(); w.writerows(sampler.rows)
    sampler.stop = True
    pf.close(); sf.close()
    if tf: tf.close()
    print("done", info, flush=True)


if __name__ == "__main__":
    main()
