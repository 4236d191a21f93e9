// attention.h — scaled dot-product attention of query rows over the cells of
// a KV cache, with grouped-query heads, per-row visibility masks (causal,
// sequences, sliding window) and optional soft-capping of the scores.
//
// Numerics follow llama.cpp's CPU path without flash attention: against an
// F16 (BF16) cache the queries are rounded to F16 (BF16) for q·k, and the
// softmax weights are rounded likewise before they multiply the values.
// Not here: which cells a row sees (kv_cache.h builds the masks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../ggml_type.h"
#include "threadpool.h"

namespace lp {

struct attention_args {
    int n_tok = 0;               // query rows
    int n_head = 0, n_head_kv = 0;
    int head_dim_k = 0, head_dim_v = 0;
    const float* q = nullptr;    // (n_tok, n_head, head_dim_k), row stride q_stride floats
    int64_t q_stride = 0;
    float* out = nullptr;        // (n_tok, n_head, head_dim_v), row stride out_stride floats
    int64_t out_stride = 0;
    // The cache of one layer: cell j's keys are row j of k (n_head_kv heads of
    // head_dim_k elements of type_k), likewise values. F32, F16 or BF16.
    ggml_type type_k = ggml_type::F16, type_v = ggml_type::F16;
    const uint8_t* k = nullptr;
    size_t k_row_bytes = 0;
    const uint8_t* v = nullptr;
    size_t v_row_bytes = 0;
    // Which cells each query row sees: bit j of row t of `mask`
    // ((n_tok, mask_words) 64-bit words), all inside [lo[t], hi[t]).
    const uint64_t* mask = nullptr;
    int64_t mask_words = 0;
    const int32_t* lo = nullptr;  // (n_tok)
    const int32_t* hi = nullptr;  // (n_tok)
    // Position of each cell: visible cells are taken in position order, so
    // results do not depend on which cells a cache happened to use.
    const int32_t* cell_pos = nullptr;
    float scale = 1.0f;          // applied to q·k after soft-capping
    float softcap = 0.0f;        // 0: none; else s = tanh(s / softcap) * softcap
};

// Rows are processed in blocks of up to this many (they share each key and
// value row they read).
constexpr int kAttentionBlock = 4;

// Per-thread work memory, sized once for a context.
struct attention_scratch {
    struct per_thread {
        std::vector<int32_t> idx;   // (n_cells) cells the current block sees
        std::vector<float> scores;  // (kAttentionBlock * n_gqa, n_cells)
        std::vector<float> qh;      // (kAttentionBlock * n_gqa, head_dim_k) queries as the kernels use them
        std::vector<float> row;     // (max(head_dim_k, head_dim_v)) one converted key / value row
        std::vector<float> acc;     // (kAttentionBlock * n_gqa, head_dim_v) output accumulators
    };
    std::vector<per_thread> threads;
    void reserve(int n_threads, int64_t n_cells, int n_gqa, int head_dim_k, int head_dim_v);
};

// out[t, h] = softmax_j(scale * cap(q[t, h] · k[j, h / n_gqa])) · v[j, h / n_gqa]
// over the cells j row t sees. A row that sees no cell gets zeros. Results do
// not depend on how rows are grouped into blocks or spread over threads.
void attention(const attention_args& a, thread_pool& pool, attention_scratch& scratch);

}  // namespace lp
