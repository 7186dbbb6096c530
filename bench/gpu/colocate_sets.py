"""The workload sets colocate_more.py measures (`--set NAME`), eight workloads each; the
workloads themselves are built in colocate_workloads*.py."""

#: `--set NAME` picks one (default: "b", data/h200b)
SETS = {
    "b": ["attention_bf16", "gpt_train", "resnet18_infer", "softmax_bw", "scatter_add",
          "kv_decode", "loader_bound", "fft_conv"],
    # four of the shared set's workloads beside four new ones (16 cross pairs, and 6 + 6
    # repeats of pairs already measured, which say how noisy one 3 s window is)
    "mixed": ["gemm_bf16", "hbm_copy", "small_kernels", "decode_gemv",
              "gpt_train", "kv_decode", "loader_bound", "scatter_add"],
    # a third draw of characters: int8 tensor cores, cuDNN RNN and 3-D convolution, copy
    # engines, sorting, sparse, batch-1 MLP, LayerNorm
    "c": ["gemm_int8", "layernorm_bw", "sort_keys", "lstm_infer", "conv3d_train",
          "h2d_copy", "spmm_csr", "mlp_b1"],
    # FP64 and small fp16 tensor kernels, batch-1 CNN, BERT-like serving, reductions, an
    # elementwise stream, a scan, an MoE-like batched expert GEMM
    "d": ["gemm_fp64", "gemm_fp16_small", "resnet50_b1", "bert_infer", "reduce_sum",
          "elementwise_fp16", "cumsum_scan", "moe_bmm"],
    # ViT serving, cuDNN GRU training, top-k, a fused optimizer step, fp32 CNN training,
    # random gathers, fp8 tensor cores, many small causal attentions
    "e": ["vit_infer", "gru_train", "topk_select", "adam_step", "cnn_fp32_train",
          "index_gather", "gemm_fp8", "attn_small_b1"],
    # SwiGLU MLP, TF32 GEMM, batch-norm training, RNG, transposed convolutions, 1-D audio
    # convolutions, histogram atomics, a batch-1 small encoder
    "f": ["swiglu_bf16", "gemm_tf32", "batchnorm_train", "randn_gen", "convT_fp16",
          "conv1d_audio", "histc_atomic", "encoder_b1"],
    # depthwise-conv serving, fp32 without tensor cores, bursty serving at moderate load, a
    # CUDA-graph MLP, host syncs after every kernel, an LM head with its loss, memory-bound
    # CNN training, batch-64 decode (bench/gpu/colocate_workloads_gh.py)
    "g": ["mobilenet_infer", "gemm_fp32_simt", "bursty_serving", "cuda_graph_mlp", "sync_heavy",
          "xent_vocab", "effnet_train", "decode_b64"],
    # ConvNeXt training, a Python-loop LSTM cell, STFT, tiny batched GEMMs, video 3-D CNN,
    # data-dependent masks, kNN search, a host-bound job that barely touches the GPU
    "h": ["convnext_train", "lstmcell_loop", "stft_audio", "bmm_small", "r3d_infer",
          "nonzero_mask", "cdist_knn", "cpu_bound"],
    # prepared without a GPU (2026-11-27; bench/gpu/colocate_workloads_ij.py): recommendation,
    # LLM prefill, a UNet-like conv stack, device-to-host copies, LLM sampling, GNN message
    # passing, weight-only int8 decode, compute beside a copy
    "i": ["dlrm_embbag", "prefill_2k", "unet_infer", "d2h_copy", "sampling_vocab", "gnn_sage",
          "int8_dequant", "copy_overlap"],
    # a long scan, Swin serving, small-batch ResNet-50 training, sort-based unique, BERT-base
    # training, detection with host post-processing, unfused fp32 attention, batched QR
    "j": ["scan_ssm", "swin_infer", "resnet50_b16_train", "unique_counts", "bert_train",
          "ssd_detect", "attn_naive_fp32", "qr_batched"],
    # prepared without a GPU (2026-11-28; bench/gpu/colocate_workloads_k.py): one decode with a
    # host sync per token and the same decode from a CUDA graph, speculative verification,
    # host-preprocessed serving, flash attention, embedding training, GPU augmentation, a VAE
    "k": ["decode_sync_tok", "decode_graph_tok", "spec_verify", "preproc_serving",
          "sdpa_causal_8k", "embbag_train", "gpu_augment", "vae_decode"],
}
