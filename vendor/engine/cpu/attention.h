// attention.h — scaled dot-product attention of query rows over the cells of
// a KV cache, with grouped-query heads, per-row visibility masks (causal,
// sequences, sliding window) and optional soft-capping of the scores.
//
// Two paths compute it (attention_args::path):
//   explicit_softmax — per block of rows, a row of scores over every visible
//     cell (taken in position order), softmax, then the weighted values.
//     Numerics follow llama.cpp's CPU path without flash attention: against
//     an F16 (BF16) cache the queries are rounded to F16 (BF16) for q·k, and
//     the softmax weights are rounded likewise before they multiply values.
//   flash — fused and tiled, online softmax, work memory independent of the
//     number of cells (cpu/flash_attention.h).
// Not here: which cells a row sees (kv_cache.h builds the masks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "../backend/op_args.h"
#include "../ggml_type.h"
#include "threadpool.h"

namespace lp {

// The cells [lo, hi) that any of rows [t0, t0 + nb) sees, from the rows'
// mask_lo / mask_hi (lo == hi when none sees any): both paths walk this span.
struct cell_span {
    int32_t lo = 0, hi = 0;
};
cell_span rows_span(const attention_args& a, int t0, int nb);
inline bool cell_visible(const uint64_t* row_bits, int32_t j) { return (row_bits[j >> 6] >> (j & 63)) & 1u; }

// Rows are processed in blocks of up to this many (they share each key and
// value row they read).
constexpr int kAttentionBlock = 4;

// The flash path's geometry (flash_attention.h): query rows per block are
// chosen so a block holds about kFlashQueries queries (rows × heads sharing a
// key head); cells go in tiles of kFlashTile (one mask word) and chunks of
// kFlashChunk, both aligned to cell indices.
constexpr int kFlashQueries = 16, kFlashTile = 64, kFlashChunk = 256;
// At most this many blocks share one task, walking the chunks together (the
// chunk's keys and values then come from the core's cache for all but the
// first block).
constexpr int kFlashGroup = 8;
constexpr int flash_block_rows(int n_gqa) { return n_gqa >= kFlashQueries ? 1 : kFlashQueries / n_gqa; }

// The sizes an attention call's work memory depends on.
struct attention_shape {
    int n_gqa = 1, head_dim_k = 1, head_dim_v = 1, n_head_kv = 1;
};

// Per-thread work memory, sized once for a context and for one path.
struct attention_scratch {
    struct per_thread {
        std::vector<int32_t> idx;   // (n_cells) cells the current block sees
        std::vector<float> scores;  // (kAttentionBlock * n_gqa, n_cells)
        std::vector<float> qh;      // (kAttentionBlock * n_gqa, head_dim_k) queries as the kernels use them
        std::vector<float> row;     // (max(head_dim_k, head_dim_v)) one converted key / value row
        std::vector<float> acc;     // (kAttentionBlock * n_gqa, head_dim_v) output accumulators
    };
    std::vector<per_thread> threads;
    // The flash path's (flash_attention.h); none of it depends on n_cells.
    struct flash_thread {
        std::vector<float> q;        // (kFlashGroup, flash_block_rows(n_gqa) * n_gqa, head_dim_k) queries of a group's blocks
                                     // as the kernels use them (floats, or the key type's activation blocks, which never
                                     // take more bytes)
        std::vector<float> s;        // (flash_block_rows(n_gqa) * n_gqa, kFlashTile) scores, then weights, of one tile
        std::vector<float> sc;       // (flash_block_rows(n_gqa) * n_gqa, kFlashTile) the same for the tile's used cells only
        std::vector<float> part;     // (flash_block_rows(n_gqa) * n_gqa, head_dim_v + 2) one chunk's partial: acc | max | sum
        std::vector<float> total;    // (kFlashGroup, flash_block_rows(n_gqa) * n_gqa, head_dim_v + 2) running totals of a
                                     // group's blocks
        std::vector<float> vbuf;     // (kFlashTile, head_dim_v) a quantized tile's values in F32
        int32_t touched = 0;         // what the split path's read-ahead loaded (kept, so the loads stay)
    };
    std::vector<flash_thread> flash;
    // Split-K (few rows, many cells): partials of the chunks of one round
    // (n_slots tasks × key heads, flash_block_rows(n_gqa) * n_gqa, head_dim_v + 2),
    // the running max / sum of each split block × key head
    // (flash_block_rows(n_gqa) * n_gqa, 2 each) and the round's tasks
    // (n_slots: block, chunk start). reserve() sizes the first two for its
    // n_head_kv (a call with more is refused) and n_threads blocks; they never
    // depend on the number of cells.
    std::vector<float> slots, split_ml;
    std::vector<std::pair<int64_t, int32_t>> split_tasks;
    int64_t n_slots = 0;

    attention_path path = attention_path::explicit_softmax;  // what reserve() sized this for
    int n_gqa = 0, head_dim_k = 0, head_dim_v = 0;           // likewise (its first shape)
    int n_head_kv = 0;                                       // likewise (flash path)
    int64_t n_cells = 0;                                     // (explicit path)
    std::vector<attention_shape> shapes;                     // every shape it was sized for

    // The explicit path's memory (n_cells enters it).
    void reserve(int n_threads, int64_t n_cells, int n_gqa, int head_dim_k, int head_dim_v);
    // Memory for path p: for flash n_cells is ignored.
    // n_head_kv sizes the flash path's split-K partials (a task does every
    // key head); flash calls with more key heads are refused.
    void reserve(attention_path p, int n_threads, int64_t n_cells, int n_gqa, int head_dim_k, int head_dim_v,
                 int n_head_kv = 1);
    // The same for calls of any of several shapes (models whose layers
    // differ, as Gemma 4's): each buffer as large as the largest shape needs.
    void reserve(attention_path p, int n_threads, int64_t n_cells, const std::vector<attention_shape>& shapes);
    // Whether a call of a's shape fits what was reserved (the flash path
    // also needs key heads up to the shape's n_head_kv).
    bool fits(const attention_args& a) const;
    size_t bytes() const;  // work memory held
};

// out[t, h] = softmax_j(scale * cap(q[t, h] · k[j, h / n_gqa])) · v[j, h / n_gqa]
// over the cells j row t sees. A row that sees no cell gets zeros. Results do
// not depend on how rows are grouped into blocks or spread over threads, on
// either path. The scratch must have been reserved for a.path and for these
// head sizes (value_error otherwise).
void attention(const attention_args& a, thread_pool& pool, attention_scratch& scratch);

}  // namespace lp
