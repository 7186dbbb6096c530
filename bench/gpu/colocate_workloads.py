"""The workloads of bench/gpu/colocate_more.py, one step each (split out to keep that script
readable). The shared set's (../shared/gpu-h200/colocate.py) and the sets this project measured
(data/h200b, h200m, h200c, h200d, h200e, h200f): each name's step is what its set's README says.
"""
from __future__ import annotations

def cuda_env():
    """(torch, the GPU, its synchronize) for a workload's build, cuDNN autotuning on."""
    import torch
    torch.backends.cudnn.benchmark = True
    return torch, torch.device("cuda"), torch.cuda.synchronize


def cuda_graph(torch, fn):
    """`fn` captured in a CUDA graph (after three warm-up calls on a side stream, as capture
    needs): replay() runs its kernels without launching them one by one."""
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): fn()
    return g


def build(name: str, fake: bool = False):
    """(step, sync) of one workload: `step` runs one iteration of it on the GPU."""
    if fake:
        import numpy as np
        a = np.random.rand(200, 200)
        return lambda: a @ a, lambda: None
    torch, dev, sync = cuda_env()
    if name == "attention_bf16":
        q = torch.randn(8, 16, 4096, 128, device=dev, dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)
        def step():
            for _ in range(4): torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    elif name == "gpt_train":
        m, opt, xb = _gpt(torch, dev)
        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(xb).float().pow(2).mean()
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    elif name == "resnet18_infer":
        step = _cnn_infer(torch, dev, "resnet18", 256)
    elif name == "softmax_bw":
        x = torch.randn(4096, 16384, device=dev)
        def step():
            for _ in range(4): torch.softmax(x, dim=-1)
    elif name == "scatter_add":
        table = torch.zeros(10_000_000, 16, device=dev)
        src = torch.randn(2_000_000, 16, device=dev)
        def step():
            idx = torch.randint(0, table.shape[0], (src.shape[0],), device=dev)
            for _ in range(2): table.index_add_(0, idx, src)
    elif name == "kv_decode":
        ks = [torch.randn(16, 32, 4096, 128, device=dev, dtype=torch.bfloat16) for _ in range(6)]
        w = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64
        q0 = torch.randn(16, 32, 1, 128, device=dev, dtype=torch.bfloat16)
        def step():
            q = q0
            for kv in ks:
                o = torch.nn.functional.scaled_dot_product_attention(q, kv, kv)
                q = (o.reshape(16, 4096) @ w).reshape(16, 32, 1, 128)
    elif name == "loader_bound":
        import numpy as np
        rng = np.random.default_rng(0)
        host = torch.empty(16 * 1024 * 1024, pin_memory=True)
        a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16); b = torch.randn_like(a)
        def step():
            np.sort(rng.random(400_000))  # host-side decode/augment: the GPU waits
            host.to(dev, non_blocking=True)
            for _ in range(32): a @ b
    elif name == "fft_conv":
        x = torch.randn(32, 1024, 1024, device=dev)
        kf = torch.fft.rfft2(torch.randn(1024, 1024, device=dev))
        def step():
            torch.fft.irfft2(torch.fft.rfft2(x) * kf, s=x.shape[-2:])
    elif name == "gemm_int8":
        a = torch.randint(-64, 64, (8192, 8192), device=dev, dtype=torch.int8); b = a.t().contiguous()
        def step():
            for _ in range(4): torch._int_mm(a, b)
    elif name == "layernorm_bw":
        x = torch.randn(16384, 8192, device=dev, dtype=torch.bfloat16)
        def step():
            for _ in range(4): torch.nn.functional.layer_norm(x, (8192,))
    elif name == "sort_keys":
        x = torch.rand(32 * 1024 * 1024, device=dev)
        def step():
            torch.sort(x)
    elif name == "lstm_infer":
        m = torch.nn.LSTM(1024, 1024, num_layers=2, batch_first=True).to(dev).half().eval()
        xb = torch.randn(64, 128, 1024, device=dev, dtype=torch.half)
        def step():
            with torch.inference_mode(): m(xb)
    elif name == "conv3d_train":
        m = torch.nn.Sequential(torch.nn.Conv3d(16, 64, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv3d(64, 64, 3, padding=1)).to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        xb = torch.randn(8, 16, 32, 64, 64, device=dev)
        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(xb).float().pow(2).mean()
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    elif name == "h2d_copy":
        host = torch.empty(64 * 1024 * 1024, pin_memory=True)
        buf = torch.empty(64 * 1024 * 1024, device=dev)
        def step():
            buf.copy_(host, non_blocking=True); host.copy_(buf, non_blocking=True)
    elif name == "spmm_csr":
        n = 16384
        idx = torch.randint(0, n, (2, n * 160), device=dev)
        sp = torch.sparse_coo_tensor(idx, torch.randn(n * 160, device=dev), (n, n)).coalesce().to_sparse_csr()
        dense = torch.randn(n, 256, device=dev)
        def step():
            for _ in range(2): sp @ dense
    elif name == "mlp_b1":
        m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.GELU())
                                  for _ in range(8)]).to(dev).half().eval()
        xb = torch.randn(1, 2048, device=dev, dtype=torch.half)
        def step():
            with torch.inference_mode():
                for _ in range(4): m(xb)
    elif name == "gemm_fp64":
        a = torch.randn(4096, 4096, device=dev, dtype=torch.float64); b = torch.randn_like(a)
        def step():
            a @ b
    elif name == "gemm_fp16_small":
        a = torch.randn(1024, 1024, device=dev, dtype=torch.half); b = torch.randn_like(a)
        def step():
            for _ in range(64): a @ b
    elif name == "resnet50_b1":
        step = _cnn_infer(torch, dev, "resnet50", 1)
    elif name == "bert_infer":
        step = _encoder_infer(torch, dev, 768, 12, 12, (32, 128))
    elif name == "reduce_sum":
        x = torch.randn(512 * 1024 * 1024, device=dev)
        def step():
            for _ in range(4): x.sum()
    elif name == "elementwise_fp16":
        a = torch.randn(256 * 1024 * 1024, device=dev, dtype=torch.half); b = torch.randn_like(a)
        c = torch.empty_like(a)
        def step():
            for _ in range(4): torch.addcmul(a, a, b, out=c)
    elif name == "cumsum_scan":
        x = torch.randn(64 * 1024 * 1024, device=dev)
        def step():
            for _ in range(4): torch.cumsum(x, 0)
    elif name == "moe_bmm":
        w = torch.randn(16, 2048, 2048, device=dev, dtype=torch.bfloat16) / 45
        tok = torch.randn(16384, 2048, device=dev, dtype=torch.bfloat16)
        def step():
            route = torch.randint(0, 16, (tok.shape[0],), device=dev)
            order = torch.argsort(route)
            xs = tok[order].view(16, -1, 2048)
            torch.bmm(xs, w)
    elif name == "vit_infer":
        step = _cnn_infer(torch, dev, "vit_b_16", 32)
    elif name == "gru_train":
        m = torch.nn.GRU(512, 512, num_layers=2, batch_first=True).to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        xb = torch.randn(32, 256, 512, device=dev)
        def step():
            loss = m(xb)[0].pow(2).mean()
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    elif name == "topk_select":
        x = torch.randn(4096, 32768, device=dev)
        def step():
            for _ in range(2): torch.topk(x, 64, dim=-1)
    elif name == "adam_step":
        ps = [torch.nn.Parameter(torch.randn(4096, 4096, device=dev)) for _ in range(12)]
        for p_ in ps: p_.grad = torch.randn_like(p_)
        opt = torch.optim.AdamW(ps, lr=1e-4, fused=True)
        def step():
            opt.step()
    elif name == "cnn_fp32_train":
        import torchvision
        m = torchvision.models.resnet18().to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        xb = torch.randn(32, 3, 224, 224, device=dev); yb = torch.randint(0, 1000, (32,), device=dev)
        def step():
            loss = torch.nn.functional.cross_entropy(m(xb), yb)
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    elif name == "index_gather":
        x = torch.randn(100_000_000, device=dev)
        def step():
            idx = torch.randint(0, x.shape[0], (32_000_000,), device=dev)
            x[idx].sum()
    elif name == "gemm_fp8":
        a = torch.randn(8192, 8192, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(8192, 8192, device=dev).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=dev)
        def step():
            for _ in range(8): torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    elif name == "attn_small_b1":
        q = torch.randn(1, 16, 256, 64, device=dev, dtype=torch.half)
        def step():
            for _ in range(64): torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    elif name == "swiglu_bf16":
        w1 = torch.randn(4096, 11008, device=dev, dtype=torch.bfloat16) / 64
        w3 = torch.randn_like(w1); w2 = torch.randn(11008, 4096, device=dev, dtype=torch.bfloat16) / 100
        xb = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
        def step():
            (torch.nn.functional.silu(xb @ w1) * (xb @ w3)) @ w2
    elif name == "gemm_tf32":
        a = torch.randn(8192, 8192, device=dev); b = torch.randn_like(a)
        def step():
            torch.backends.cuda.matmul.allow_tf32 = True
            a @ b
    elif name == "batchnorm_train":
        bn = torch.nn.BatchNorm2d(256).to(dev).train()
        xb = torch.randn(64, 256, 56, 56, device=dev)
        def step():
            for _ in range(4): bn(xb)
    elif name == "randn_gen":
        out = torch.empty(256 * 1024 * 1024, device=dev)
        def step():
            for _ in range(4): out.normal_()
    elif name == "convT_fp16":
        m = torch.nn.Sequential(torch.nn.ConvTranspose2d(256, 128, 4, 2, 1), torch.nn.ReLU(),
                                torch.nn.ConvTranspose2d(128, 64, 4, 2, 1)).to(dev).half()
        m = m.to(memory_format=torch.channels_last).eval()
        xb = torch.randn(32, 256, 64, 64, device=dev, dtype=torch.half).to(memory_format=torch.channels_last)
        def step():
            with torch.inference_mode(): m(xb)
    elif name == "conv1d_audio":
        m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv1d(256, 256, 9, padding=4), torch.nn.GELU())
                                  for _ in range(6)]).to(dev).half().eval()
        xb = torch.randn(16, 256, 16000, device=dev, dtype=torch.half)
        def step():
            with torch.inference_mode(): m(xb)
    elif name == "histc_atomic":
        x = torch.randn(64 * 1024 * 1024, device=dev)
        def step():
            for _ in range(2): torch.bincount((x.abs() * 64).long().clamp_(max=1023), minlength=1024)
    elif name == "encoder_b1":
        step = _encoder_infer(torch, dev, 512, 8, 6, (1, 64), nested=False)
    elif name == "gemm_bf16":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16); b = torch.randn_like(a)
        def step():
            for _ in range(4): a @ b
    elif name == "gemm_fp32":
        torch.backends.cuda.matmul.allow_tf32 = False
        a = torch.randn(4096, 4096, device=dev); b = torch.randn_like(a)
        def step():
            for _ in range(2): a @ b
    elif name == "hbm_copy":
        x = torch.empty(512 * 1024 * 1024, device=dev); y = torch.empty_like(x)
        def step():
            for _ in range(4): y.copy_(x)
    elif name == "small_kernels":
        x = torch.randn(1024, device=dev)
        def step():
            nonlocal x
            for _ in range(300): x = x * 1.0001 + 0.0001
    elif name == "resnet50_train":
        import torchvision
        m = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        xb = torch.randn(64, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
        yb = torch.randint(0, 1000, (64,), device=dev)
        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(m(xb), yb)
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    elif name == "transformer_infer":
        step = _encoder_infer(torch, dev, 1024, 16, 12, (16, 512))
    elif name == "embedding_gather":
        table = torch.randn(40_000_000, 64, device=dev)
        def step():
            idx = torch.randint(0, table.shape[0], (262144 * 4,), device=dev)
            torch.nn.functional.embedding_bag(idx.view(-1, 32), table, mode="sum")
    elif name == "decode_gemv":
        ws = [torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) / 64 for _ in range(32)]
        x0 = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16)
        def step():
            x = x0
            for w in ws: x = torch.tanh(x @ w)
    else:
        raise ValueError(name)
    return step, sync


def _cnn_infer(torch, dev, arch: str, batch: int):
    """One fp16 channels-last torchvision inference step at `batch` images."""
    import torchvision
    last = torch.channels_last
    m = getattr(torchvision.models, arch)().to(dev).half().to(memory_format=last).eval()
    xb = torch.randn(batch, 3, 224, 224, device=dev, dtype=torch.half).to(memory_format=last)
    def step():
        with torch.inference_mode(): m(xb)
    return step


def _encoder_infer(torch, dev, d: int, heads: int, layers: int, shape: tuple[int, int],
                   nested: bool = True):
    """One fp16 inference step of a post-norm encoder (d, heads, 4d feed-forward) on
    (batch, tokens) = shape."""
    layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True)
    m = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=nested)
    m = m.to(dev).half().eval()
    xb = torch.randn(*shape, d, device=dev, dtype=torch.half)
    def step():
        with torch.inference_mode(): m(xb)
    return step


def _gpt(torch, dev, batch=8):
    layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True, norm_first=True)
    m = torch.nn.TransformerEncoder(layer, 6).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
    return m, opt, torch.randn(batch, 1024, 768, device=dev)
