// decoder.h — the forward pass of every supported architecture: token (or
// embedding) rows in, logits and final hidden states of the requested rows
// out, keys and values of every row written to the KV cache. The block_variant
// of the model (model.h) switches the few steps in which architectures differ.
// Not here: splitting batches, finding cache cells, building attention masks
// (context.cpp, kv_cache.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "../cpu/attention.h"
#include "../cpu/matmul.h"
#include "../cpu/ops.h"
#include "../cpu/threadpool.h"
#include "../kv_cache.h"
#include "../lora.h"
#include "model.h"

namespace lp {

// One micro-batch, ready to run: every row has its cache cell, and the masks
// of run_state are built for it.
struct ubatch {
    int64_t n_tok = 0;
    const int32_t* tokens = nullptr;  // (n_tok) token ids, or null when embd is given
    const float* embd = nullptr;      // (n_tok, n_embd) input embeddings, or null
    const int32_t* pos = nullptr;     // (n_tok)
    const int32_t* cells = nullptr;   // (n_tok) KV cache cell of each row
    const int32_t* cells_swa = nullptr;  // (n_tok) cell in the window cache, when there is one
    const int32_t* out_rows = nullptr;  // (n_out) ascending rows whose logits / embeddings are wanted
    int64_t n_out = 0;
};

// All activation memory of a context, allocated once for n_ubatch rows.
struct run_state {
    run_state(const hparams& hp, int64_t n_ubatch, int64_t n_cells, int n_threads,
              attention_path path = attention_path::explicit_softmax);

    int64_t n_ubatch;
    int64_t mask_words;            // 64-bit words per mask row: ceil(n_cells / 64)
    work_buffer x;                 // (n_ubatch, n_embd) residual stream
    work_buffer xb;                // (n_ubatch, n_embd) normalised input of a sub-block
    work_buffer xb2;               // (n_ubatch, n_embd) output of a sub-block
    work_buffer qkv;               // (n_ubatch, n_q + n_k + n_v) queries | keys | values
    work_buffer att;               // (n_ubatch, n_head * head_dim_v) attention output
    work_buffer ffn;               // (n_ubatch, 2 * n_ff) gate | up
    std::vector<float> rope_cs[2];      // (n_ubatch, n_rot) cos/sin pairs: [0] global layers, [1] sliding-window layers
    std::vector<uint64_t> mask[2];      // (n_ubatch, mask_words) visible cells: [0] global, [1] sliding window
    std::vector<int32_t> mask_lo[2];    // (n_ubatch) first visible cell
    std::vector<int32_t> mask_hi[2];    // (n_ubatch) one past the last visible cell
    matmul_scratch mm;
    attention_scratch attn;
    // Active LoRA adapters (null: none) and their work rows: A x (n_ubatch,
    // max rank) and B (A x) (n_ubatch, widest adapted output).
    const lora_set* loras = nullptr;
    std::vector<float> lora_ax, lora_bax;
};

// Runs the model on one micro-batch. rope[0] / rope[1]: RoPE of the global /
// sliding-window layers. logits: (n_out, n_vocab), or null to skip the
// output head; embd: (n_out, n_embd) final normalised hidden states, or null.
// kv_swa: the sliding-window layers' own cache (cells ub.cells_swa), or null
// when kv holds every layer.
void decoder_forward(const model& m, const rope_params rope[2], kv_cache& kv, kv_cache* kv_swa, run_state& rs,
                     const ubatch& ub, thread_pool& pool, float* logits, float* embd);

// The output head alone: logits (n, n_vocab) of n final normalised hidden
// states h (n, n_embd), soft-capped where the model asks.
void decoder_logits(const model& m, const float* h, int64_t n, thread_pool& pool, run_state& rs, float* logits);

}  // namespace lp
