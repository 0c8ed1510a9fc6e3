"""Nsight Compute target for the torch-side anchors: one cell, launched 1 + --repeat times.

Run by ncu.py under `ncu`, as `python3 bench/_ncu_torch_child.py --backend fa4|cudnn ...`;
ncu's kernel-name filter picks the attention kernel out of torch's own launches. `--backend
ours --variant NAME` launches one variant of the registry at $CUBINFORGE_HOME (a bench.ab
home), pinned, on torch tensors (bench/ncu_memory.py). `--varlen`: bench/inference.py's
16-sequence packed case at the given head dims instead (ours through prepare_varlen on the
registry at $CUBINFORGE_HOME, FA4 through its flash_attn_varlen_func).
"""

import argparse
import os
import sys

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # do not let bench/*.py shadow anything

# The kernel each backend launches, as ncu --kernel-name regexes (FA4's CuTe DSL kernel is
# named after its class; cuDNN's SDPA kernels carry "sdpa"/"fprop").
KERNEL_REGEX = {"fa4": "regex:flash_fwd", "cudnn": "regex:(?i)sdpa|fprop|fmha", "ours": "regex:kernel_cutlass"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=sorted(KERNEL_REGEX), required=True)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seqlen", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim-v", type=int, default=0, help="V's head dim (0: --head-dim)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--variant", default=None, help="ours: the variant to pin")
    ap.add_argument("--varlen", action="store_true", help="bench/inference.py's packed varlen case")
    a = ap.parse_args()

    import torch

    if a.varlen:
        return run_varlen(torch, a)

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    q, k, v = (torch.randn((a.batch, a.seqlen, a.heads, n), device="cuda", dtype=dt)
               for n in (a.head_dim, a.head_dim, a.head_dim_v or a.head_dim))
    if a.backend == "ours":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from bench.anchors import Ours

        ours = Ours()
        out = torch.empty_like(q)
        lse = torch.empty(a.batch, a.heads, a.seqlen, device="cuda", dtype=torch.float32)

        def call():
            ours.launch(q, k, v, bool(a.causal), out, lse, variant=a.variant)
    elif a.backend == "fa4":
        from flash_attn.cute import flash_attn_func

        def call():
            flash_attn_func(q, k, v, causal=bool(a.causal))
    else:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA takes (b, h, s, d)

        def call():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                sdpa(qt, kt, vt, is_causal=bool(a.causal))
    for _ in range(1 + a.repeat):
        call()
    torch.cuda.synchronize()
    return 0


def run_varlen(torch, a) -> int:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from bench.inference import varlen_case

    q, k, v, cu_q, cu_k, _, _, mq, mk, _, _ = varlen_case(torch, "varlen", a.head_dim, a.head_dim_v or a.head_dim,
                                                         a.dtype)
    if a.backend == "ours":
        from cubinforge.runtime import prepare_varlen

        stream = torch.cuda.current_stream().cuda_stream
        out = q.new_empty(*q.shape[:2], v.shape[-1])
        lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32, device="cuda")
        plan = prepare_varlen(q, k, v, cu_q, cu_k, mq, mk, causal=bool(a.causal), out=out, lse=lse, stream=stream)

        def call():
            plan.run(stream)
    elif a.backend == "fa4":
        from flash_attn.cute import flash_attn_varlen_func

        def call():
            flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=mq,
                                   max_seqlen_k=mk, causal=bool(a.causal))
    else:
        raise SystemExit("--varlen: ours or fa4")
    for _ in range(1 + a.repeat):
        call()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
