"""Workloads of set k of bench/gpu/colocate_more.py, one step each, written 2026-11-28 without
a GPU: characters none of the sets measured so far has, chosen around what the co-location
gate still gets wrong on new sets (latency-bound serving whose host waits on the GPU):

- `decode_sync_tok` and `decode_graph_tok` run the *same* batch-1 decode (4 layers, d 1024, a
  2048-token cache, 32 tokens a step); the first reads every token back on the host (an EOS
  check: 32 host round trips a step), the second replays all 32 tokens from one CUDA graph (one
  round trip). A controlled pair: same kernels, different host synchronisation.
- `spec_verify`: speculative-decoding verification, 4 rounds a step, each a host decision.
- `preproc_serving`: host-side preprocessing (numpy), a pinned copy, ResNet-18 at batch 32,
  the top-5 back on the host.
- `sdpa_causal_8k`: fused (flash) causal attention over 8k tokens, long compute-bound kernels.
- `embbag_train`: recommendation *training*: sparse embedding-bag gradients, SGD, a dense MLP.
- `gpu_augment`: image augmentation on the GPU (crop, flip, normalise, jitter, resize).
- `vae_decode`: a latent-diffusion VAE-decoder-like upsampling conv stack to 512 x 512, fp16.
Memory: every workload of a set is resident at once, so each stays under ~8 GiB.
"""
from __future__ import annotations

NAMES = {"decode_sync_tok", "decode_graph_tok", "spec_verify", "preproc_serving",
         "sdpa_causal_8k", "embbag_train", "gpu_augment", "vae_decode"}
TOKENS = 32


def _decoder(torch, dev):
    """One greedy decode token of a 4-layer, d-1024 model over a 2048-token cache, fp16."""
    d, layers, vocab, ctx = 1024, 4, 32000, 2048
    h16 = dict(device=dev, dtype=torch.half)
    emb = torch.randn(vocab, d, **h16) / 32
    head = torch.randn(d, vocab, **h16) / 32
    ks = [torch.randn(ctx, d, **h16) / 32 for _ in range(layers)]
    vs = [torch.randn(ctx, d, **h16) / 32 for _ in range(layers)]
    wq = [torch.randn(d, d, **h16) / 32 for _ in range(layers)]
    w1 = [torch.randn(d, 4 * d, **h16) / 32 for _ in range(layers)]
    w2 = [torch.randn(4 * d, d, **h16) / 64 for _ in range(layers)]

    def token(tok):
        h = emb.index_select(0, tok)
        for i in range(layers):
            p = torch.softmax((h @ wq[i]) @ ks[i].t() / 32.0, dim=-1)
            h = h + p @ vs[i]
            h = h + torch.relu(h @ w1[i]) @ w2[i]
        return torch.argmax(h @ head, dim=-1)
    return token


def build(name: str):
    """(step, sync) of one workload of set k."""
    from colocate_workloads import cuda_env, cuda_graph
    torch, dev, sync = cuda_env()
    nn, F = torch.nn, torch.nn.functional
    if name == "decode_sync_tok":  # the host reads each token back (EOS check)
        token = _decoder(torch, dev)
        tok0 = torch.zeros(1, dtype=torch.long, device=dev)
        def step():
            tok = tok0
            for _ in range(TOKENS):
                tok = token(tok)
                if int(tok.item()) < 0: break
    elif name == "decode_graph_tok":  # the same 32 tokens from one CUDA graph, one sync
        token = _decoder(torch, dev)
        tok0 = torch.zeros(1, dtype=torch.long, device=dev)
        def body():
            tok = tok0
            for _ in range(TOKENS): tok = token(tok)
            tok0.copy_(tok)
        step = cuda_graph(torch, body).replay
    elif name == "spec_verify":  # 8 sequences x (8 drafts + 1) through 4 layers, host accepts
        layer = nn.TransformerEncoderLayer(2048, 16, 8192, batch_first=True, norm_first=True)
        m = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        m = m.to(dev).to(torch.bfloat16).eval()
        head = torch.randn(2048, 32000, device=dev, dtype=torch.bfloat16) / 45
        ctx = torch.randn(8, 9, 2048, device=dev, dtype=torch.bfloat16)
        draft = torch.randint(0, 32000, (8, 8), device=dev)
        def step():
            with torch.inference_mode():
                for _ in range(4):
                    pred = (m(ctx) @ head).argmax(-1)[:, :8]
                    (pred == draft).cumprod(1).sum(1).cpu()
    elif name == "preproc_serving":  # numpy normalise on the host, copy, ResNet-18, top-5 back
        import numpy as np
        import torchvision
        m = torchvision.models.resnet18().to(dev).half().eval()
        m = m.to(memory_format=torch.channels_last)
        raw = np.random.randint(0, 256, (32, 224, 224, 3), dtype=np.uint8)
        mean = np.array([0.485, 0.456, 0.406], np.float32)
        std = np.array([0.229, 0.224, 0.225], np.float32)
        host = torch.empty(32, 3, 224, 224, dtype=torch.half).pin_memory()
        def step():
            arr = ((raw.astype(np.float32) / 255.0 - mean) / std).transpose(0, 3, 1, 2)
            host.copy_(torch.from_numpy(np.ascontiguousarray(arr)))
            x = host.to(dev, non_blocking=True).contiguous(memory_format=torch.channels_last)
            with torch.inference_mode():
                m(x).float().softmax(-1).topk(5).indices.cpu()
    elif name == "sdpa_causal_8k":  # flash attention: 2 x 16 heads x 8192 tokens x 128, bf16
        q = torch.randn(2, 16, 8192, 128, device=dev, dtype=torch.bfloat16)
        k = torch.randn_like(q); v = torch.randn_like(q)
        def step():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    elif name == "embbag_train":  # 8 tables x 1M x 64 (2 GiB), sparse gradients, bags of 10
        tables = [nn.EmbeddingBag(1_000_000, 64, mode="sum", sparse=True).to(dev)
                  for _ in range(8)]
        mlp = nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 1)).to(dev)
        o_sparse = torch.optim.SGD([t.weight for t in tables], lr=0.01)
        o_dense = torch.optim.Adam(mlp.parameters(), lr=1e-3)
        idx = [torch.randint(0, 1_000_000, (8192 * 10,), device=dev) for _ in tables]
        off = torch.arange(0, 8192 * 10, 10, device=dev)
        y = torch.rand(8192, 1, device=dev)
        def step():
            out = mlp(torch.cat([t(i, off) for t, i in zip(tables, idx)], dim=1))
            loss = F.binary_cross_entropy_with_logits(out, y)
            o_sparse.zero_grad(set_to_none=True); o_dense.zero_grad(set_to_none=True)
            loss.backward(); o_sparse.step(); o_dense.step()
    elif name == "gpu_augment":  # 128 uint8 images of 256^2: crop, flip, normalise, resize
        imgs = torch.randint(0, 256, (128, 3, 256, 256), dtype=torch.uint8, device=dev)
        mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)
        gain = torch.rand(128, 1, 1, 1, device=dev) * 0.4 + 0.8
        def step():
            x = imgs[:, :, 16:240, 16:240].flip(3).float().div_(255.0)
            x = ((x * gain).clamp_(0, 1) - mean) / std
            x = x + 0.05 * torch.randn_like(x)
            F.interpolate(x, size=(160, 160), mode="bilinear", antialias=True)
    elif name == "vae_decode":  # 2 latents of 4 x 64^2 up to 3 x 512^2: convs + GroupNorm
        def up(cin, cout):
            return [nn.Upsample(scale_factor=2, mode="nearest"),
                    nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(32, cout), nn.SiLU()]
        m = nn.Sequential(nn.Conv2d(4, 512, 3, padding=1), nn.GroupNorm(32, 512), nn.SiLU(),
                          *up(512, 512), *up(512, 256), *up(256, 128),
                          nn.Conv2d(128, 3, 3, padding=1))
        m = m.to(dev).half().eval().to(memory_format=torch.channels_last)
        x = torch.randn(2, 4, 64, 64, device=dev, dtype=torch.half)
        x = x.to(memory_format=torch.channels_last)
        def step():
            with torch.inference_mode(): m(x)
    else:
        raise ValueError(name)
    return step, sync
