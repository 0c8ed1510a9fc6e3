"""SM90 FlashAttention-3 forward: the kernel family the generator's templates import.

`compile_variant(FwdConfig(...))` cross-compiles one variant (no GPU needed) and returns a
KernelBuild: the cubin plus the launch-contract sections only the kernel knows.
"""

from __future__ import annotations

from .config import DEFAULT_TILES, FwdConfig, default_tile

__all__ = ["FwdConfig", "compile_variant", "default_tile", "DEFAULT_TILES"]


def compile_variant(cfg: FwdConfig):
    from cubinforge.generator.kernel_build import KernelBuild

    from .compile import compile_cubin
    from .contract import family_contract, inference_contract, varlen_contract
    from .layouts import swizzle_bytes

    compiled, kernel, seconds = compile_cubin(cfg)
    entries = list(compiled.kernel_info)
    if len(entries) != 1:
        raise RuntimeError(f"expected one kernel in the compiled module, found {entries}")
    # Q and K rows are head_dim wide, V and O rows head_dim_v: each map takes its own swizzle.
    swizzle = {t: swizzle_bytes(cfg.elem_bytes, cfg.head_dim if t in "qk" else cfg.head_dim_v) for t in "qkvo"}
    if cfg.fp8:
        # V column-major: its rows are keys (tile_n bytes); O is bf16.
        if cfg.v_layout == "colmajor":
            swizzle["v"] = swizzle_bytes(cfg.elem_bytes, cfg.tile_n)
        swizzle["o"] = swizzle_bytes(cfg.out_elem_bytes, cfg.head_dim_v)
    return KernelBuild(
        cubin=bytes(compiled.__cubin__),
        entry=entries[0],
        block=(cfg.threads, 1, 1),
        cluster=(1, 1, 1),
        dynamic_smem_bytes=int(kernel.dynamic_smem_bytes),
        contract=(varlen_contract if cfg.varlen else inference_contract if cfg.inference else family_contract)(
            cfg, kernel.tma_boxes, swizzle),
        compile_options=f"--gpu-arch {cfg.arch} --keep-cubin",
        # Two CTAs an SM need 2 x ~84 KiB of shared memory: the driver's default carveout for
        # one CTA's request can leave room for one (bench/decode_ab.py's occupancy column).
        smem_carveout_percent=100 if cfg.ctas_per_sm > 1 else None,
        extra={
            "tile_m": cfg.tile_m, "tile_n": cfg.tile_n, "stages": cfg.stages,
            "consumer_warpgroups": cfg.consumer_warpgroups, "register_split": list(cfg.register_split),
            "intra_wg_overlap": cfg.intra_wg_overlap, "pingpong": cfg.pingpong,
            "rescale_o_early": cfg.rescale_o_early, "scheduler": cfg.scheduler,
            "separate_o_smem": cfg.separate_o_smem, "l2_section_mib": cfg.l2_section_mib,
            **({"causal_order": cfg.causal_order} if cfg.causal_order != "all" else {}),
            "in_order_row_sum": cfg.in_order_row_sum, "wg_epilogue": cfg.wg_epilogue,
            "mask_bits": cfg.mask_bits, "chunked_p_convert": cfg.chunked_p_convert,
            # The lazy rescale changes P's values (a stale maximum), so its rounding: recorded
            # where set, so two forms' outputs can be told comparable or not.
            **({"rescale_threshold": cfg.rescale_threshold} if cfg.rescale_threshold else {}),
            **({"split_kv": cfg.split_kv, "pack_gqa": cfg.pack_gqa, "paged_kv": cfg.paged_kv} if cfg.inference else {}),
            **({"varlen": True, "serves": _varlen_serves(cfg)} if cfg.varlen else {}),
            **({"v_layout": cfg.v_layout, "out_dtype": cfg.out_dtype} if cfg.fp8 else {}),
            **({"fp8_local_p": cfg.fp8_local_p} if cfg.v_transpose else {}),
            **({"descale_block": cfg.descale_block} if cfg.descale_blocks[1] else {}),
            **({"ctas_per_sm": cfg.ctas_per_sm} if cfg.ctas_per_sm != 1 else {}),
            **({"late_k_release": True} if cfg.late_k_release else {}),
            **({"try_wait_first": True} if cfg.try_wait_first else {}),
            "dsl_compile_seconds": round(seconds, 3),
        },
    )


def _varlen_serves(cfg: FwdConfig) -> str:
    """What a varlen variant is for, in the words of the call that reaches it."""
    kv = ("k/v a paged cache (num_pages, page_size % 16 == 0, heads_kv, d) with page_table and seqused_k: "
          "paged chunked prefill" if cfg.paged_kv else "packed k/v (total_k, heads_kv, d)")
    model = [w for w, on in (("window_size (bottom-right per sequence)", cfg.local), ("softcap", cfg.softcap),
                             ("learnable_sink (heads_q,) float32", cfg.learnable_sink)) if on]
    return (f"flash_attn_varlen_func {cfg.dtype} hd{cfg.head_dim} {'causal (bottom-right per sequence)' if cfg.causal else 'non-causal'}: "
            f"packed q (total_q, heads_q, d) with cu_seqlens_q/k and optional seqused_q/k, {kv}; "
            f"GQA/MQA; lse (heads_q, total_q)" + (f"; with {', '.join(model)}" if model else ""))
