// model.h — a decoder-only language model loaded from a GGUF file: its
// hyperparameters (read from metadata, never guessed from file names), its
// weights (zero-copy views into the mapped file, small vectors copied to
// float) and the table of supported architectures.
//
// An architecture is one file under model/ (llama.cpp, gemma3.cpp, ...) that
// fills the architecture-specific hyperparameters and the block_variant: the
// switches by which its decoder block differs from the plain pre-norm
// transformer. The weights are then named and validated here, and the one
// forward pass in decoder.cpp runs every architecture. Encoder architectures
// (bert, nomic-bert: block_variant::encoder) run encoder.cpp instead.
//
// Not here: running the model (context.h, decoder.h), the tokenizer (vocab/).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cpu/matmul.h"
#include "../cpu/ops.h"
#include "../gguf/gguf.h"

namespace lp {

// The file asks for something this engine does not implement (an unknown
// architecture, a rope scaling type). The bindings raise NotImplementedError.
struct not_implemented_error : std::logic_error {
    using std::logic_error::logic_error;
};

enum class norm_kind { rms, layer };
// gelu_quick: CLIP vision towers; swiglu_oai: gpt-oss's clamped SwiGLU
// (moe_hparams swiglu_alpha / swiglu_limit), its experts only
enum class ffn_act { silu, gelu, gelu_quick, swiglu_oai };

// How an architecture's decoder block differs from the pre-norm transformer
// (norm -> attention -> residual, norm -> gated FFN -> residual).
struct block_variant {
    norm_kind norm = norm_kind::rms;
    ffn_act act = ffn_act::silu;   // gated FFN: act(gate) * up
    bool qkv_bias = false;         // attn_q/k/v.bias present (qwen2)
    bool qkv_fused = false;        // one attn_qkv matrix (phi3)
    bool gate_up_fused = false;    // ffn_up holds gate then up (phi3)
    bool qk_norm = false;          // per-head RMS norm of q and k before RoPE (qwen3, gemma3)
    bool qk_norm_optional = false; // the same where the file has the norms (glm4moe)
    bool qk_norm_full = false;     // RMS norm of the whole q row and the whole k row, before RoPE (olmo2)
    bool pre_norm = true;          // a norm of each sub-block's input (olmo2 has none: its input is the residual itself)
    bool post_attn_norm = false;   // norm of the attention output before the residual add (gemma2/3)
    bool post_ffn_norm = false;    // likewise for the FFN output
    bool scale_q = false;          // multiply q by attn_scale before attention instead of scaling scores (gemma)
    float embd_scale = 1.0f;       // token embeddings are multiplied by this (gemma: sqrt(n_embd))
    bool embd_scale_inputs = false;  // embd_scale also applies to embeddings given as input (granite)
    bool encoder = false;          // bidirectional post-norm encoder (bert family): encoder.h runs it
    bool attn_sinks = false;       // a learned softmax sink per head (attn_sinks.weight; gpt-oss)
    // Gemma 4: each value head RMS-normed (no weight) before the cache; a
    // layer without attn_v takes its keys' projection (before their norm)
    // as its values (attention_k_eq_v).
    bool v_norm = false;
    bool v_from_k = false;
    // The architecture reads per-layer head_count_kv / feed_forward_length
    // arrays (hparams::shapes); files of others that have them are refused.
    bool layer_shapes = false;
    // The q projection also yields an output gate: per head head_dim q values
    // then head_dim gate values (attn_q has 2 n_q rows); the attention output
    // is multiplied by sigmoid(gate) before attn_output (qwen35).
    bool attn_gate = false;
    // Gemma 4 26B-A4B: a layer with a router runs its dense FFN and a mixture
    // of experts side by side, each with its own norms, and adds the two
    // (blocks.h dense_and_moe_ffn_block); the router reads the RMS-normed
    // residual times ffn_gate_inp.scale / sqrt(n_embd).
    bool moe_beside_dense = false;
    // The FFN's input norm tensor, "blk.N.<ffn_norm_tensor>.weight" (gpt-oss
    // stores it as post_attention_norm).
    const char* ffn_norm_tensor = "ffn_norm";
    // The final norm tensor, "<output_norm_tensor>.weight" (LFM2's converter
    // names it token_embd_norm).
    const char* output_norm_tensor = "output_norm";
};

// Mixture of experts (llama.cpp's build_moe_ffn): the FFN of a layer with a
// router (ffn_gate_inp) is n_expert gated FFNs of width n_ff_exp, of which
// each token runs the n_expert_used its router picks (op_args.h
// moe_route_args: gating, norm_w, w_scale, groups), weighted and summed,
// plus the shared expert(s) every token runs when the file has them.
struct moe_hparams {
    int64_t n_expert = 0;         // expert_count (0: a dense model)
    int64_t n_expert_used = 0;    // expert_used_count: experts per token
    int64_t n_ff_exp = 0;         // rows of one expert's gate and up (expert_feed_forward_length)
    int64_t n_ff_shexp = 0;       // width of the shared expert FFN (0: none)
    int64_t n_layer_dense_lead = 0;  // the first layers have a dense FFN (leading_dense_block_count)
    moe_gating gating = moe_gating::softmax;
    bool norm_w = false;          // weights divided by their sum
    float w_scale = 0.0f;         // expert_weights_scale (0 or 1: none)
    int n_group = 0, n_group_used = 0;  // group-limited routing (expert_group_count, expert_group_used_count)
    bool gate_optional = false;   // experts without ffn_gate_exps run act(up) (llama); else it is required
    bool probs_bias_required = false;  // exp_probs_b must be there (lfm2moe, as llama.cpp requires); else optional
    ffn_act act = ffn_act::silu;  // the experts' activation (the shared expert uses block_variant::act)
    float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;  // ffn_act::swiglu_oai
};

// Multi-head latent attention (DeepSeek V2/V3, kv_lora > 0): keys and values
// come from one compressed latent of kv_lora elements per token (normed)
// plus n_rot RoPE elements shared by all heads; the cache holds only that
// (n_head_kv 1, head_dim_k = kv_lora + n_rot, values = the keys' first
// kv_lora elements: kv_cache values_in_keys). Queries are absorbed: each
// head's no-RoPE part times attn_k_b becomes kv_lora wide, so attention
// runs over the latent directly; its output goes through attn_v_b per head
// (kv_lora -> head_v) before attn_output.
struct mla_hparams {
    int64_t q_lora = 0;    // attention.q_lora_rank (0: one q projection, V2-Lite)
    int64_t kv_lora = 0;   // attention.kv_lora_rank
    int64_t head_k = 0;    // attention.key_length_mla: q's no-RoPE + RoPE part of one head
    int64_t head_v = 0;    // attention.value_length_mla: a head's output after attn_v_b
};

// Recurrent layers: Qwen3.5's gated delta-net (llama.cpp's ssm.* keys),
// LFM2's gated short convolution (shortconv.l_cache) or Granite 4.0-H's
// Mamba-2 (ssm.* keys). A layer flagged in hparams::recurrent runs its kind's
// block (model/delta_net.cpp, model/short_conv.cpp, model/mamba2.cpp) instead
// of attention, and keeps a per-sequence state (recurrent_state.h) instead of
// KV cells: the convolution's last d_conv - 1 inputs of each channel and
// (delta-net) one (d_state × d_state) matrix per value head or (Mamba-2) one
// (head_dim × d_state) matrix per head.
enum class ssm_kind { delta_net, short_conv, mamba2 };
struct ssm_hparams {
    ssm_kind kind = ssm_kind::delta_net;
    int64_t d_conv = 0;    // ssm.conv_kernel / shortconv.l_cache: the convolution's taps
    int64_t d_state = 0;   // ssm.state_size: the head size of q, k and v (Mamba-2: of B and C)
    int64_t n_head_k = 0;  // ssm.group_count: q / k heads (Mamba-2: B / C groups)
    int64_t n_head_v = 0;  // ssm.time_step_rank: v heads, a multiple of n_head_k (Mamba-2: heads)
    int64_t n_conv_ch = 0; // short_conv: the convolution's channels (n_embd)
    int64_t d_inner = 0;   // mamba2: ssm.inner_size, n_head_v heads of d_inner / n_head_v
    int64_t key_dim() const { return n_head_k * d_state; }
    // the heads' output width (the gate z, the scan's y)
    int64_t value_dim() const { return kind == ssm_kind::mamba2 ? d_inner : n_head_v * d_state; }
    // channels of the convolution: q | k | v (delta-net), B * x (short conv), x | B | C (Mamba-2)
    int64_t conv_dim() const {
        if (kind == ssm_kind::short_conv) return n_conv_ch;
        if (kind == ssm_kind::mamba2) return d_inner + 2 * key_dim();
        return 2 * key_dim() + value_dim();
    }
    // width of the input projection: the conv's input (delta-net), B | C | x (short conv), z | xBC | dt (Mamba-2)
    int64_t in_dim() const {
        if (kind == ssm_kind::short_conv) return 3 * n_conv_ch;
        if (kind == ssm_kind::mamba2) return d_inner + conv_dim() + n_head_v;
        return conv_dim();
    }
    // Floats of one sequence's state in one layer: the convolution tail and the delta-net matrices.
    int64_t conv_floats() const { return (d_conv - 1) * conv_dim(); }
    int64_t delta_floats() const {
        if (kind == ssm_kind::short_conv) return 0;
        if (kind == ssm_kind::mamba2) return d_inner * d_state;
        return n_head_v * d_state * d_state;
    }
};

// The shape of one layer, for models whose layers differ (Gemma 4:
// sliding-window and global layers with their own head sizes, KV head counts
// and rotated dims; wider FFNs in its shared-KV layers).
struct layer_shape {
    int64_t n_head_kv = 0, head_dim_k = 0, head_dim_v = 0, n_ff = 0;
    int n_rot = 0;
};

struct hparams {
    std::string arch;            // general.architecture
    std::string name;            // general.name
    int64_t n_vocab = 0;         // rows of the output matrix
    int64_t n_ctx_train = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t n_ff = 0;
    int64_t head_dim_k = 0;      // attention.key_length
    int64_t head_dim_v = 0;      // attention.value_length
    float norm_eps = 1e-5f;
    // RoPE of the global (full attention) layers, and of the sliding-window ones
    rope_params rope;            // freq_factors filled from the weights
    float rope_freq_base_swa = 0.0f;   // 0: same as rope.freq_base
    float rope_freq_scale_swa = 0.0f;  // 0: same as rope.freq_scale
    int32_t n_swa = 0;           // sliding window in tokens (0: none)
    std::vector<uint8_t> swa_layers;  // (n_layer) 1 where the layer uses the sliding window
    float attn_scale = 0.0f;     // scale of q·k (default 1/sqrt(head_dim_k))
    float attn_softcap = 0.0f;   // gemma2: scores = tanh(s / cap) * cap
    float final_softcap = 0.0f;  // gemma2: logits = tanh(l / cap) * cap
    float residual_scale = 0.0f; // granite: each sub-block's output times this before the residual add (0: none)
    float logit_scale = 0.0f;    // granite: logits divided by this (0: none)
    // Layers whose q and k get no RoPE ("NoPE": smollm3's every 4th, granite
    // with rope.scaling.finetuned false): (n_layer) 1 for such a layer; empty: none.
    std::vector<uint8_t> nope_layers;
    // Sliding-window layers rotate with the global layers' base but without
    // frequency scaling or YaRN (olmo2 with a window, i.e. OLMo 3).
    bool swa_rope_plain = false;
    bool causal = true;          // attention.causal (encoders: false, every token sees its whole sequence)
    int32_t pooling = -1;        // pooling_type as llama.cpp numbers it (-1: not in the file)
    int64_t n_pos_embd = 0;      // rows of learned absolute position embeddings (bert), 0: none
    // Image embeddings are decoded with causal attention off (the rows of one
    // image attend to each other both ways): llama.cpp's
    // mtmd_decode_use_non_causal, by the projector that goes with this text
    // model (Gemma 3's; of its list only Gemma 3 has a text side here).
    bool mm_non_causal = false;
    // Classifier head of rerankers (llama.cpp's pooling "rank"): scores per
    // sequence, one per classifier.output_labels entry (1 when the file has
    // none); softmax over them where the head is Qwen3-Reranker's yes / no
    // rows of the LM head (cls_softmax, set by the architecture).
    int64_t n_cls_out = 1;
    bool cls_softmax = false;
    // Per-layer shapes (n_layer), when layers differ; empty: every layer has
    // the values above. When set, the values above are the widest any layer
    // has (what buffers are sized for), and for_layer(il) is layer il's own.
    std::vector<layer_shape> shapes;
    // The layer whose KV cache each layer attends over (n_layer): itself, or
    // an earlier layer of the same kind whose cached keys and values it reads
    // without storing any (Gemma 4's shared KV layers, llama.cpp's layer
    // reuse). Empty: every layer has its own.
    std::vector<int32_t> kv_layer;
    int rope_n_rot_swa = 0;      // rotated dims of sliding-window layers (0: rope.n_rot)
    // The file's rope_freqs belong to the global layers only (Gemma 4's
    // proportional RoPE); sliding-window layers rotate without them.
    bool rope_freqs_global = false;
    // Gemma 4's per-layer embeddings: n_embd_per_layer elements per layer and
    // token (0: none), from a token table and a projection of the input.
    int64_t n_embd_per_layer = 0;
    block_variant v;
    moe_hparams moe;
    mla_hparams mla;
    bool is_mla() const { return mla.kv_lora > 0; }
    ssm_hparams ssm;
    std::vector<uint8_t> recurrent;  // (n_layer) 1: a recurrent layer (ssm); empty: none
    bool is_recurrent(int64_t il) const { return !recurrent.empty() && recurrent[(size_t)il]; }
    int64_t n_recurrent() const {
        int64_t n = 0;
        for (uint8_t r : recurrent) n += r;
        return n;
    }

    // Positions per row: 4 for M-RoPE (rope.sections set; llama.cpp's
    // n_pos_per_embd), else 1.
    int n_pos_per_embd() const { return rope.mrope() ? 4 : 1; }
    bool has_rope(int64_t il) const { return nope_layers.empty() || !nope_layers[(size_t)il]; }

    int kv_layer_of(int64_t il) const { return kv_layer.empty() ? (int)il : kv_layer[(size_t)il]; }
    bool own_kv(int64_t il) const { return kv_layer_of(il) == (int)il; }
    // A copy with layer il's shape (its n_head_kv, head sizes, FFN width and
    // rotated dims); *this when the layers do not differ.
    hparams for_layer(int64_t il) const;
    // Elements of one token's keys / values that layer il stores in its
    // cache: 0 for a layer that reuses another's (kv_layer).
    int64_t kv_width_k(int64_t il) const;
    int64_t kv_width_v(int64_t il) const;
    // Layer il's head sizes (the same for every layer unless shapes is set).
    int64_t layer_head_dim_k(int64_t il) const { return shapes.empty() ? head_dim_k : shapes[(size_t)il].head_dim_k; }
    int64_t layer_head_dim_v(int64_t il) const { return shapes.empty() ? head_dim_v : shapes[(size_t)il].head_dim_v; }

    int64_t n_embd_k() const { return n_head_kv * head_dim_k; }  // keys of one token in one layer
    int64_t n_embd_v() const { return n_head_kv * head_dim_v; }
    int64_t n_q() const { return n_head * head_dim_k; }
    // Floats of the widest dense FFN row (gate | up): a dense layer's or the shared expert's.
    int64_t ffn_width() const { return 2 * std::max(n_ff, moe.n_ff_shexp); }
};

struct layer_weights {
    std::vector<float> attn_norm, attn_norm_b;  // (n_embd), empty without pre_norm; _b empty unless layer norm has a bias
    weight_view wq, wk, wv;       // (n_head*hd_k, n_embd), (n_head_kv*hd_k, n_embd), (n_head_kv*hd_v, n_embd)
    weight_view wqkv;             // (n_q + n_k + n_v, n_embd) when qkv_fused
    std::vector<float> bq, bk, bv;  // biases, empty unless qkv_bias
    std::vector<float> bqkv;      // (n_q + n_k + n_v) fused bias, may be empty
    weight_view wo;               // (n_embd, n_head*hd_v)
    std::vector<float> bo;        // (n_embd) or empty
    std::vector<float> q_norm, k_norm;  // (head_dim_k) when qk_norm; (n_q), (n_embd_k) when qk_norm_full
    std::vector<float> post_attn_norm;  // (n_embd) when post_attn_norm
    std::vector<float> attn_sinks;      // (n_head) when attn_sinks
    // multi-head latent attention (hparams::is_mla) in place of wq / wk / wv
    weight_view wq_a, wq_b;       // (q_lora, n_embd), (n_head * head_k, q_lora); or wq (n_head * head_k, n_embd)
    std::vector<float> q_a_norm;  // (q_lora)
    weight_view wkv_a;            // (kv_lora + n_rot, n_embd): latent | RoPE part
    std::vector<float> kv_a_norm; // (kv_lora)
    experts_view wk_b;            // n_head × (kv_lora, head_k - n_rot): a head's q absorption
    experts_view wv_b;            // n_head × (head_v, kv_lora): a head's output from the latent
    std::vector<float> ffn_norm, ffn_norm_b;  // (n_embd), empty without pre_norm
    weight_view ffn_gate;         // (n_ff, n_embd); absent when gate_up_fused
    weight_view ffn_up;           // (n_ff, n_embd), or (2*n_ff, n_embd) gate then up when gate_up_fused
    weight_view ffn_down;         // (n_embd, n_ff)
    std::vector<float> post_ffn_norm;  // (n_embd) when post_ffn_norm
    // encoder (post-norm) blocks: norms after each residual add, FFN biases
    std::vector<float> attn_out_norm, attn_out_norm_b;    // (n_embd)
    std::vector<float> layer_out_norm, layer_out_norm_b;  // (n_embd)
    std::vector<float> ffn_up_b, ffn_down_b;              // (n_ff), (n_embd) or empty (also decoders: granite)
    std::vector<float> ffn_gate_b;                        // (n_ff) or empty (Qwen2.5-VL's vision FFN, granite)
    // mixture of experts: a layer with a router runs these instead of ffn_gate / up / down
    weight_view ffn_gate_inp;     // (n_expert, n_embd) router
    std::vector<float> ffn_gate_inp_b;  // (n_expert) router bias, or empty
    std::vector<float> exp_probs_b;     // (n_expert) expert selection bias, or empty
    experts_view ffn_gate_exps;   // n_expert × (n_ff_exp, n_embd); absent: no gate (act(up)), or fused
    experts_view ffn_gate_up_exps;  // n_expert × (2 n_ff_exp, n_embd) gate then up, in place of the two (Gemma 4)
    experts_view ffn_up_exps;     // n_expert × (n_ff_exp, n_embd)
    experts_view ffn_down_exps;   // n_expert × (n_embd, n_ff_exp)
    std::vector<float> ffn_gate_exps_b, ffn_up_exps_b, ffn_down_exps_b;  // per-expert biases, or empty
    weight_view ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;  // the shared expert, or absent
    weight_view ffn_gate_inp_shexp;  // (1, n_embd) the shared expert's sigmoid gate, or absent
    // moe_beside_dense (Gemma 4): the router input's scale, each expert's
    // output scale, the experts' input norm and each branch's output norm
    std::vector<float> ffn_gate_inp_s;   // (n_embd) ffn_gate_inp.scale
    std::vector<float> ffn_down_exps_s;  // (n_expert) ffn_down_exps.scale
    std::vector<float> ffn_pre_norm_2, ffn_post_norm_1, ffn_post_norm_2;  // (n_embd)
    // gated delta-net (hparams::is_recurrent) in place of the attention weights;
    // a short-convolution layer has ssm_in, ssm_conv1d and ssm_out only
    weight_view ssm_in;           // (in_dim, n_embd) q | k | v before the convolution (attn_qkv); B | C | x (shortconv.in_proj)
    weight_view ssm_z;            // (value_dim, n_embd) the output gate (attn_gate)
    weight_view ssm_alpha, ssm_beta;  // (n_head_v, n_embd) decay and write-strength inputs
    std::vector<float> ssm_conv1d;  // (conv_dim, d_conv) the convolution kernel
    std::vector<float> ssm_dt;    // (n_head_v) decay bias
    std::vector<float> ssm_a;     // (n_head_v) -exp(A_log): the decay's scale
    std::vector<float> ssm_norm;  // (d_state) the gated output norm; Mamba-2: (d_inner), one norm per group
    std::vector<float> ssm_conv1d_b;  // (conv_dim) Mamba-2's convolution bias, or empty
    std::vector<float> ssm_d;     // (n_head_v) Mamba-2's skip weights
    weight_view ssm_out;          // (n_embd, value_dim); (n_embd, n_embd) shortconv.out_proj
    // Gemma 4
    float out_scale = 0.0f;       // layer_output_scale: the layer's output times this (0: none)
    weight_view ple_gate;         // (n_embd_per_layer, n_embd) inp_gate: the per-layer embedding's gate
    weight_view ple_proj;         // (n_embd, n_embd_per_layer) proj: back to the residual width
    std::vector<float> ple_norm;  // (n_embd) post_norm
    bool moe() const { return ffn_gate_inp.data != nullptr; }
};

struct model_weights {
    weight_view token_embd;       // (n_vocab, n_embd)
    std::vector<float> output_norm, output_norm_b;  // (n_embd)
    weight_view output;           // (n_vocab, n_embd); token_embd when the file ties them
    std::vector<float> rope_freqs;  // (n_rot/2) frequency divisors (llama3 scaling), or empty
    std::vector<float> rope_long, rope_short;  // (n_rot/2) divisors for long / short contexts (phi3), or empty
    std::vector<layer_weights> layers;  // (n_layer)
    // Gemma 4's per-layer embeddings (hparams::n_embd_per_layer > 0)
    weight_view per_layer_tok_embd;    // (n_vocab, n_layer * n_embd_per_layer) each token's rows for every layer
    weight_view per_layer_model_proj;  // (n_layer * n_embd_per_layer, n_embd) the same from the input embedding
    std::vector<float> per_layer_proj_norm;  // (n_embd_per_layer)
    // encoders
    weight_view position_embd;    // (n_pos_embd, n_embd) learned absolute positions, or absent
    std::vector<float> token_type0;  // (n_embd) row 0 of token_types ("sentence A"), or empty
    std::vector<float> token_embd_norm, token_embd_norm_b;  // (n_embd) norm of the summed input embeddings
    // classifier head (rerankers, model/classifier.h): the pooled state through
    // tanh(cls · x + cls_b) when cls is present, then cls_out · x + cls_out_b
    weight_view cls;              // (n_embd, n_embd) or absent
    std::vector<float> cls_b;     // (n_embd) or empty
    weight_view cls_out;          // (n_cls_out, n_embd) or absent: then the model is no reranker
    std::vector<float> cls_out_b; // (n_cls_out) or empty
    bool has_classifier() const { return cls_out.data != nullptr; }
};

// One supported architecture (model/<stem>.cpp, listed in archs.def): its
// GGUF name, the facts the loader applies before setup and that Python reads
// (_engine.architectures(): the memory planner, the chat-format guess), and
// the function that reads its specific hyperparameters and sets its block
// variant (after the common keys have been read into hp).
struct arch_def {
    const char* name;  // general.architecture
    void (*setup)(const gguf_file& f, hparams& hp);
    // Sliding-window layers: in every `swa_period` layers all but the last
    // attend to the file's attention.sliding_window, unless the file gives
    // attention.sliding_window_pattern (0: every layer); -1: the
    // architecture ignores a window its files declare (as llama.cpp does).
    int swa_period;
    bool encoder;             // a bidirectional encoder: embeddings, no output head
    // The named chat format (llamapy/chat/formats.py) of its models that
    // carry no chat template; "" for llama-cpp-python's fallback.
    const char* chat_format;
};

// The architectures this build runs, and the one named `name` (nullptr if none).
const std::vector<const arch_def*>& supported_archs();
const arch_def* find_arch(const std::string& name);

// The options of model::load (the binding's _engine.ModelParams).
struct model_params {
    bool vocab_only = false;  // read metadata only (for the tokenizer), no weights; any architecture is accepted
    bool use_mmap = true;     // false: read the file into anonymous memory up front (faster streaming)
    // Map in 2 MiB pages (huge_pages.h); with use_mmap false: map and read the
    // file that way where the kernel gives it 2 MiB pages, else read it in.
    bool huge_pages = true;
    std::vector<gguf_override> kv_overrides;  // metadata values that replace the file's (gguf.h)
};

class model {
public:
    // Opens and validates a model (see model_params).
    static std::shared_ptr<model> load(const std::string& path, const model_params& p = {});
    // The hyperparameters load() reads from f's metadata (common keys, the
    // architecture's facts and setup, the expert settings), without the
    // weights: n_vocab stays 0. Throws as load() does.
    static hparams read_hparams(const gguf_file& f);

    const hparams& hp() const { return hp_; }
    // Layer il's hyperparameters: hp() with the layer's own shape (hparams::shapes).
    const hparams& layer_hp(int64_t il) const { return layer_hp_.empty() ? hp_ : layer_hp_[(size_t)il]; }
    const model_weights& weights() const { return w_; }
    const gguf_file& file() const { return *file_; }
    std::shared_ptr<const gguf_file> file_ptr() const { return file_; }
    bool vocab_only() const { return vocab_only_; }
    uint64_t size_bytes() const { return size_bytes_; }  // bytes of all tensors
    uint64_t n_params() const { return n_params_; }      // elements of all tensors
    std::string desc() const;                            // "gemma3 270M Q4_K - Medium"
    // The matrices the forward pass multiplies with, by tensor name
    // ("blk.3.attn_q.weight", "output.weight", ...): what adapters may target.
    std::vector<std::pair<std::string, const weight_view*>> matrices() const;

private:
    model() = default;
    std::shared_ptr<const gguf_file> file_;
    hparams hp_;
    std::vector<hparams> layer_hp_;  // (n_layer) when hp_.shapes is set, else empty
    model_weights w_;
    bool vocab_only_ = false;
    uint64_t size_bytes_ = 0, n_params_ = 0;
};

// Helpers for architecture files: typed metadata reads under "<arch>.".
int64_t arch_int(const gguf_file& f, const hparams& hp, const std::string& key, int64_t def);
double arch_float(const gguf_file& f, const hparams& hp, const std::string& key, double def);
bool arch_has(const gguf_file& f, const hparams& hp, const std::string& key);
// The router's gating function from "<arch>.expert_gating_func" (llama.cpp's
// numbering: 1 softmax, 2 sigmoid, 3 softmax over the chosen), `def` when
// absent or 0.
moe_gating gating_of(const gguf_file& f, const hparams& hp, moe_gating def);
// Reads "<arch>.rope.dimension_sections" (M-RoPE) into hp.rope.sections;
// false when the file has no such key.
bool read_rope_sections(const gguf_file& f, hparams& hp);
// Reads the gated delta-net keys (ssm.*) into hp.ssm and the recurrent
// layers into hp.recurrent: "<arch>.attention.recurrent_layers" when the file
// has it, else every layer but each full_attention_interval-th (default 4).
void read_delta_net(const gguf_file& f, hparams& hp);
// Reads Mamba-2's keys (ssm.*) into hp.ssm (kind mamba2); the recurrent layers
// are the architecture's to set.
void read_mamba2(const gguf_file& f, hparams& hp);
// Reads LFM2's gated short convolution ("<arch>.shortconv.l_cache") into
// hp.ssm (kind short_conv, n_embd channels) and its recurrent layers (those
// with 0 KV heads: recurrent_from_kv_heads): lfm2 and lfm2moe.
void read_short_conv(const gguf_file& f, hparams& hp);
// hp.recurrent from the per-layer attention.head_count_kv array: a layer with
// 0 KV heads is recurrent (LFM2's and Granite 4.0-H's converters write it so).
// The attention layers must agree on their KV heads (then no per-layer shapes
// remain); a file without the array has no recurrent layers.
void recurrent_from_kv_heads(hparams& hp);
// Sets hp.swa_layers: from "<arch>.attention.sliding_window_pattern" when the
// file has it (a period, or one flag per layer), else from `period`: in each
// group of `period` layers all but the last use the window (0: every layer).
void set_swa_pattern(const gguf_file& f, hparams& hp, int period);

}  // namespace lp
