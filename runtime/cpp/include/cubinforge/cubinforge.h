// cubinforge C++ loader: include this and the rendered bundle header, link -lcuda.
// Header-only, C++17, CUDA driver API only. docs/cpp-embedding.md shows a whole host.
#pragma once

#include "cubinforge/status.h"     // Status: CUresult + its name + what was wrong
#include "cubinforge/tensor.h"     // Tensor {ptr, rank, shape, strides, dtype}
#include "cubinforge/contract.h"   // the contract's table types (rendered by `bundle --cpp`)
#include "cubinforge/expr.h"       // the RPN stack machine
#include "cubinforge/bind.h"       // symbols, validation, scalars, checks, grid
#include "cubinforge/tensormap.h"  // cuTensorMapEncodeTiled from a recipe
#include "cubinforge/params.h"     // kernelParams packed at the contract's offsets
#include "cubinforge/device.h"     // compute capability -> sm_90a / sm_100a; primary context
#include "cubinforge/select.h"     // pick a variant by axes, or say what is missing
#include "cubinforge/variants.h"   // window_size / softcap / learnable_sink -> variant axes and scalars
#include "cubinforge/module.h"     // load a cubin, raise the dynamic smem limit
#include "cubinforge/launch.h"     // cuLaunchKernelEx on the caller's stream
#include "cubinforge/decode.h"     // the decode plan: split count, pack-GQA
#include "cubinforge/text.h"       // shapes and values written as the Python runtime writes them
#include "cubinforge/prepared.h"   // launches bound and packed once: run() only launches (graph capture)
#include "cubinforge/kvcache.h"    // flash_attn_with_kvcache: append, cache_batch_idx, split-KV + combine, paged
#include "cubinforge/varlen.h"     // flash_attn_varlen_func: packed and paged varlen
#include "cubinforge/combine.h"    // flash_attn_combine: split partials reduced
#include "cubinforge/attention.h"  // flash_attn_func: dense, decode-shaped calls through split-KV + combine
