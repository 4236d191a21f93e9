// op_args.h — the argument types of the seam (backend.h): what the forward
// pass hands every backend — a weight matrix as the file stores it, the RoPE
// parameters of a rotation table, and one attention call over a layer's cache.
// They belong to no backend: the CPU's kernels (cpu/) and a GPU backend take
// the same structs, so these live beside the interface, not in cpu/.
// Not here: the operations (backend.h), the memory they run on (buffer.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../ggml_type.h"

namespace lp {

// A weight matrix as stored in GGUF: n_rows rows of n_cols elements, each row
// row_stride bytes (normally row_size(type, n_cols)).
struct weight_view {
    ggml_type type = ggml_type::F32;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
    const void* data = nullptr;
    size_t row_stride = 0;
};

// The experts of one mixture-of-experts layer as GGUF stores them: one
// tensor of n_expert matrices of the same shape, back to back. Seen as one
// weight_view of n_expert * rows_per_expert rows (expert e's rows start at
// row e * rows_per_expert), which is how a backend that copies weights to its
// device uploads it: once, as any other matrix.
struct experts_view {
    weight_view all;       // (n_expert * rows, n_cols)
    int64_t n_expert = 0;
    int64_t rows() const { return n_expert ? all.n_rows / n_expert : 0; }
    bool present() const { return all.data != nullptr; }
};

// How a mixture-of-experts layer picks its experts (llama.cpp's build_moe_ffn):
// from the router's logits of a row, probabilities by `gating`; the selection
// scores are the probabilities plus `bias` (DeepSeek V3's correction, null:
// none); with n_group > 1 the experts are in n_group equal groups, each scored
// by the sum of its two best selection scores, and only the n_group_used best
// groups compete; the k best selection scores name the experts, whose
// weights are their probabilities (softmax_weight: a softmax over the k
// logits), divided by their sum when `norm` (the sum clamped below at F16's
// smallest normal), times `scale` when it is neither 0 nor 1.
enum class moe_gating : int { softmax = 0, sigmoid = 1, softmax_weight = 2 };

struct moe_route_args {
    int64_t n_tok = 0;
    int64_t n_expert = 0;
    int k = 0;                      // experts per row
    const float* logits = nullptr;  // (n_tok, n_expert), row stride logits_stride floats
    int64_t logits_stride = 0;
    const float* bias = nullptr;    // (n_expert) selection bias, or null
    moe_gating gating = moe_gating::softmax;
    int n_group = 0, n_group_used = 0;
    bool norm = false;
    float scale = 0.0f;
    // (n_expert) each chosen expert's weight times its entry, last (Gemma 4's
    // per-expert output scales: the same as scaling that expert's down
    // projection), or null
    const float* expert_scale = nullptr;
    int32_t* ids = nullptr;         // out: (n_tok, k) chosen experts, best first
    float* weights = nullptr;       // out: (n_tok, k) their weights
};

// ---------------------------------------------------------------------------
// Recurrent (linear-attention) layers: per-sequence state
// ---------------------------------------------------------------------------

// The short causal convolution of a gated delta-net layer (llama.cpp's
// ssm_conv): channel c of row t is sum over i < d_conv of w[c][i] * window[i],
// where the window is the sequence's last d_conv - 1 inputs of that channel
// (its state tail) followed by x[t][c]. Rows are taken in batch order; each
// row reads and then advances the tail of its own state slot, so rows of
// several sequences may share a batch as long as each sequence's rows come in
// position order.
struct ssm_conv_args {
    int64_t n_tok = 0;
    int64_t n_ch = 0;             // channels
    int d_conv = 0;               // kernel width
    const float* x = nullptr;     // (n_tok, n_ch), row stride x_stride floats
    int64_t x_stride = 0;
    float* y = nullptr;           // (n_tok, n_ch), row stride y_stride floats (not x)
    int64_t y_stride = 0;
    const float* w = nullptr;     // (n_ch, d_conv) the kernel, as GGUF's ssm_conv1d stores it
    float* state = nullptr;       // slot s: (n_ch, d_conv - 1) at state + s * state_stride, oldest first
    int64_t state_stride = 0;
    const int32_t* slot = nullptr;  // (n_tok) state slot of each row
};

// Mamba-2's selective scan (llama.cpp's ssm_scan with a scalar decay per
// head), one token at a time per head h: with S the head's (head_dim × d_state)
// state, g = h / (n_head / n_group) its group, dt = softplus(dt_in[h]):
//   S = exp(dt * A[h]) S + dt x_h B_gᵀ;  y_h = S C_g  (+ D[h] x_h when D is given).
// State layout per head: row p (of head_dim) holds d_state contiguous floats.
// Rows in batch order, each on its own slot's state, as ssm_conv_args.
struct ssm_scan_args {
    int64_t n_tok = 0;
    int n_head = 0, head_dim = 0, d_state = 0, n_group = 0;
    const float* x = nullptr;     // (n_tok, n_head * head_dim), row stride x_stride
    int64_t x_stride = 0;
    const float* dt = nullptr;    // (n_tok, n_head) before the softplus, row stride dt_stride
    int64_t dt_stride = 0;
    const float* A = nullptr;     // (n_head) the decay rates (-exp(A_log))
    const float* B = nullptr;     // (n_tok, n_group * d_state), row stride bc_stride
    const float* C = nullptr;     // (n_tok, n_group * d_state), row stride bc_stride
    int64_t bc_stride = 0;
    const float* D = nullptr;     // (n_head) skip weights, or null
    float* y = nullptr;           // (n_tok, n_head * head_dim), row stride y_stride (not x)
    int64_t y_stride = 0;
    float* state = nullptr;       // slot s: (n_head, head_dim, d_state) at state + s * state_stride
    int64_t state_stride = 0;
    const int32_t* slot = nullptr;  // (n_tok) state slot of each row
};

// The gated delta rule (Qwen3.5 / Qwen3-Next linear attention), one token at a
// time per head: with S the head's (head_dim × head_dim) state,
//   S = exp(g) S;  d = (v - Sᵀk) * beta;  S = S + k dᵀ;  o = Sᵀq * scale.
// q and k have n_head_k heads, v / g / beta / o n_head_v (a multiple):
// value head h reads key head h % n_head_k (the converter orders the value
// heads so). State layout per head: element (i, j) of S at j * head_dim + i
// (llama.cpp's), so Sᵀk is head_dim contiguous dot products. Rows in batch
// order, each on its own slot's state, as ssm_conv_args.
struct gated_delta_args {
    int64_t n_tok = 0;
    int n_head_k = 0, n_head_v = 0, head_dim = 0;
    const float* q = nullptr;     // (n_tok, n_head_k * head_dim), row stride qk_stride
    const float* k = nullptr;     // likewise
    int64_t qk_stride = 0;
    const float* v = nullptr;     // (n_tok, n_head_v * head_dim), row stride v_stride
    int64_t v_stride = 0;
    const float* g = nullptr;     // (n_tok, n_head_v) log decay, row stride gb_stride
    const float* beta = nullptr;  // (n_tok, n_head_v) write strength
    int64_t gb_stride = 0;
    float* out = nullptr;         // (n_tok, n_head_v * head_dim), row stride out_stride
    int64_t out_stride = 0;
    float* state = nullptr;       // slot s: (n_head_v, head_dim, head_dim) at state + s * state_stride
    int64_t state_stride = 0;
    const int32_t* slot = nullptr;  // (n_tok)
    float scale = 1.0f;           // of the output (1 / sqrt(head_dim))
};

// ---------------------------------------------------------------------------
// Rotary position embedding
// ---------------------------------------------------------------------------

// normal: rotate adjacent pairs (x[2i], x[2i+1]) (llama.cpp's "norm" type,
// used with the converter's permuted Q/K weights); neox: rotate x[i] with
// x[i + n_rot/2].
enum class rope_style : int { normal = 0, neox = 2 };

struct rope_params {
    int n_rot = 0;                      // rotated dims per head (even, <= head_dim)
    rope_style style = rope_style::normal;
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;            // 1 / linear scaling factor
    const float* freq_factors = nullptr;  // (n_rot/2) divisors of the frequencies (llama3, longrope) or null
    // YaRN (ext_factor 0 disables it)
    float ext_factor = 0.0f;
    float attn_factor = 1.0f;           // multiplies cos and sin
    float beta_fast = 32.0f, beta_slow = 1.0f;
    int n_ctx_orig = 0;
    // M-RoPE (Qwen2-VL, llama.cpp's rope type "mrope"): a row has 4 positions
    // (temporal, height, width, extra) and pair i of the rotated dims turns
    // by the position of the component its sector i % sum(sections) falls
    // in: the first sections[0] sectors temporal, the next sections[1]
    // height, then sections[2] width, the rest extra. All zero: plain RoPE,
    // one position per row. The angle schedule (base^(-2i/n_rot), YaRN,
    // freq_factors) is the plain one; only the position differs per pair.
    int sections[4] = {0, 0, 0, 0};
    bool mrope() const { return sections[0] + sections[1] + sections[2] + sections[3] > 0; }
};

// ---------------------------------------------------------------------------
// Attention
// ---------------------------------------------------------------------------

enum class attention_path : int { explicit_softmax = 0, flash = 1 };
const char* attention_path_name(attention_path p);  // "explicit" / "flash"

struct attention_args {
    int n_tok = 0;               // query rows
    int n_head = 0, n_head_kv = 0;
    int head_dim_k = 0, head_dim_v = 0;
    const float* q = nullptr;    // (n_tok, n_head, head_dim_k), row stride q_stride floats
    int64_t q_stride = 0;
    float* out = nullptr;        // (n_tok, n_head, head_dim_v), row stride out_stride floats
    int64_t out_stride = 0;
    // The cache of one layer: cell j's keys are row j of k (n_head_kv heads of
    // head_dim_k elements of type_k), likewise values. Any kv_cache_type_ok
    // type (float or block-quantized).
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
    // Position of each cell: the explicit path takes visible cells in
    // position order, so its results do not depend on which cells a cache
    // happened to use. The flash path takes them in cell order (tiles aligned
    // to cell indices); there the cells' order changes results in rounding only.
    const int32_t* cell_pos = nullptr;
    float scale = 1.0f;          // applied to q·k after soft-capping
    float softcap = 0.0f;        // 0: none; else s = tanh(s / softcap) * softcap
    // Attention sinks (gpt-oss): a learned logit per query head that joins
    // its softmax (in the max and the sum) without a value: the weights of
    // the cells sum to less than 1. Null: none.
    const float* sinks = nullptr;  // (n_head)
    attention_path path = attention_path::explicit_softmax;
};

}  // namespace lp
