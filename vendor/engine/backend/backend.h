// backend.h — the seam between the forward pass and the hardware: the small
// set of operations a transformer needs, over activation rows held in
// device_buffers (buffer.h) and weights as weight_views. model/blocks.cpp
// writes every architecture's forward pass against this interface; the CPU
// backend (cpu_backend.h) implements it with the kernels of cpu/ and quants/,
// and a GPU backend implements the same ops on its own device.
//
// Two kinds of operations:
//   - whole-batch ops (matmul, get_rows, gather_rows, rope_table, attention):
//     each is one call over n rows;
//   - row ops (row_op: norms, add / scale / softcap, activation gating, RoPE,
//     Hadamard rotation, copy, KV store): each works on row t of its operands
//     only, so a sequence of them may be run row by row. run_rows hands a
//     backend such a sequence; the CPU runs all of them on one row before the
//     next (one pass over the rows, one thread-pool round trip, inline for a
//     single row), a GPU backend may launch one kernel per op.
//
// Operands are "rows": row t of an operand starts at p + t * stride floats;
// stride 0 means one row shared by every t (a bias, a norm weight).
// Weights are the model's weight_views (the mapped file). The CPU reads them
// in place; a backend on another device keeps its own copies of the layers
// the placement plan (placement.h) gives it, keyed by the weight_view, as
// lora_set keys adapters by the matrix they modify.
// The argument structs (weight_view, rope_params, attention_args) are in
// op_args.h.
// Not here: the kernels (cpu/, quants/), what runs the ops in which order
// (model/blocks.h), which device holds which layer (placement.h).
#pragma once

#include <cstdint>
#include <vector>

#include "../lora.h"
#include "buffer.h"
#include "op_args.h"

namespace lp {

// One operation applied to every row t of a batch (see the file comment).
// y is the output, also the in-place operand; x an input row.
struct row_op {
    enum class kind : uint8_t {
        rms_norm,    // y = x / rms(x) * w, over each of `groups` groups of n elements (w may be null); y may be x
        layer_norm,  // y = (x - mean) / sd * w + b over n elements (w, b may be null)
        add,         // y += x                          (n elements)
        mul,         // y *= x
        scale,       // y *= f
        softcap,     // y = tanh(y / f) * f
        gelu_mul,    // y = gelu(y) * x                 (x null: no gate)
        silu_mul,    // y = silu(y) * x                 (x null: no gate)
        gelu_quick_mul,  // y = quick_gelu(y) * x       (x null: no gate; CLIP)
        rope,        // rotate the first a dims of each of `groups` heads (n apart) of y; x: the row's cos/sin table
        hadamard,    // y = y · H in blocks of a (a power of two dividing n)
        copy,        // y = x; with groups > 1: n elements of each group g, from x + g * x_group to y + g * y_group
        kv_store,    // row x (n elements) stored as `type` into row cells[t] of the cache `dst`
        weighted_sum,  // y = sum over g < groups of w[t * groups + g] * (x + g * n)   (mixture-of-experts outputs)
        swiglu_oai,  // y = g * sigmoid(f2 * g) * (u + 1), g = min(y, f), u = clamp(x, -f, f)   (gpt-oss)
        sigmoid_mul,   // y = y * sigmoid(x); x null: y = sigmoid(y)   (gated attention, delta-net beta)
        softplus_mul,  // y = softplus(y + b) * w   (delta-net decay: b the dt bias, w the negative A)
        scale_by,      // y *= x[0]: one scalar per row   (a gated shared expert)
    };
    kind k = kind::copy;
    float* y = nullptr;
    int64_t y_stride = 0;
    const float* x = nullptr;
    int64_t x_stride = 0;
    const float* w = nullptr;  // norm weight; weighted_sum: the rows' weights (groups per row)
    const float* b = nullptr;  // norm bias
    int64_t n = 0;             // elements (per group for rms_norm, per head for rope)
    int64_t groups = 1;
    int64_t x_group = 0, y_group = 0;  // copy: distance between groups in x and in y (floats)
    float f = 0.0f;            // eps, scale factor or cap; swiglu_oai: the limit
    float f2 = 0.0f;           // swiglu_oai: alpha
    int a = 0;                 // rope: rotated dims; hadamard: block size
    rope_style style = rope_style::normal;
    // kv_store
    uint8_t* dst = nullptr;    // (n_cells, dst_row_bytes) one layer's keys or values
    size_t dst_row_bytes = 0;
    ggml_type type = ggml_type::F32;
    const int32_t* cells = nullptr;  // (n) cache cell of each row
};

// The LoRA terms of one matmul and work rows for them: A x (n, max rank) and
// B (A x) (n, widest adapted output).
struct lora_work {
    const std::vector<lora_set::term>* terms = nullptr;  // null: no adapter on this matrix
    float* ax = nullptr;
    float* bax = nullptr;
};

class backend {
public:
    virtual ~backend() = default;
    virtual device dev() const = 0;
    virtual const char* name() const = 0;

    // y (n, w.n_rows) = x (n, w.n_cols) · wᵀ, plus scale · B (A x) for each
    // LoRA term. Row strides xs, ys floats.
    virtual void matmul(const weight_view& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t n,
                        const lora_work& lora) = 0;
    // Embedding lookup: y row t = row ids[t] of table (any readable type) as floats.
    virtual void get_rows(const weight_view& table, const int32_t* ids, float* y, int64_t ys, int64_t n) = 0;
    // In place: row i of data becomes row idx[i] (idx ascending, idx[i] >= i), i < n.
    virtual void gather_rows(float* data, int64_t stride, int64_t n_cols, const int32_t* idx, int64_t n) = 0;
    // RoPE tables: out row t (n_rot floats) = the cos/sin pairs of position
    // pos[t]; for M-RoPE (p.mrope()) of the positions pos[t + k * pos_stride],
    // k = 0..3 (section-major, as llama_batch holds them).
    virtual void rope_table(const rope_params& p, const int32_t* pos, int64_t pos_stride, float* out, int64_t n) = 0;
    // Mixture of experts: the chosen experts and their weights of a.n_tok
    // rows from the router's logits (op_args.h moe_route_args).
    virtual void moe_route(const moe_route_args& a) = 0;
    // The expert products of n_slots (token, expert) slots: y row s =
    // x row (s / x_div) · (expert ids[s] of w)ᵀ, plus bias row ids[s] when
    // bias is given ((n_expert, w.rows()) floats). x_div = k when x holds one
    // row per token (gate and up: every slot of a token reads its row), 1
    // when it holds one per slot (down). Row strides xs, ys floats. Only the
    // chosen experts' rows are read; a backend groups the slots by expert so
    // each expert's rows meet all of its tokens in one product.
    virtual void moe_matmul(const experts_view& w, const float* x, int64_t xs, int x_div, const int32_t* ids,
                            int64_t n_slots, float* y, int64_t ys, const float* bias) = 0;
    // Attention of a.n_tok query rows over a layer's cached keys and values.
    virtual void attention(const attention_args& a) = 0;
    // Recurrent layers (op_args.h): the short causal convolution and the
    // gated delta rule, each advancing its rows' per-sequence state.
    virtual void ssm_conv(const ssm_conv_args& a) = 0;
    virtual void gated_delta(const gated_delta_args& a) = 0;
    virtual void ssm_scan(const ssm_scan_args& a) = 0;
    // ops[0..n_ops) over rows [0, n) (see the file comment).
    virtual void run_rows(const row_op* ops, int n_ops, int64_t n) = 0;
    // Bytes of work memory the backend holds for a context (quantized
    // activations, attention scratch).
    virtual size_t scratch_bytes() const = 0;
    // A backend may defer its work (a GPU records dispatches): sync() runs
    // everything called so far and makes its results visible in host memory;
    // discard() drops what was not run (after an error). No-ops on the CPU,
    // which runs each call before it returns.
    virtual void sync() {}
    virtual void discard() {}
    // A backend on another device keeps copies of the weights it reads,
    // keyed by their address: forget_weights drops the copy of the matrix at
    // `data` before it is unmapped (a LoRA adapter being replaced), so a file
    // mapped later at the same address is not taken for it.
    virtual void forget_weights(const void* data) { (void)data; }
};

}  // namespace lp
