"""Workloads of sets g and h of bench/gpu/colocate_more.py (data/h200g, data/h200h), one step
each: characters none of the earlier sets has (split from colocate_workloads.py to keep both
files short). Each name's step is what its set's README says.
"""
from __future__ import annotations

import time

NAMES = {"mobilenet_infer", "gemm_fp32_simt", "bursty_serving", "cuda_graph_mlp", "sync_heavy",
         "xent_vocab", "effnet_train", "decode_b64",
         "convnext_train", "lstmcell_loop", "stft_audio", "bmm_small", "r3d_infer",
         "nonzero_mask", "cdist_knn", "cpu_bound"}


def build(name: str):
    """(step, sync) of one workload of sets g / h."""
    from colocate_workloads import _cnn_infer, cuda_env, cuda_graph
    torch, dev, sync = cuda_env()
    if name == "mobilenet_infer":  # depthwise convolutions: low arithmetic intensity serving
        step = _cnn_infer(torch, dev, "mobilenet_v3_large", 128)
    elif name == "gemm_fp32_simt":  # compute-bound without tensor cores
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        a = torch.randn(4096, 4096, device=dev); b = torch.randn_like(a)
        def step():
            a @ b
    elif name == "bursty_serving":  # a ~5 ms burst of GEMMs, then 10 ms idle (moderate QPS)
        ws = [torch.randn(8192, 8192, device=dev, dtype=torch.half) / 90 for _ in range(12)]
        x0 = torch.randn(2048, 8192, device=dev, dtype=torch.half)
        def step():
            x = x0
            for w in ws: x = x @ w
            sync(); time.sleep(0.01)
    elif name == "cuda_graph_mlp":  # batch-1 MLP replayed from a CUDA graph (no launch cost)
        ws = [torch.randn(2048, 2048, device=dev, dtype=torch.half) / 45 for _ in range(8)]
        x0 = torch.randn(1, 2048, device=dev, dtype=torch.half)
        def fwd():
            x = x0
            for w in ws: x = torch.relu(x @ w)
            return x
        g = cuda_graph(torch, fwd)
        def step():
            for _ in range(16): g.replay()
    elif name == "sync_heavy":  # a host round trip after every small kernel
        x = torch.randn(1_000_000, device=dev)
        def step():
            for _ in range(32): float((x * 1.0001 + 0.5).sum())
    elif name == "xent_vocab":  # LM head: 8192 tokens x 50304 vocab, bf16, loss and backward
        h = torch.randn(8192, 1024, device=dev, dtype=torch.bfloat16)
        w = torch.randn(1024, 50304, device=dev, dtype=torch.bfloat16, requires_grad=True)
        y = torch.randint(0, 50304, (8192,), device=dev)
        def step():
            loss = torch.nn.functional.cross_entropy((h @ w).float(), y)
            w.grad = None; loss.backward()
    elif name == "effnet_train":  # depthwise + squeeze-excite training: memory-bound
        step = _cnn_train(torch, dev, "efficientnet_b0", 64)
    elif name == "decode_b64":  # batch-64 decode: weight streaming through tensor cores
        ws = [torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16) / 90 for _ in range(32)]
        x0 = torch.randn(64, 8192, device=dev, dtype=torch.bfloat16)
        def step():
            x = x0
            for w in ws: x = x @ w
    elif name == "convnext_train":
        step = _cnn_train(torch, dev, "convnext_tiny", 32)
    elif name == "lstmcell_loop":  # a Python loop over an LSTMCell: launch-bound training
        cell = torch.nn.LSTMCell(512, 512).to(dev)
        opt = torch.optim.SGD(cell.parameters(), lr=0.01)
        xs = torch.randn(128, 32, 512, device=dev)
        def step():
            h = c = torch.zeros(32, 512, device=dev); out = 0
            for t in range(xs.shape[0]):
                h, c = cell(xs[t], (h, c)); out = out + h.mean()
            opt.zero_grad(set_to_none=True); out.backward(); opt.step()
    elif name == "stft_audio":  # speech front end: STFT magnitudes of 64 x 10 s at 16 kHz
        x = torch.randn(64, 160_000, device=dev)
        win = torch.hann_window(400, device=dev)
        def step():
            for _ in range(4):
                torch.stft(x, 400, 160, window=win, return_complex=True).abs()
    elif name == "bmm_small":  # many tiny matrices: 16384 x (32 x 32) fp32
        a = torch.randn(16384, 32, 32, device=dev); b = torch.randn_like(a)
        def step():
            for _ in range(4): torch.bmm(a, b)
    elif name == "r3d_infer":  # video: 3-D ResNet-18 on 8 clips of 16 x 112 x 112, fp16
        import torchvision
        m = torchvision.models.video.r3d_18().to(dev).half().eval()
        xb = torch.randn(8, 3, 16, 112, 112, device=dev, dtype=torch.half)
        def step():
            with torch.inference_mode(): m(xb)
    elif name == "nonzero_mask":  # boolean-mask selection: data-dependent shapes sync the host
        x = torch.randn(64_000_000, device=dev)
        def step():
            for _ in range(4): x[x > 0.5].sum()
    elif name == "cdist_knn":  # vector search: 8192 queries x 65536 keys, top 16
        q = torch.randn(8192, 128, device=dev); k = torch.randn(65536, 128, device=dev)
        def step():
            torch.cdist(q, k).topk(16, dim=1, largest=False)
    elif name == "cpu_bound":  # host work dominates; the GPU sees a small copy and a sum
        import numpy as np
        rng = np.random.default_rng(0)
        def step():
            a = np.sort(rng.random(1_000_000)).astype("float32")
            torch.from_numpy(a).to(dev).sum()
    else:
        raise ValueError(name)
    return step, sync


def _cnn_train(torch, dev, arch: str, batch: int):
    """One bf16-autocast SGD step of a torchvision classifier, channels-last."""
    import torchvision
    m = getattr(torchvision.models, arch)().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    xb = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    yb = torch.randint(0, 1000, (batch,), device=dev)
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(m(xb), yb)
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    return step
