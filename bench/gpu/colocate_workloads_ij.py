"""Workloads of sets i and j of bench/gpu/colocate_more.py, one step each: characters none of
the sets measured so far has (data/h200 ... h200h), written 2026-11-27 without a GPU and
measured on an H200 the same evening (data/h200i, data/h200j): all sixteen built and ran.

Set i, serving and training patterns of a cluster: recommendation (EmbeddingBag lookups and an
MLP), LLM prefill, a diffusion-UNet-like conv stack, device-to-host copies, LLM sampling over a
128k vocabulary, GNN message passing, weight-only int8 decode, compute overlapping a copy.
Set j: a long-sequence scan (state-space-like), windowed-attention serving, small-batch CNN
training, sort-based unique (host sync), BERT-base training, detection with host-side
post-processing, unfused fp32 attention, batched QR (cuSOLVER).
Memory: every workload of a set is resident at once (colocate_more.py keeps the 8 workers
alive), so each stays under ~8 GiB.
"""
from __future__ import annotations

NAMES = {"dlrm_embbag", "prefill_2k", "unet_infer", "d2h_copy", "sampling_vocab", "gnn_sage",
         "int8_dequant", "copy_overlap",
         "scan_ssm", "swin_infer", "resnet50_b16_train", "unique_counts", "bert_train",
         "ssd_detect", "attn_naive_fp32", "qr_batched"}


def build(name: str):
    """(step, sync) of one workload of sets i / j."""
    from colocate_workloads import cuda_env
    torch, dev, sync = cuda_env()
    nn = torch.nn
    if name == "dlrm_embbag":  # 8 tables x 1M x 128 (4 GiB), bags of 20, then a small MLP
        tables = [nn.EmbeddingBag(1_000_000, 128, mode="sum").to(dev) for _ in range(8)]
        mlp = nn.Sequential(nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                            nn.Linear(256, 1)).to(dev)
        idx = [torch.randint(0, 1_000_000, (4096 * 20,), device=dev) for _ in tables]
        off = torch.arange(0, 4096 * 20, 20, device=dev)
        def step():
            with torch.inference_mode():
                mlp(torch.cat([t(i, off) for t, i in zip(tables, idx)], dim=1))
    elif name == "prefill_2k":  # LLM prefill: 4 layers, d 2048, one 2048-token prompt, bf16
        layer = nn.TransformerEncoderLayer(2048, 16, 8192, batch_first=True, norm_first=True)
        m = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        m = m.to(dev).to(torch.bfloat16).eval()
        x = torch.randn(1, 2048, 2048, device=dev, dtype=torch.bfloat16)
        def step():
            with torch.inference_mode(): m(x)
    elif name == "unet_infer":  # diffusion-UNet-like conv stack on 8 latents of 64 x 64, fp16
        def block(cin, cout):
            return [nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(32, cout), nn.SiLU()]
        m = nn.Sequential(*block(4, 320), *block(320, 320), *block(320, 640), *block(640, 640),
                          *block(640, 320), nn.Conv2d(320, 4, 3, padding=1))
        m = m.to(dev).half().eval().to(memory_format=torch.channels_last)
        x = torch.randn(8, 4, 64, 64, device=dev, dtype=torch.half)
        x = x.to(memory_format=torch.channels_last)
        def step():
            with torch.inference_mode(): m(x)
    elif name == "d2h_copy":  # 256 MiB device -> pinned host per step: the other copy engine
        src = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)
        dst = torch.empty(256 * 2**20, dtype=torch.uint8, pin_memory=True)
        def step():
            dst.copy_(src, non_blocking=True)
    elif name == "sampling_vocab":  # LLM sampling: 64 sequences x 128,256 logits, 8 tokens
        logits = torch.randn(64, 128_256, device=dev)
        def step():
            for _ in range(8): torch.multinomial(torch.softmax(logits / 0.8, dim=-1), 1)
    elif name == "gnn_sage":  # GraphSAGE-like layer: 500k nodes, 5M edges, gather + scatter
        n, e, d = 500_000, 5_000_000, 64
        x = torch.randn(n, d, device=dev)
        src = torch.randint(0, n, (e,), device=dev); dst = torch.randint(0, n, (e,), device=dev)
        deg = torch.zeros(n, device=dev).index_add_(0, dst, torch.ones(e, device=dev))
        deg = deg.clamp_(min=1.0)[:, None]
        lin = nn.Linear(2 * d, d).to(dev)
        def step():
            with torch.inference_mode():
                agg = torch.zeros_like(x).index_add_(0, dst, x.index_select(0, src)) / deg
                lin(torch.cat([x, agg], dim=1))
    elif name == "int8_dequant":  # weight-only int8 decode: dequantize, then a batch-16 GEMM
        wq = torch.randint(-127, 127, (8192, 8192), device=dev, dtype=torch.int8)
        scale = torch.rand(8192, 1, device=dev, dtype=torch.bfloat16) / 64
        x = torch.randn(16, 8192, device=dev, dtype=torch.bfloat16)
        def step():
            for _ in range(8): x @ (wq.to(torch.bfloat16) * scale).t()
    elif name == "copy_overlap":  # training step whose next batch (128 MiB) copies alongside
        side = torch.cuda.Stream()
        host = torch.randn(32 * 2**20, pin_memory=True)
        buf = torch.empty(host.shape, device=dev)
        a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16); b = torch.randn_like(a)
        def step():
            with torch.cuda.stream(side): buf.copy_(host, non_blocking=True)
            for _ in range(16): a @ b
            torch.cuda.current_stream().wait_stream(side)
    elif name == "scan_ssm":  # linear recurrence h_t = a_t h_{t-1} + x_t by log-space cumsums
        x = torch.randn(16, 8192, 256, device=dev)
        la = torch.log(torch.rand_like(x) * 0.1 + 0.9)
        def step():
            h = torch.cumsum(la, dim=1)
            (torch.exp(h) * torch.cumsum(x * torch.exp(-h), dim=1)).sum()
    elif name == "swin_infer":  # windowed-attention vision serving: Swin-T, batch 64, fp16
        import torchvision
        m = torchvision.models.swin_t().to(dev).half().eval()
        xb = torch.randn(64, 3, 224, 224, device=dev, dtype=torch.half)
        def step():
            with torch.inference_mode(): m(xb)
    elif name == "resnet50_b16_train":  # small-batch CNN training: many mid-size kernels
        from colocate_workloads_gh import _cnn_train
        step = _cnn_train(torch, dev, "resnet50", 16)
    elif name == "unique_counts":  # sort-based unique: the output size syncs the host
        x = torch.randint(0, 1_000_000, (32_000_000,), device=dev)
        def step():
            torch.unique(x, return_counts=True)
    elif name == "bert_train":  # BERT-base shape: 12 layers, d 768, 32 x 128 tokens, AdamW
        layer = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
        m = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        x = torch.randn(32, 128, 768, device=dev)
        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(x).float().pow(2).mean()
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    elif name == "ssd_detect":  # detection serving: SSDlite, 16 images, NMS and top-k after
        import torchvision
        m = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None).to(dev).eval()
        xb = [torch.rand(3, 320, 320, device=dev) for _ in range(16)]
        def step():
            with torch.inference_mode(): m(xb)
    elif name == "attn_naive_fp32":  # unfused attention: 16 x 12 heads x 1024^2 scores, fp32
        q = torch.randn(16, 12, 1024, 64, device=dev); k = torch.randn_like(q)
        v = torch.randn_like(q)
        def step():
            torch.softmax((q @ k.transpose(-1, -2)) / 8.0, dim=-1) @ v
    elif name == "qr_batched":  # cuSOLVER: QR of 512 matrices of 256 x 256
        a = torch.randn(512, 256, 256, device=dev)
        def step():
            torch.linalg.qr(a)
    else:
        raise ValueError(name)
    return step, sync
