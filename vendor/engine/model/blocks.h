// blocks.h — the building blocks every forward pass is made of, written once
// against the backend seam (backend/backend.h): the activation memory of a
// context (run_state), one pass's op stream (pass: queues row ops so the
// backend can fuse them, names intermediates for the tensor-dump hook), and
// the blocks: input embeddings, q/k/v projections, attention over a KV cache
// or over the batch itself, the output projection, the FFN and the output
// head. decoder.cpp and encoder.cpp arrange them; the block_variant of the
// model (model.h) picks among their variants.
//
// Intermediates carry llama.cpp's graph names ("attn_norm-3", "Qcur-3",
// "kqv_out-3", "l_out-3", "result_output", ...) so dumps can be diffed
// against llama.cpp's eval callback.
// Not here: choosing micro-batches and cache cells (context.cpp), kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_set>
#include <vector>

#include "../backend/backend.h"
#include "../kv_cache.h"
#include "../imatrix.h"
#include "../lora.h"
#include "model.h"

namespace lp {

class recurrent_state;

// One micro-batch, ready to run: every row has its cache cell, and the masks
// of run_state are built for it.
struct ubatch {
    int64_t n_tok = 0;
    const int32_t* tokens = nullptr;  // (n_tok) token ids, or null when embd is given
    const float* embd = nullptr;      // (n_tok, n_embd) input embeddings, or null
    const int32_t* pos = nullptr;     // (n_tok) positions (M-RoPE: the temporal ones)
    // M-RoPE models: component k of row t is pos[t + k * pos_stride] (k = 0..3:
    // temporal, height, width, extra); 0 for other models.
    int64_t pos_stride = 0;
    const int32_t* cells = nullptr;   // (n_tok) KV cache cell of each row
    const int32_t* cells_swa = nullptr;  // (n_tok) cell in the window cache, when there is one
    const int32_t* out_rows = nullptr;  // (n_out) ascending rows whose logits / embeddings are wanted
    int64_t n_out = 0;
    // Models with recurrent layers: the per-sequence states the rows advance,
    // and each row's sequence (its state slot).
    recurrent_state* rstate = nullptr;
    const int32_t* seq = nullptr;     // (n_tok)
};

// All activation memory of a context, allocated once for n_ubatch rows on
// the device that computes (the masks and RoPE tables are host inputs).
struct run_state {
    run_state(const hparams& hp, int64_t n_ubatch, int64_t n_cells, device where);

    int64_t n_ubatch;
    int64_t mask_words;            // 64-bit words per mask row: ceil(n_cells / 64)
    device_buffer x;               // (n_ubatch, n_embd) residual stream
    device_buffer xb;              // (n_ubatch, n_embd) normalised input of a sub-block
    device_buffer xb2;             // (n_ubatch, n_embd) output of a sub-block
    device_buffer qkv;             // (n_ubatch, n_q + n_k + n_v) queries | keys | values
    device_buffer att;             // (n_ubatch, n_head * head_dim_v) attention output
    device_buffer ffn;             // (n_ubatch, hp.ffn_width()) gate | up
    // Mixture-of-experts layers (empty for a dense model): the router's
    // logits, the chosen experts and their weights, the experts' gate | up
    // rows and output rows of every (token, expert) slot.
    device_buffer moe_logits;      // (n_ubatch, n_expert)
    device_buffer moe_ids;         // (n_ubatch, n_expert_used) int32
    device_buffer moe_weights;     // (n_ubatch, n_expert_used)
    device_buffer moe_ffn;         // (n_ubatch * n_expert_used, 2 * n_ff_exp) gate | up
    device_buffer moe_out;         // (n_ubatch * n_expert_used, n_embd)
    // Multi-head latent attention (empty otherwise): q before absorption,
    // q's low-rank input, the heads' outputs after attn_v_b, and the head
    // index of every (token, head) slot (the per-head products' "experts").
    device_buffer mla_q;           // (n_ubatch, n_head * head_k)
    device_buffer mla_qa;          // (n_ubatch, q_lora)
    device_buffer mla_out;         // (n_ubatch, n_head * head_v)
    device_buffer mla_qcur;        // (n_ubatch, n_head * head_dim_k) absorbed queries | their RoPE part
    device_buffer mla_heads;       // (n_ubatch * n_head) int32: 0, 1, .., n_head-1, 0, 1, ..
    // Gated attention (block_variant::attn_gate): the q projection's q | gate
    // per head, and the gates gathered.
    device_buffer q_full;          // (n_ubatch, 2 * n_q)
    device_buffer attn_gate;       // (n_ubatch, n_q)
    // Gated delta-net layers (hparams::recurrent; empty otherwise).
    device_buffer dn_in;           // (n_ubatch, in_dim) q | k | v before the convolution (short conv: B | C | x)
    device_buffer dn_conv;         // (n_ubatch, conv_dim) after it (and SiLU, the L2 norms)
    device_buffer dn_z;            // (n_ubatch, value_dim) the output gate
    device_buffer dn_gb;           // (n_ubatch, 2 * n_head_v) decay (log) | write strength
    device_buffer dn_out;          // (n_ubatch, value_dim)
    device_buffer shexp_gate;      // (n_ubatch, 1) a gated shared expert's gate
    device_buffer moe_sum;         // (n_ubatch, n_embd) block_variant::moe_beside_dense: the router's input, then the experts' sum
    // Gemma 4's per-layer inputs (empty otherwise): the token table's rows,
    // then every layer's input (projection + rows), n_embd_per_layer a layer;
    // the ids of the table's row 0, which rows given as embeddings take.
    device_buffer ple;             // (n_ubatch, n_layer * n_embd_per_layer)
    device_buffer ple_proj;        // (n_ubatch, n_layer * n_embd_per_layer)
    std::vector<int32_t> ple_zero_ids;  // (n_ubatch) zeros
    std::vector<float> rope_cs[2];      // (n_ubatch, n_rot) cos/sin pairs: [0] global layers, [1] sliding-window layers
    std::vector<uint64_t> mask[2];      // (n_ubatch, mask_words) visible cells: [0] global, [1] sliding window
    std::vector<int32_t> mask_lo[2];    // (n_ubatch) first visible cell
    std::vector<int32_t> mask_hi[2];    // (n_ubatch) one past the last visible cell
    // Active LoRA adapters (null: none) and their work rows: A x (n_ubatch,
    // max rank) and B (A x) (n_ubatch, widest adapted output).
    const lora_set* loras = nullptr;
    device_buffer lora_ax, lora_bax;
    // The importance-matrix hook (imatrix.h), null unless switched on: every
    // product's input is handed to it first.
    imatrix_collector* imatrix = nullptr;

    size_t bytes() const;  // all of the above
    // Bytes of the activation buffers (x .. ffn) the constructor allocates
    // for n_ubatch rows: what a placement plan counts before allocating.
    static size_t activation_bytes(const hparams& hp, int64_t n_ubatch);
};

// A named intermediate as the tensor-dump hook receives it: n_rows rows of
// n_cols floats in host memory, row r at data + r * stride.
struct tensor_dump {
    const char* name;  // "attn_norm-3", "result_output"
    int64_t n_rows, n_cols;
    const float* data;
    int64_t stride;
};
using tensor_callback = std::function<void(const tensor_dump&)>;

// Rows of an activation: row t at p + t * s floats.
struct rows {
    float* p;
    int64_t s;
    rows at(int64_t col) const { return {p + col, s}; }
};

// One forward pass's op stream on a backend, over n rows. Row ops are queued
// and handed to the backend together at the next whole-batch op (or flush),
// so consecutive row ops run fused. tap() names an intermediate: with no
// callback it costs one null check; with one it first runs what is queued
// (and waits for a deferring backend: the callback reads host memory).
// With a placement (set_parts), part(i) moves the stream to the backend of
// part i (0 input, 1 + il layer il, n_layer + 1 output): what the previous
// backend deferred runs first, so the next one finds the activations
// written. finish() ends the pass: everything has run.
class pass {
public:
    pass(backend& be, run_state& rs, const tensor_callback* cb, int64_t n_rows)
        : be_(&be), rs_(rs), cb_(cb && *cb ? cb : nullptr), n_(n_rows) {}

    int64_t n() const { return n_; }
    void set_n(int64_t n) { flush(); n_ = n; }
    run_state& state() { return rs_; }  // the activation buffers the blocks use
    void flush();
    void finish();
    // parts: the backend of each part (null: one backend throughout).
    void set_parts(const std::vector<backend*>* parts) { parts_ = parts; }
    void part(size_t i);
    // The backend that stores into and attends over the KV cache when it is
    // not the part's own (offload_kqv=False: the cache and its attention stay
    // on the CPU while the layer runs on a GPU); null: the part's.
    // enter_kv() moves the stream there (what was queued runs first),
    // leave_kv() back to the part's backend.
    void set_kv_backend(backend* be) { kv_be_ = be; }
    // Weights (by their data) kept in host memory although their part runs
    // on another backend: a product with one runs on `host` (what the part's
    // backend deferred runs first; the activations are in mapped memory both
    // read). Null: none.
    void set_host_weights(const std::unordered_set<const void*>* w, backend* host) {
        host_w_ = w;
        host_be_ = host;
    }
    void enter_kv();
    void leave_kv();

    // Row ops (n: elements per row).
    void norm(norm_kind k, rows y, rows x, const std::vector<float>& w, const std::vector<float>& b, int64_t n, float eps);
    void head_norm(rows y, int64_t n_head, int64_t head_dim, const std::vector<float>& w, float eps);  // RMS per head
    void add(rows y, rows x, int64_t n);
    void mul(rows y, rows x, int64_t n);
    void add_bias(rows y, const std::vector<float>& b);  // nothing when b is empty
    void scale(rows y, int64_t n, float f);
    void softcap(rows y, int64_t n, float cap);
    void act_mul(ffn_act act, rows g, const float* up, int64_t up_stride, int64_t n);  // up null: no gate
    void swiglu_oai(rows g, const float* up, int64_t up_stride, int64_t n, float alpha, float limit);
    // y *= sigmoid(x) (x.p null: y = sigmoid(y)); y = softplus(y + b) * w; y *= x[0].
    void sigmoid_mul(rows y, rows x, int64_t n);
    void softplus_mul(rows y, const std::vector<float>& b, const std::vector<float>& w, int64_t n);
    void scale_by(rows y, rows x, int64_t n);
    void rope(rows y, int64_t n_head, int64_t head_dim, const rope_params& rp, const float* cos_sin);
    void hadamard(rows y, int64_t n, int block);
    void copy(rows y, rows x, int64_t n);
    // n elements of each of `groups` groups: from x + g * x_group to y + g * y_group.
    void copy_groups(rows y, int64_t y_group, rows x, int64_t x_group, int64_t n, int64_t groups);
    void kv_store(uint8_t* cache, size_t row_bytes, ggml_type type, rows x, int64_t n, const int32_t* cells);

    // Whole-batch ops.
    void matmul(const weight_view& w, rows x, rows y);  // with the LoRA terms of w, if any
    void get_rows(const weight_view& table, const int32_t* ids, rows y);
    void gather_rows(rows data, int64_t n_cols, const int32_t* idx, int64_t n_keep);
    // pos_stride: distance between a row's M-RoPE components (backend.h), 0 otherwise.
    void rope_table(const rope_params& rp, const int32_t* pos, int64_t pos_stride, float* out);
    void attention(const attention_args& a);
    // Recurrent layers (backend.h): n_tok is the pass's row count.
    void ssm_conv(ssm_conv_args a);
    void gated_delta(gated_delta_args a);
    void ssm_scan(ssm_scan_args a);
    // Mixture of experts (backend.h): routing of the pass's rows, expert
    // products over n_slots slots, and y = the weighted sum of each row's
    // `groups` slot rows of x (n elements each, x row t at x + t * groups * n).
    void moe_route(const moe_route_args& a);
    void moe_matmul(const experts_view& w, rows x, int x_div, const int32_t* ids, int64_t n_slots, rows y,
                    const std::vector<float>& bias);
    void weighted_sum(rows y, const float* x, const float* weights, int groups, int64_t n);
    // Runs fn with the pass over n rows (row ops over every expert slot), then back.
    template <class F> void over_rows(int64_t n, const F& fn) {
        const int64_t keep = n_;
        set_n(n);
        fn();
        set_n(keep);
    }

    // Hands rows (n, n_cols) of an intermediate to the tensor callback as
    // "<name>-<il>" (il < 0: "<name>").
    void tap(const char* name, int il, rows r, int64_t n_cols) {
        if (cb_) emit(name, il, r, n_cols);
    }

private:
    static constexpr int kMaxOps = 24;
    void queue(const row_op& op) {
        if (n_ops_ == kMaxOps) flush();
        ops_[n_ops_++] = op;
    }
    void emit(const char* name, int il, rows r, int64_t n_cols);

    backend* be_;
    const std::vector<backend*>* parts_ = nullptr;
    backend* kv_be_ = nullptr;
    backend* away_ = nullptr;  // the part's backend while the stream is on kv_be_
    const std::unordered_set<const void*>* host_w_ = nullptr;
    backend* host_be_ = nullptr;
    // The backend a product with weights at `data` runs on (finishing the
    // current one first when that is another).
    backend& for_weights(const void* data);
    run_state& rs_;  // LoRA work rows
    const tensor_callback* cb_;
    int64_t n_;
    row_op ops_[kMaxOps];
    int n_ops_ = 0;
};

// Keys and values the attention reads: a layer of a KV cache, or (encoders)
// the batch's own F32 keys and values.
struct kv_source {
    ggml_type type_k = ggml_type::F32, type_v = ggml_type::F32;
    const uint8_t* k = nullptr;
    size_t k_row_bytes = 0;
    const uint8_t* v = nullptr;
    size_t v_row_bytes = 0;
    const int32_t* cell_pos = nullptr;  // (n_cells) or null: cells in index order
};

// ---- blocks ----

// x = the rows' token embeddings (times embd_scale) or the given embeddings
// (times embd_scale only with embd_scale_inputs).  [inp_embd, inp_scaled]
void decoder_input(pass& p, const model& m, const ubatch& ub, rows x);
// x = token + token-type + position embeddings, layer-normed (bert); tmp: (n, n_embd) work rows.  [inp_embd, inp_norm-0]
void encoder_input(pass& p, const model& m, const ubatch& ub, rows x, rows tmp);
// qkv = q | k | v of the rows `in`: projections, biases, q/k norms (per head, or whole rows),
// RoPE (cos_sin: the rows' tables, null: none), q scaled when the model
// scales it before attention.  [Qcur, Kcur, Vcur]
void qkv_block(pass& p, const hparams& hp, const layer_weights& L, int il, rows in, rows qkv, const float* cos_sin);
// The attention arguments of n query rows of qkv against kv, with the
// masks of run_state slot `mask` (0 global, 1 sliding window).
attention_args attention_setup(const hparams& hp, const run_state& rs, int mask, rows qkv, rows out, int64_t n,
                               const kv_source& kv);
// Stores the batch's keys and values in layer il of kv (rotated first when
// the cache rotates) and attends over the cache: out = attention output,
// rotated back.  [kqv_out]
// sinks: the layer's attention sinks (block_variant::attn_sinks), or empty.
void cached_attention(pass& p, const hparams& hp, kv_cache& kv, int il, const int32_t* cells, const run_state& rs,
                      int mask, rows qkv, rows out, const std::vector<float>& sinks = {});
// Multi-head latent attention (model.h mla_hparams) of the rows `in`: q and
// the latent, RoPE on their last n_rot elements, the latent | RoPE row
// stored in layer il of kv (values in keys), absorbed queries attending over
// it, each head's output through attn_v_b: out (n, n_head * head_v) is
// attn_output's input. qkv: work rows whose n_q .. n_q + n_embd_k columns take the cache row.
// [q, kv_cmpr, Qcur, Kcur, kqv_out]
void mla_attention(pass& p, const hparams& hp, const layer_weights& L, int il, kv_cache& kv, const int32_t* cells,
                   run_state& rs, int mask, rows in, rows qkv, rows att, const float* cos_sin, rows out);
// A gated delta-net layer (Qwen3.5's linear attention; model/delta_net.cpp)
// of the rows `in`, advancing each row's sequence state in ub.rstate:
// projections, the short causal convolution + SiLU, L2-normed q and k, the
// gated delta rule, the gated RMS norm, the output projection into out.
// [linear_attn_qkv_mixed, z, conv_output_silu, attn_output, final_output, linear_attn_out]
void delta_net_block(pass& p, const hparams& hp, const layer_weights& L, int il, const ubatch& ub, rows in, rows out);
// A gated short-convolution layer (LFM2; model/short_conv.cpp) of the rows
// `in`, advancing each row's convolution tail in ub.rstate:
// B | C | x = in_proj · in, y = C * conv(B * x), out = out_proj · y.
// [shortconv_in_proj, shortconv_conv, shortconv_out_proj]
void short_conv_block(pass& p, const hparams& hp, const layer_weights& L, int il, const ubatch& ub, rows in, rows out);
// A Mamba-2 layer (Granite 4.0-H; model/mamba2.cpp) of the rows `in`,
// advancing each row's convolution tail and scan state in ub.rstate:
// z | xBC | dt = in_proj · in, xBC = silu(conv(xBC) + b), y = scan(x, dt, B, C)
// + D x, out = out_proj · (grouped rms_norm(y * silu(z)) * w).
// [mamba2_in_proj, mamba2_conv, mamba2_y_add_d, mamba2_out_norm, mamba2_out]
void mamba2_block(pass& p, const hparams& hp, const layer_weights& L, int il, const ubatch& ub, rows in, rows out);
// out = wo · att + bo.  [attn_out]
void attn_output(pass& p, const hparams& hp, const layer_weights& L, int il, rows att, rows out);
// out = down(act(gate) * up) (+ biases), or down(act(up)) without a gate;
// ffn: (n, 2 n_ff) work rows.  [ffn_out]
void ffn_block(pass& p, const hparams& hp, const layer_weights& L, int il, rows in, rows ffn, rows out);
// A mixture-of-experts FFN (layer_weights::moe()): route, the chosen experts'
// gated FFNs, their weighted sum, plus the shared expert. router_in: the rows
// the router reads when they are not `in` (read before out is written).
// [ffn_moe_logits, ffn_moe_out, ffn_shexp_out, ffn_out]
void moe_ffn_block(pass& p, const hparams& hp, const layer_weights& L, int il, rows in, run_state& rs, rows out,
                   const rows* router_in = nullptr);
// Gemma 4's FFN of a layer with experts (block_variant::moe_beside_dense):
// out = post_norm_1(dense FFN of xb) + post_norm_2(experts of pre_norm_2(x)),
// routed on rms_norm(x) / sqrt(n_embd) * ffn_gate_inp.scale, each chosen
// expert's weight times its ffn_down_exps.scale. xb: ffn_norm(x) on entry,
// then work rows; lh: the layer's shape (its dense FFN width).
// [ffn_mlp, ffn_norm_2, ffn_moe_logits, ffn_moe_out, ffn_moe, ffn_moe_combined]
void dense_and_moe_ffn_block(pass& p, const hparams& hp, const hparams& lh, const layer_weights& L, int il, rows x,
                             rows xb, run_state& rs, rows out);
// Gemma 4's per-layer inputs of the rows (hparams::n_embd_per_layer = P > 0):
// ((x · per_layer_model_proj) / sqrt(n_embd), RMS-normed per layer, plus the
// token table's rows times sqrt(P)) / sqrt(2) into rs.ple_proj (n, n_layer * P),
// layer il's at column il * P. Rows given as embeddings take the table's row
// 0 (llama.cpp: its padding token).  [inp_per_layer_selected, per_layer_proj, inp_per_layer]
void per_layer_inputs(pass& p, const model& m, const ubatch& ub, rows x, run_state& rs);
// Gemma 4's per-layer embedding after layer il's FFN: x += RMS-norm(proj ·
// (GELU(inp_gate · x) * the layer's input, column il * P of inp)); gate:
// (n, P) work rows, out: (n, n_embd) work rows.  [pe_in, per_layer_embd_out]
void per_layer_embedding(pass& p, const hparams& hp, const layer_weights& L, int il, rows x, rows inp, rows gate,
                         rows out);
// logits (n, n_vocab) of final normalised states h, divided by logit_scale and
// soft-capped where the model asks.  [result_output]
void output_head(pass& p, const model& m, rows h, float* logits);

}  // namespace lp
