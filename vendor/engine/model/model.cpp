// model.cpp — see model.h: the architecture table, the common hyperparameter
// keys, and naming/validating the weights of a decoder-only transformer.
#include "model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "../common.h"

namespace lp {

// The declarations and the table, from the one list (archs.def).
#define LP_ARCH(stem) extern const arch_def arch_##stem;
#include "archs.def"
#undef LP_ARCH

const std::vector<const arch_def*>& supported_archs() {
    static const std::vector<const arch_def*> archs = {
#define LP_ARCH(stem) &arch_##stem,
#include "archs.def"
#undef LP_ARCH
    };
    return archs;
}

const arch_def* find_arch(const std::string& name) {
    for (const arch_def* a : supported_archs())
        if (name == a->name) return a;
    return nullptr;
}

// ---------------------------------------------------------------------------
// Metadata helpers
// ---------------------------------------------------------------------------

int64_t arch_int(const gguf_file& f, const hparams& hp, const std::string& key, int64_t def) {
    const std::string full = hp.arch + "." + key;
    const gguf_kv* kv = f.find_override(full) ? nullptr : f.find_kv(full);
    if (kv && kv->type == gguf_type::ARRAY)
        throw not_implemented_error("metadata " + full + " is an array (per-layer values are not supported)");
    return f.get_int(full, def);
}

double arch_float(const gguf_file& f, const hparams& hp, const std::string& key, double def) {
    return f.get_float(hp.arch + "." + key, def);
}

bool arch_has(const gguf_file& f, const hparams& hp, const std::string& key) {
    return f.has_key(hp.arch + "." + key);
}

namespace {

int64_t required_int(const gguf_file& f, const hparams& hp, const std::string& key) {
    if (!arch_has(f, hp, key)) throw gguf_error("model metadata lacks " + hp.arch + "." + key);
    return arch_int(f, hp, key, 0);
}

void check_positive(int64_t v, const char* what, int64_t max) {
    if (v <= 0 || v > max)
        throw gguf_error(std::string("model metadata: ") + what + " = " + std::to_string(v) + " is out of range");
}

// A count that may be one value or one per layer (llama.cpp's get_key_or_arr:
// Gemma 4's head_count_kv and feed_forward_length). Returns the largest;
// per_layer gets the first n_layer values of an array (of n_layer_all, the
// block count), or stays empty for one value.
int64_t layer_ints(const gguf_file& f, const hparams& hp, const std::string& key, int64_t def, bool required,
                   int64_t n_layer_all, std::vector<int64_t>& per_layer) {
    const std::string full = hp.arch + "." + key;
    const gguf_kv* kv = f.find_override(full) ? nullptr : f.find_kv(full);
    if (!kv || kv->type != gguf_type::ARRAY) return required ? required_int(f, hp, key) : arch_int(f, hp, key, def);
    const gguf_array& a = kv->array;
    if (a.count != (uint64_t)n_layer_all)
        throw gguf_error(full + " has " + std::to_string(a.count) + " entries for " + std::to_string(n_layer_all) +
                         " layers");
    if (a.elem_type != gguf_type::I32 && a.elem_type != gguf_type::U32)
        throw gguf_error(full + " must hold 32-bit integers");
    int64_t most = 0;
    per_layer.assign((size_t)hp.n_layer, 0);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        int32_t x = 0;
        std::memcpy(&x, f.bytes() + f.array_elem_pos(a, (uint64_t)il), 4);
        per_layer[(size_t)il] = x;
        most = std::max<int64_t>(most, x);
    }
    return most;
}

// The keys every architecture shares.
void read_common_hparams(const gguf_file& f, hparams& hp) {
    hp.n_ctx_train = required_int(f, hp, "context_length");
    hp.n_embd = required_int(f, hp, "embedding_length");
    hp.n_layer = required_int(f, hp, "block_count");
    // Next-token-prediction (MTP) layers come after the model's own in the
    // block count (GLM-4.5, DeepSeek V3): loaded by llama.cpp only for
    // speculative decoding, skipped here, as in its normal graph.
    const int64_t n_nextn = arch_int(f, hp, "nextn_predict_layers", 0);
    if (n_nextn != 0 && (n_nextn < 0 || n_nextn >= hp.n_layer))
        throw gguf_error("model metadata: nextn_predict_layers " + std::to_string(n_nextn) + " is out of range");
    const int64_t n_layer_all = hp.n_layer;
    hp.n_layer -= n_nextn;
    // Per-layer FFN widths and KV head counts (arrays) become hp.shapes, the
    // largest the model-wide value; the architecture's setup completes them.
    std::vector<int64_t> ff_l, kv_l;
    // (a mixture-of-experts file may lack it: qwen35moe's layers all have experts)
    const bool ff_required = arch_int(f, hp, "expert_count", 0) == 0;
    hp.n_ff = layer_ints(f, hp, "feed_forward_length", 0, ff_required, n_layer_all, ff_l);
    hp.n_head = required_int(f, hp, "attention.head_count");
    hp.n_head_kv = layer_ints(f, hp, "attention.head_count_kv", hp.n_head, false, n_layer_all, kv_l);
    if (!ff_l.empty() || !kv_l.empty()) {
        hp.shapes.assign((size_t)hp.n_layer, layer_shape{});
        for (size_t il = 0; il < hp.shapes.size(); ++il) {
            hp.shapes[il].n_ff = ff_l.empty() ? hp.n_ff : ff_l[il];
            hp.shapes[il].n_head_kv = kv_l.empty() ? hp.n_head_kv : kv_l[il];
            check_positive(hp.shapes[il].n_ff, "feed_forward_length (a layer's)", (int64_t)1 << 24);
            // 0: a layer without attention (LFM2's convolution layers,
            // Granite 4.0-H's Mamba-2 layers); the
            // architecture's setup says which layers those are, and
            // check_layer_shapes refuses a 0 on an attention layer.
            if (hp.shapes[il].n_head_kv == 0) continue;
            check_positive(hp.shapes[il].n_head_kv, "attention.head_count_kv (a layer's)", hp.n_head);
            if (hp.n_head % hp.shapes[il].n_head_kv != 0)
                throw gguf_error("model metadata: head_count " + std::to_string(hp.n_head) +
                                 " is not a multiple of layer " + std::to_string(il) + "'s head_count_kv " +
                                 std::to_string(hp.shapes[il].n_head_kv));
        }
    }
    check_positive(hp.n_ctx_train, "context_length", (int64_t)1 << 31);
    check_positive(hp.n_embd, "embedding_length", (int64_t)1 << 20);
    check_positive(hp.n_layer, "block_count", 4096);
    if (ff_required || hp.n_ff != 0) check_positive(hp.n_ff, "feed_forward_length", (int64_t)1 << 24);
    check_positive(hp.n_head, "attention.head_count", 4096);
    check_positive(hp.n_head_kv, "attention.head_count_kv", hp.n_head);
    if (hp.n_head % hp.n_head_kv != 0)
        throw gguf_error("model metadata: head_count " + std::to_string(hp.n_head) +
                         " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
    hp.head_dim_k = arch_int(f, hp, "attention.key_length", hp.n_embd / hp.n_head);
    hp.head_dim_v = arch_int(f, hp, "attention.value_length", hp.head_dim_k);
    check_positive(hp.head_dim_k, "attention.key_length", 1 << 16);
    check_positive(hp.head_dim_v, "attention.value_length", 1 << 16);

    hp.norm_eps = (float)arch_float(f, hp, "attention.layer_norm_rms_epsilon",
                                    arch_float(f, hp, "attention.layer_norm_epsilon", 1e-5));

    rope_params& r = hp.rope;
    r.n_rot = (int)arch_int(f, hp, "rope.dimension_count", hp.head_dim_k);
    if (r.n_rot < 0 || r.n_rot > hp.head_dim_k || r.n_rot % 2 != 0)
        throw gguf_error("model metadata: rope.dimension_count " + std::to_string(r.n_rot) +
                         " must be even and at most the head size " + std::to_string(hp.head_dim_k));
    r.freq_base = (float)arch_float(f, hp, "rope.freq_base", 10000.0);
    const std::string scaling = f.get_string(hp.arch + ".rope.scaling.type", "");
    float factor = (float)arch_float(f, hp, "rope.scaling.factor", 0.0);
    if (factor == 0.0f) factor = (float)arch_float(f, hp, "rope.scale_linear", 0.0);
    r.freq_scale = (factor > 0.0f && scaling != "none") ? 1.0f / factor : 1.0f;
    r.n_ctx_orig = (int)arch_int(f, hp, "rope.scaling.original_context_length", hp.n_ctx_train);
    if (scaling == "yarn") {
        r.ext_factor = 1.0f;
        r.attn_factor = (float)arch_float(f, hp, "rope.scaling.attn_factor", 1.0);
        r.beta_fast = (float)arch_float(f, hp, "rope.scaling.yarn_beta_fast", 32.0);
        r.beta_slow = (float)arch_float(f, hp, "rope.scaling.yarn_beta_slow", 1.0);
    } else if (!scaling.empty() && scaling != "none" && scaling != "linear") {
        throw not_implemented_error("rope scaling type '" + scaling + "' is not supported (none, linear, yarn)");
    }
    if (!(r.freq_base > 0.0f) || !(r.freq_scale > 0.0f)) throw gguf_error("model metadata: bad rope frequency");

    hp.n_swa = (int32_t)arch_int(f, hp, "attention.sliding_window", 0);
    if (hp.n_swa < 0) throw gguf_error("model metadata: attention.sliding_window is negative");
    hp.attn_softcap = (float)arch_float(f, hp, "attn_logit_softcapping", 0.0);
    hp.final_softcap = (float)arch_float(f, hp, "final_logit_softcapping", 0.0);
    if (hp.attn_softcap < 0 || hp.final_softcap < 0) throw gguf_error("model metadata: negative soft-capping");

    // Experts: every architecture's files may declare them (its setup reads the rest).
    hp.moe.n_expert = arch_int(f, hp, "expert_count", 0);
    hp.moe.n_expert_used = arch_int(f, hp, "expert_used_count", 0);
    hp.moe.n_group = (int)arch_int(f, hp, "expert_group_count", 0);
    hp.moe.n_group_used = (int)arch_int(f, hp, "expert_group_used_count", 0);

    hp.causal = f.get_bool(hp.arch + ".attention.causal", true);
    hp.pooling = (int32_t)arch_int(f, hp, "pooling_type", -1);
    if (hp.pooling < -1 || hp.pooling > 4) throw gguf_error("model metadata: pooling_type " + std::to_string(hp.pooling) + " is out of range");
    // A classifier's labels name its outputs; only their count matters here (rerankers: 1, Qwen3-Reranker: yes / no).
    if (const gguf_kv* labels = f.find_kv(hp.arch + ".classifier.output_labels")) {
        if (labels->type != gguf_type::ARRAY || labels->array.count < 1 || labels->array.count > 4096)
            throw gguf_error("model metadata: " + hp.arch + ".classifier.output_labels must be an array of 1 to 4096 labels");
        hp.n_cls_out = (int64_t)labels->array.count;
    }
}

// ---------------------------------------------------------------------------
// Weights
// ---------------------------------------------------------------------------

class weight_loader {
public:
    weight_loader(const gguf_file& f, const std::string& arch) : f_(f), arch_(arch) {}

    bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

    // A matrix of n_rows rows of n_cols elements, of a type we can multiply with.
    weight_view matrix(const std::string& name, int64_t n_cols, int64_t n_rows) const {
        const gguf_tensor_info& t = get(name);
        if (t.ne[0] != n_cols || t.ne[1] != n_rows || t.ne[2] != 1 || t.ne[3] != 1)
            throw gguf_error("tensor " + name + " has shape " + shape(t) + ", expected [" + std::to_string(n_cols) +
                             ", " + std::to_string(n_rows) + "]");
        check_computable(name, t);
        weight_view w;
        w.type = t.type;
        w.n_rows = n_rows;
        w.n_cols = n_cols;
        w.data = f_.tensor_data(t);
        w.row_stride = row_size(t.type, n_cols);
        return w;
    }
    weight_view matrix_opt(const std::string& name, int64_t n_cols, int64_t n_rows) const {
        return has(name) ? matrix(name, n_cols, n_rows) : weight_view{};
    }

    // The n_expert matrices of n_rows × n_cols of a mixture-of-experts layer
    // (a 3-D tensor [n_cols, n_rows, n_expert]).
    experts_view experts(const std::string& name, int64_t n_cols, int64_t n_rows, int64_t n_expert) const {
        const gguf_tensor_info& t = get(name);
        if (t.ne[0] != n_cols || t.ne[1] != n_rows || t.ne[2] != n_expert || t.ne[3] != 1)
            throw gguf_error("tensor " + name + " has shape " + shape(t) + ", expected [" + std::to_string(n_cols) +
                             ", " + std::to_string(n_rows) + ", " + std::to_string(n_expert) + "]");
        check_computable(name, t);
        experts_view v;
        v.all.type = t.type;
        v.all.n_rows = n_rows * n_expert;
        v.all.n_cols = n_cols;
        v.all.data = f_.tensor_data(t);
        v.all.row_stride = row_size(t.type, n_cols);
        v.n_expert = n_expert;
        return v;
    }
    experts_view experts_opt(const std::string& name, int64_t n_cols, int64_t n_rows, int64_t n_expert) const {
        return has(name) ? experts(name, n_cols, n_rows, n_expert) : experts_view{};
    }

    // A matrix of n_rows × n_cols converted to float, row after row (per-expert biases).
    std::vector<float> floats(const std::string& name, int64_t n_cols, int64_t n_rows) const {
        const gguf_tensor_info& t = get(name);
        if (t.ne[0] != n_cols || t.ne[1] != n_rows || t.ne[2] != 1 || t.ne[3] != 1)
            throw gguf_error("tensor " + name + " has shape " + shape(t) + ", expected [" + std::to_string(n_cols) +
                             ", " + std::to_string(n_rows) + "]");
        const type_traits& tr = traits(t.type);
        if (!tr.to_float || n_cols % tr.block_size != 0)
            throw not_implemented_error("tensor " + name + " has type " + type_name(t.type) + ", which cannot be read");
        std::vector<float> v((size_t)(n_cols * n_rows));
        tr.to_float(f_.tensor_data(t), v.data(), n_cols * n_rows);
        return v;
    }
    std::vector<float> floats_opt(const std::string& name, int64_t n_cols, int64_t n_rows) const {
        return has(name) ? floats(name, n_cols, n_rows) : std::vector<float>{};
    }

    // A vector of n elements, converted to float.
    std::vector<float> vec(const std::string& name, int64_t n) const {
        const gguf_tensor_info& t = get(name);
        if (t.n_elements() != n || t.ne[0] != n)
            throw gguf_error("tensor " + name + " has shape " + shape(t) + ", expected [" + std::to_string(n) + "]");
        const type_traits& tr = traits(t.type);
        if (!tr.to_float || n % tr.block_size != 0)
            throw not_implemented_error("tensor " + name + " has type " + type_name(t.type) + ", which cannot be read");
        std::vector<float> v((size_t)n);
        tr.to_float(f_.tensor_data(t), v.data(), n);
        return v;
    }
    std::vector<float> vec_opt(const std::string& name, int64_t n) const {
        return has(name) ? vec(name, n) : std::vector<float>{};
    }

private:
    static void check_computable(const std::string& name, const gguf_tensor_info& t) {
        const type_traits& tr = traits(t.type);
        if (!tr.supported || (!tr.vec_dot && !tr.vec_dot_ref))
            throw not_implemented_error("tensor " + name + " has type " + type_name(t.type) +
                                        ", which this build cannot compute with");
    }
    const gguf_tensor_info& get(const std::string& name) const {
        const gguf_tensor_info* t = f_.find_tensor(name);
        if (!t) throw gguf_error("model file lacks tensor " + name + " (needed by architecture " + arch_ + ")");
        return *t;
    }
    static std::string shape(const gguf_tensor_info& t) {
        std::string s = "[";
        for (uint32_t i = 0; i < t.n_dims; ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
        return s + "]";
    }
    const gguf_file& f_;
    std::string arch_;
};

// The classifier head of a reranker (model_weights cls / cls_out), where the
// file has one: llama.cpp's converter writes it for BERT / XLM-RoBERTa
// sequence classifiers and Qwen3-Reranker (cls.output = the LM head's yes / no rows).
void load_classifier(const weight_loader& L, const hparams& hp, model_weights& w) {
    const int64_t E = hp.n_embd;
    w.cls = L.matrix_opt("cls.weight", E, E);
    w.cls_b = L.vec_opt("cls.bias", E);
    w.cls_out = L.matrix_opt("cls.output.weight", E, hp.n_cls_out);
    w.cls_out_b = L.vec_opt("cls.output.bias", hp.n_cls_out);
    if (!w.cls_b.empty() && !w.cls.data) throw gguf_error("model file has cls.bias without cls.weight");
    if (!w.cls_out_b.empty() && !w.cls_out.data)
        throw gguf_error("model file has cls.output.bias without cls.output.weight");
}

// The attention projections of multi-head latent attention (model.h mla_hparams).
void load_mla(const weight_loader& L, const hparams& hp, const std::string& p, layer_weights& l) {
    const mla_hparams& m = hp.mla;
    const int64_t E = hp.n_embd, H = hp.n_head, R = hp.rope.n_rot;
    if (m.q_lora > 0) {
        l.wq_a = L.matrix(p + "attn_q_a.weight", E, m.q_lora);
        l.q_a_norm = L.vec(p + "attn_q_a_norm.weight", m.q_lora);
        l.wq_b = L.matrix(p + "attn_q_b.weight", m.q_lora, H * m.head_k);
    } else {
        l.wq = L.matrix(p + "attn_q.weight", E, H * m.head_k);
    }
    l.wkv_a = L.matrix(p + "attn_kv_a_mqa.weight", E, m.kv_lora + R);
    l.kv_a_norm = L.vec(p + "attn_kv_a_norm.weight", m.kv_lora);
    if (!L.has(p + "attn_k_b.weight") && L.has(p + "attn_kv_b.weight"))
        throw not_implemented_error("tensor " + p + "attn_kv_b.weight: this " + hp.arch + " file was converted "
                                    "before llama.cpp split it into attn_k_b / attn_v_b (multi-head latent "
                                    "attention); convert the model again with a current convert_hf_to_gguf.py");
    l.wk_b = L.experts(p + "attn_k_b.weight", m.head_k - R, m.kv_lora, H);
    l.wv_b = L.experts(p + "attn_v_b.weight", m.kv_lora, m.head_v, H);
}

// The FFN of a mixture-of-experts layer: router, experts, shared expert.
void load_moe_ffn(const weight_loader& L, const hparams& hp, const std::string& p, layer_weights& l) {
    const moe_hparams& m = hp.moe;
    const int64_t E = hp.n_embd, F = m.n_ff_exp, X = m.n_expert;
    l.ffn_gate_inp = L.matrix(p + "ffn_gate_inp.weight", E, X);
    l.ffn_gate_inp_b = L.vec_opt(p + "ffn_gate_inp.bias", X);
    l.exp_probs_b = m.probs_bias_required ? L.vec(p + "exp_probs_b.bias", X) : L.vec_opt(p + "exp_probs_b.bias", X);
    if (hp.v.moe_beside_dense && L.has(p + "ffn_gate_up_exps.weight")) {
        // Gemma 4's converter writes gate and up as one tensor (llama.cpp accepts either)
        l.ffn_gate_up_exps = L.experts(p + "ffn_gate_up_exps.weight", E, 2 * F, X);
    } else {
        l.ffn_gate_exps = m.gate_optional ? L.experts_opt(p + "ffn_gate_exps.weight", E, F, X)
                                          : L.experts(p + "ffn_gate_exps.weight", E, F, X);
        l.ffn_up_exps = L.experts(p + "ffn_up_exps.weight", E, F, X);
    }
    l.ffn_down_exps = L.experts(p + "ffn_down_exps.weight", F, E, X);
    l.ffn_gate_exps_b = L.floats_opt(p + "ffn_gate_exps.bias", F, X);
    l.ffn_up_exps_b = L.floats_opt(p + "ffn_up_exps.bias", F, X);
    l.ffn_down_exps_b = L.floats_opt(p + "ffn_down_exps.bias", E, X);
    if (m.n_ff_shexp > 0) {
        l.ffn_gate_shexp = L.matrix(p + "ffn_gate_shexp.weight", E, m.n_ff_shexp);
        l.ffn_up_shexp = L.matrix(p + "ffn_up_shexp.weight", E, m.n_ff_shexp);
        l.ffn_down_shexp = L.matrix(p + "ffn_down_shexp.weight", m.n_ff_shexp, E);
        l.ffn_gate_inp_shexp = L.matrix_opt(p + "ffn_gate_inp_shexp.weight", E, 1);
    }
}

// A gated delta-net layer's weights (model.h ssm_hparams), by llama.cpp's names.
void load_delta_net(const weight_loader& L, const hparams& hp, const std::string& p, layer_weights& l) {
    const ssm_hparams& s = hp.ssm;
    const int64_t E = hp.n_embd;
    l.ssm_in = L.matrix(p + "attn_qkv.weight", E, s.conv_dim());
    l.ssm_z = L.matrix(p + "attn_gate.weight", E, s.value_dim());
    l.ssm_alpha = L.matrix(p + "ssm_alpha.weight", E, s.n_head_v);
    l.ssm_beta = L.matrix(p + "ssm_beta.weight", E, s.n_head_v);
    l.ssm_conv1d = L.floats(p + "ssm_conv1d.weight", s.d_conv, s.conv_dim());
    l.ssm_dt = L.vec(p + "ssm_dt.bias", s.n_head_v);
    l.ssm_a = L.vec(p + "ssm_a", s.n_head_v);
    l.ssm_norm = L.vec(p + "ssm_norm.weight", s.d_state);
    l.ssm_out = L.matrix(p + "ssm_out.weight", s.value_dim(), E);
}

// A gated short-convolution layer's weights (LFM2), by llama.cpp's names.
void load_short_conv(const weight_loader& L, const hparams& hp, const std::string& p, layer_weights& l) {
    const ssm_hparams& s = hp.ssm;
    const int64_t E = hp.n_embd;
    l.ssm_in = L.matrix(p + "shortconv.in_proj.weight", E, s.in_dim());
    l.ssm_conv1d = L.floats(p + "shortconv.conv.weight", s.d_conv, s.conv_dim());
    l.ssm_out = L.matrix(p + "shortconv.out_proj.weight", s.conv_dim(), E);
}

// A Mamba-2 layer's weights (Granite 4.0-H), by llama.cpp's names.
void load_mamba2(const weight_loader& L, const hparams& hp, const std::string& p, layer_weights& l) {
    const ssm_hparams& s = hp.ssm;
    const int64_t E = hp.n_embd, H = s.n_head_v, G = s.n_head_k;
    l.ssm_in = L.matrix(p + "ssm_in.weight", E, s.in_dim());
    l.ssm_conv1d = L.floats(p + "ssm_conv1d.weight", s.d_conv, s.conv_dim());
    l.ssm_conv1d_b = L.vec_opt(p + "ssm_conv1d.bias", s.conv_dim());
    l.ssm_dt = L.vec(p + "ssm_dt.bias", H);
    l.ssm_a = L.floats(p + "ssm_a", 1, H);
    l.ssm_d = L.floats(p + "ssm_d", 1, H);
    l.ssm_norm = L.floats(p + "ssm_norm.weight", s.d_inner / G, G);
    l.ssm_out = L.matrix(p + "ssm_out.weight", s.d_inner, E);
}

void load_weights(const gguf_file& f, hparams& hp, model_weights& w) {
    weight_loader L(f, hp.arch);
    const block_variant& v = hp.v;
    const int64_t E = hp.n_embd;
    const bool ln = v.norm == norm_kind::layer;

    // Vocabulary size: the rows of the embedding matrix.
    const gguf_tensor_info* te = f.find_tensor("token_embd.weight");
    if (!te) throw gguf_error("model file lacks tensor token_embd.weight (needed by architecture " + hp.arch + ")");
    hp.n_vocab = te->ne[1];
    if (hp.n_vocab <= 0) throw gguf_error("token_embd.weight has no rows");
    w.token_embd = L.matrix("token_embd.weight", E, hp.n_vocab);
    w.output_norm = L.vec(std::string(v.output_norm_tensor) + ".weight", E);
    if (ln) w.output_norm_b = L.vec_opt("output_norm.bias", E);
    w.output = L.has("output.weight") ? L.matrix("output.weight", E, hp.n_vocab) : w.token_embd;
    load_classifier(L, hp, w);  // Qwen3-Reranker's yes / no head
    if (L.has("rope_freqs.weight")) w.rope_freqs = L.vec("rope_freqs.weight", hp.rope.n_rot / 2);
    w.rope_long = L.vec_opt("rope_factors_long.weight", hp.rope.n_rot / 2);
    w.rope_short = L.vec_opt("rope_factors_short.weight", hp.rope.n_rot / 2);
    if (w.rope_long.empty() != w.rope_short.empty())
        throw gguf_error("model file has only one of rope_factors_long.weight and rope_factors_short.weight");
    if (hp.n_embd_per_layer > 0) {  // Gemma 4's per-layer embeddings
        const int64_t NP = hp.n_layer * hp.n_embd_per_layer;
        w.per_layer_tok_embd = L.matrix("per_layer_token_embd.weight", NP, hp.n_vocab);
        w.per_layer_model_proj = L.matrix("per_layer_model_proj.weight", E, NP);
        w.per_layer_proj_norm = L.vec("per_layer_proj_norm.weight", hp.n_embd_per_layer);
    }

    w.layers.resize((size_t)hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        layer_weights& l = w.layers[(size_t)il];
        const std::string p = "blk." + std::to_string(il) + ".";
        // From here on `hp`, nq, nk and nv are this layer's own shape
        // (hparams::shapes: Gemma 4's layers differ; otherwise the same).
        const hparams layer = hp.for_layer(il);
        const hparams& hp = layer;
        const int64_t nq = hp.n_q(), nk = hp.n_embd_k(), nv = hp.n_embd_v();
        if (v.pre_norm) {
            l.attn_norm = L.vec(p + "attn_norm.weight", E);
            if (ln) l.attn_norm_b = L.vec_opt(p + "attn_norm.bias", E);
        }
        if (hp.is_recurrent(il) && hp.ssm.kind == ssm_kind::short_conv) {
            load_short_conv(L, hp, p, l);
        } else if (hp.is_recurrent(il) && hp.ssm.kind == ssm_kind::mamba2) {
            load_mamba2(L, hp, p, l);
        } else if (hp.is_recurrent(il)) {
            load_delta_net(L, hp, p, l);
        } else if (hp.is_mla()) {
            load_mla(L, hp, p, l);
        } else if (v.v_from_k || !hp.own_kv(il)) {
            // Gemma 4: a shared-KV layer has queries only; the others' attn_v
            // is optional (without it the keys' projection is the values).
            l.wq = L.matrix(p + "attn_q.weight", E, nq);
            if (hp.own_kv(il)) {
                l.wk = L.matrix(p + "attn_k.weight", E, nk);
                l.wv = L.matrix_opt(p + "attn_v.weight", E, nv);
            }
        } else if (v.qkv_fused) {
            l.wqkv = L.matrix(p + "attn_qkv.weight", E, nq + nk + nv);
            l.bqkv = L.vec_opt(p + "attn_qkv.bias", nq + nk + nv);
        } else {
            l.wq = L.matrix(p + "attn_q.weight", E, v.attn_gate ? 2 * nq : nq);
            l.wk = L.matrix(p + "attn_k.weight", E, nk);
            l.wv = L.matrix(p + "attn_v.weight", E, nv);
            if (v.qkv_bias) {
                l.bq = L.vec(p + "attn_q.bias", nq);
                l.bk = L.vec(p + "attn_k.bias", nk);
                l.bv = L.vec(p + "attn_v.bias", nv);
            } else {
                l.bq = L.vec_opt(p + "attn_q.bias", nq);
                l.bk = L.vec_opt(p + "attn_k.bias", nk);
                l.bv = L.vec_opt(p + "attn_v.bias", nv);
            }
        }
        const int64_t wo_cols = hp.is_mla() ? hp.n_head * hp.mla.head_v : hp.n_head * hp.head_dim_v;
        if (!hp.is_recurrent(il)) {
            l.wo = L.matrix(p + "attn_output.weight", wo_cols, E);
            l.bo = L.vec_opt(p + "attn_output.bias", E);
        }
        if (hp.is_recurrent(il)) {
            // no q / k norms: the delta-net L2-normalises its q and k; the short convolution and Mamba-2 have none
        } else if (v.qk_norm_full) {
            l.q_norm = L.vec(p + "attn_q_norm.weight", nq);
            l.k_norm = L.vec(p + "attn_k_norm.weight", nk);
        } else if (v.qk_norm && !hp.own_kv(il)) {
            l.q_norm = L.vec(p + "attn_q_norm.weight", hp.head_dim_k);  // a shared-KV layer: no keys of its own
        } else if (v.qk_norm) {
            l.q_norm = L.vec(p + "attn_q_norm.weight", hp.head_dim_k);
            l.k_norm = L.vec(p + "attn_k_norm.weight", hp.head_dim_k);
        } else if (v.qk_norm_optional) {
            l.q_norm = L.vec_opt(p + "attn_q_norm.weight", hp.head_dim_k);
            l.k_norm = L.vec_opt(p + "attn_k_norm.weight", hp.head_dim_k);
            if (l.q_norm.empty() != l.k_norm.empty())
                throw gguf_error("model file has only one of " + p + "attn_q_norm.weight and " + p + "attn_k_norm.weight");
        }
        if (v.post_attn_norm) l.post_attn_norm = L.vec(p + "post_attention_norm.weight", E);
        if (v.attn_sinks) l.attn_sinks = L.vec(p + "attn_sinks.weight", hp.n_head);
        if (v.pre_norm) {
            l.ffn_norm = L.vec(p + v.ffn_norm_tensor + ".weight", E);
            if (ln) l.ffn_norm_b = L.vec_opt(p + "ffn_norm.bias", E);
        }
        if (v.moe_beside_dense && L.has(p + "ffn_gate_inp.weight")) {
            // Gemma 4: the experts beside the dense FFN (loaded below), as
            // llama.cpp a layer with a router
            load_moe_ffn(L, hp, p, l);
            l.ffn_gate_inp_s = L.vec(p + "ffn_gate_inp.scale", E);
            l.ffn_down_exps_s = L.vec(p + "ffn_down_exps.scale", hp.moe.n_expert);
            l.ffn_pre_norm_2 = L.vec(p + "pre_ffw_norm_2.weight", E);
            l.ffn_post_norm_1 = L.vec(p + "post_ffw_norm_1.weight", E);
            l.ffn_post_norm_2 = L.vec(p + "post_ffw_norm_2.weight", E);
        }
        if (hp.moe.n_expert > 0 && il >= hp.moe.n_layer_dense_lead && !v.moe_beside_dense) {
            load_moe_ffn(L, hp, p, l);
        } else {
            if (v.gate_up_fused) {
                l.ffn_up = L.matrix(p + "ffn_up.weight", E, 2 * hp.n_ff);
            } else {
                l.ffn_gate = L.matrix(p + "ffn_gate.weight", E, hp.n_ff);
                l.ffn_up = L.matrix(p + "ffn_up.weight", E, hp.n_ff);
                // optional biases, as llama.cpp's loaders take them (granite's mlp_bias)
                l.ffn_gate_b = L.vec_opt(p + "ffn_gate.bias", hp.n_ff);
                l.ffn_up_b = L.vec_opt(p + "ffn_up.bias", hp.n_ff);
            }
            l.ffn_down = L.matrix(p + "ffn_down.weight", hp.n_ff, E);
            l.ffn_down_b = L.vec_opt(p + "ffn_down.bias", E);
        }
        if (v.post_ffn_norm) l.post_ffn_norm = L.vec(p + "post_ffw_norm.weight", E);
        // Gemma 4: the layer's output scalar, its per-layer embedding block
        if (L.has(p + "layer_output_scale.weight")) l.out_scale = L.vec(p + "layer_output_scale.weight", 1)[0];
        if (hp.n_embd_per_layer > 0) {
            l.ple_gate = L.matrix(p + "inp_gate.weight", E, hp.n_embd_per_layer);
            l.ple_proj = L.matrix(p + "proj.weight", hp.n_embd_per_layer, E);
            l.ple_norm = L.vec(p + "post_norm.weight", E);
        }
    }
}

// The weights of an encoder (bert family): input embeddings (token, learned
// position, token type) and their norm, post-norm blocks with optional biases,
// no output head. Fused qkv and a gated FFN (nomic-bert) when the file has them.
void load_encoder_weights(const gguf_file& f, hparams& hp, model_weights& w) {
    weight_loader L(f, hp.arch);
    const int64_t E = hp.n_embd, nq = hp.n_q(), nk = hp.n_embd_k(), nv = hp.n_embd_v();
    const gguf_tensor_info* te = f.find_tensor("token_embd.weight");
    if (!te) throw gguf_error("model file lacks tensor token_embd.weight (needed by architecture " + hp.arch + ")");
    hp.n_vocab = te->ne[1];
    if (hp.n_vocab <= 0) throw gguf_error("token_embd.weight has no rows");
    w.token_embd = L.matrix("token_embd.weight", E, hp.n_vocab);
    if (const gguf_tensor_info* pe = f.find_tensor("position_embd.weight")) {
        hp.n_pos_embd = pe->ne[1];
        w.position_embd = L.matrix("position_embd.weight", E, hp.n_pos_embd);
    }
    if (const gguf_tensor_info* tt = f.find_tensor("token_types.weight")) {
        const weight_view types = L.matrix("token_types.weight", E, tt->ne[1]);
        w.token_type0.resize((size_t)E);
        traits(types.type).to_float(types.data, w.token_type0.data(), E);
    }
    w.token_embd_norm = L.vec("token_embd_norm.weight", E);
    w.token_embd_norm_b = L.vec_opt("token_embd_norm.bias", E);
    load_classifier(L, hp, w);  // cross-encoders (bge-reranker)

    w.layers.resize((size_t)hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        layer_weights& l = w.layers[(size_t)il];
        const std::string p = "blk." + std::to_string(il) + ".";
        if (hp.v.qkv_fused) {
            l.wqkv = L.matrix(p + "attn_qkv.weight", E, nq + nk + nv);
            l.bqkv = L.vec_opt(p + "attn_qkv.bias", nq + nk + nv);
        } else {
            l.wq = L.matrix(p + "attn_q.weight", E, nq);
            l.wk = L.matrix(p + "attn_k.weight", E, nk);
            l.wv = L.matrix(p + "attn_v.weight", E, nv);
            l.bq = L.vec_opt(p + "attn_q.bias", nq);
            l.bk = L.vec_opt(p + "attn_k.bias", nk);
            l.bv = L.vec_opt(p + "attn_v.bias", nv);
        }
        l.wo = L.matrix(p + "attn_output.weight", hp.n_head * hp.head_dim_v, E);
        l.bo = L.vec_opt(p + "attn_output.bias", E);
        l.attn_out_norm = L.vec(p + "attn_output_norm.weight", E);
        l.attn_out_norm_b = L.vec_opt(p + "attn_output_norm.bias", E);
        l.ffn_gate = L.matrix_opt(p + "ffn_gate.weight", E, hp.n_ff);
        l.ffn_up = L.matrix(p + "ffn_up.weight", E, hp.n_ff);
        l.ffn_up_b = L.vec_opt(p + "ffn_up.bias", hp.n_ff);
        l.ffn_down = L.matrix(p + "ffn_down.weight", hp.n_ff, E);
        l.ffn_down_b = L.vec_opt(p + "ffn_down.bias", E);
        l.layer_out_norm = L.vec(p + "layer_output_norm.weight", E);
        l.layer_out_norm_b = L.vec_opt(p + "layer_output_norm.bias", E);
    }
}

// The expert settings after the architecture's setup, as llama.cpp's loader
// checks them.
void check_moe(hparams& hp) {
    moe_hparams& m = hp.moe;
    auto bad = [&](const std::string& what) { throw gguf_error("model metadata: " + what); };
    if (m.n_expert < 0 || m.n_expert > 4096) bad("expert_count " + std::to_string(m.n_expert) + " is out of range");
    if (m.n_expert == 0) {
        if (m.n_expert_used != 0) bad("expert_used_count without expert_count");
        return;
    }
    if (m.n_expert_used <= 0 || m.n_expert_used > m.n_expert)
        bad("expert_used_count " + std::to_string(m.n_expert_used) + " must be in 1.." + std::to_string(m.n_expert));
    if (m.n_ff_exp <= 0 || m.n_ff_exp > ((int64_t)1 << 24))
        bad("expert_feed_forward_length " + std::to_string(m.n_ff_exp) + " is out of range");
    if (m.n_ff_shexp < 0 || m.n_ff_shexp > ((int64_t)1 << 24)) bad("shared expert width is out of range");
    if (m.n_layer_dense_lead < 0 || m.n_layer_dense_lead > hp.n_layer)
        bad("leading_dense_block_count " + std::to_string(m.n_layer_dense_lead) + " is out of range");
    if (m.n_group > 1) {
        if (m.n_group > 256 || m.n_expert % m.n_group != 0)
            bad("expert_group_count " + std::to_string(m.n_group) + " does not divide expert_count " +
                std::to_string(m.n_expert));
        if (m.n_group_used <= 0 || m.n_group_used >= m.n_group)
            bad("expert_group_used_count " + std::to_string(m.n_group_used) + " must be in 1.." +
                std::to_string(m.n_group - 1));
        if (m.n_group_used * (m.n_expert / m.n_group) < m.n_expert_used)
            bad("the expert groups used hold fewer experts than expert_used_count");
    }
    if (!std::isfinite(m.w_scale)) bad("expert_weights_scale is not finite");
}

const char* ftype_name(int64_t ft) {
    switch (ft) {
        case 0: return "all F32";
        case 1: return "F16";
        case 2: return "Q4_0";
        case 3: return "Q4_1";
        case 7: return "Q8_0";
        case 8: return "Q5_0";
        case 9: return "Q5_1";
        case 10: return "Q2_K - Medium";
        case 11: return "Q3_K - Small";
        case 12: return "Q3_K - Medium";
        case 13: return "Q3_K - Large";
        case 14: return "Q4_K - Small";
        case 15: return "Q4_K - Medium";
        case 16: return "Q5_K - Small";
        case 17: return "Q5_K - Medium";
        case 18: return "Q6_K";
        case 19: return "IQ2_XXS - 2.0625 bpw";
        case 20: return "IQ2_XS - 2.3125 bpw";
        case 21: return "Q2_K - Small";
        case 22: return "IQ3_XS - 3.3 bpw";
        case 23: return "IQ3_XXS - 3.0625 bpw";
        case 24: return "IQ1_S - 1.5625 bpw";
        case 25: return "IQ4_NL - 4.5 bpw";
        case 26: return "IQ3_S - 3.4375 bpw";
        case 27: return "IQ3_S mix - 3.66 bpw";
        case 28: return "IQ2_S - 2.5 bpw";
        case 29: return "IQ2_M - 2.7 bpw";
        case 30: return "IQ4_XS - 4.25 bpw";
        case 31: return "IQ1_M - 1.75 bpw";
        case 32: return "BF16";
        case 36: return "TQ1_0 - 1.69 bpw ternary";
        case 37: return "TQ2_0 - 2.06 bpw ternary";
        case 38: return "MXFP4 MoE";
        default: return "unknown type";
    }
}

}  // namespace

moe_gating gating_of(const gguf_file& f, const hparams& hp, moe_gating def) {
    const int64_t g = arch_int(f, hp, "expert_gating_func", 0);
    switch (g) {
        case 0: return def;
        case 1: return moe_gating::softmax;
        case 2: return moe_gating::sigmoid;
        case 3: return moe_gating::softmax_weight;
        case 4: throw not_implemented_error(hp.arch + ".expert_gating_func 4 (sqrt-softplus) is not supported");
        default: throw gguf_error("model metadata: " + hp.arch + ".expert_gating_func " + std::to_string(g) +
                                  " is not a gating function (1 softmax, 2 sigmoid, 3 softmax over the chosen)");
    }
}

bool read_rope_sections(const gguf_file& f, hparams& hp) {
    const std::string key = hp.arch + ".rope.dimension_sections";
    const gguf_kv* kv = f.find_kv(key);
    if (!kv) return false;
    if (kv->type != gguf_type::ARRAY) throw gguf_error(key + " must be an array");
    const gguf_array& a = kv->array;
    if (a.elem_type != gguf_type::I32 && a.elem_type != gguf_type::U32)
        throw gguf_error(key + " must hold 32-bit integers");
    if (a.count < 3 || a.count > 4) throw gguf_error(key + " must have 3 or 4 entries, has " + std::to_string(a.count));
    int sum = 0;
    for (uint64_t i = 0; i < a.count; ++i) {
        int32_t x = 0;
        std::memcpy(&x, f.bytes() + f.array_elem_pos(a, i), 4);
        if (x < 0 || x > 4096) throw gguf_error(key + " has an out-of-range entry " + std::to_string(x));
        hp.rope.sections[i] = x;
        sum += x;
    }
    if (sum == 0) throw gguf_error(key + " is all zero");
    return true;
}

void read_delta_net(const gguf_file& f, hparams& hp) {
    ssm_hparams& s = hp.ssm;
    auto need = [&](const char* key) {
        if (!arch_has(f, hp, key)) throw gguf_error("model metadata lacks " + hp.arch + "." + key);
        return arch_int(f, hp, key, 0);
    };
    s.d_conv = need("ssm.conv_kernel");
    s.d_state = need("ssm.state_size");
    s.n_head_k = need("ssm.group_count");
    s.n_head_v = need("ssm.time_step_rank");
    const int64_t d_inner = need("ssm.inner_size");
    if (s.d_conv < 2 || s.d_conv > 64) throw gguf_error("model metadata: ssm.conv_kernel is out of range (2..64)");
    if (s.d_state <= 0 || s.d_state > 4096 || s.n_head_k <= 0 || s.n_head_v <= 0 || s.n_head_v > 4096 ||
        s.n_head_v % s.n_head_k != 0)
        throw gguf_error("model metadata: ssm.state_size / group_count / time_step_rank are out of range (the value "
                         "heads must be a multiple of the key heads)");
    if (d_inner != s.value_dim())
        throw not_implemented_error("ssm.inner_size " + std::to_string(d_inner) + " differs from time_step_rank × "
                                    "state_size (value heads of another size than the key heads)");
    hp.recurrent.assign((size_t)hp.n_layer, 0);
    const gguf_kv* kv = f.find_kv(hp.arch + ".attention.recurrent_layers");
    if (kv && kv->type == gguf_type::ARRAY) {
        // One flag per block, the next-token-prediction blocks included (those are attention).
        const gguf_array& a = kv->array;
        if (a.count < (uint64_t)hp.n_layer || (a.elem_type != gguf_type::BOOL && a.elem_type != gguf_type::U8 &&
                                                a.elem_type != gguf_type::I8))
            throw gguf_error(hp.arch + ".attention.recurrent_layers must hold a flag for each of the " +
                             std::to_string(hp.n_layer) + " layers");
        for (int64_t il = 0; il < hp.n_layer; ++il)
            hp.recurrent[(size_t)il] = f.bytes()[f.array_elem_pos(a, (uint64_t)il)] != 0;
    } else {
        const int64_t every = arch_int(f, hp, "full_attention_interval", 4);
        if (every <= 0) throw gguf_error("model metadata: full_attention_interval must be > 0");
        for (int64_t il = 0; il < hp.n_layer; ++il) hp.recurrent[(size_t)il] = (il + 1) % every != 0;
    }
}

void read_mamba2(const gguf_file& f, hparams& hp) {
    ssm_hparams& s = hp.ssm;
    auto need = [&](const char* key) {
        if (!arch_has(f, hp, key)) throw gguf_error("model metadata lacks " + hp.arch + "." + key);
        return arch_int(f, hp, key, 0);
    };
    s.kind = ssm_kind::mamba2;
    s.d_conv = need("ssm.conv_kernel");
    s.d_state = need("ssm.state_size");
    s.n_head_k = need("ssm.group_count");
    s.n_head_v = need("ssm.time_step_rank");
    s.d_inner = need("ssm.inner_size");
    if (s.d_conv < 2 || s.d_conv > 64) throw gguf_error("model metadata: ssm.conv_kernel is out of range (2..64)");
    if (s.d_state <= 0 || s.d_state > 4096 || s.n_head_k <= 0 || s.n_head_v <= 0 || s.n_head_v > 65536 ||
        s.n_head_v % s.n_head_k != 0 || s.d_inner <= 0 || s.d_inner > ((int64_t)1 << 20) ||
        s.d_inner % s.n_head_v != 0 || s.d_inner % s.n_head_k != 0)
        throw gguf_error("model metadata: ssm.state_size / group_count / time_step_rank / inner_size are out of "
                         "range (the heads must split inner_size and be a multiple of the groups)");
}

void read_short_conv(const gguf_file& f, hparams& hp) {
    ssm_hparams& s = hp.ssm;
    s.kind = ssm_kind::short_conv;
    if (!arch_has(f, hp, "shortconv.l_cache")) throw gguf_error("model metadata lacks " + hp.arch + ".shortconv.l_cache");
    s.d_conv = arch_int(f, hp, "shortconv.l_cache", 0);
    if (s.d_conv < 2 || s.d_conv > 64)
        throw gguf_error("model metadata: " + hp.arch + ".shortconv.l_cache is out of range (2..64)");
    s.n_conv_ch = hp.n_embd;
    // Convolution layers: head_count_kv 0 (the window, if any, on the others).
    recurrent_from_kv_heads(hp);
}

void recurrent_from_kv_heads(hparams& hp) {
    hp.recurrent.assign((size_t)hp.n_layer, 0);
    if (hp.shapes.empty()) return;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const layer_shape& ls = hp.shapes[(size_t)il];
        if (ls.n_ff != hp.n_ff)
            throw not_implemented_error(hp.arch + " with per-layer feed_forward_length is not supported");
        if (ls.n_head_kv == 0) hp.recurrent[(size_t)il] = 1;
        else if (ls.n_head_kv != hp.n_head_kv)
            throw not_implemented_error(hp.arch + " with attention layers of different head_count_kv (" +
                                        std::to_string(ls.n_head_kv) + ", " + std::to_string(hp.n_head_kv) +
                                        ") is not supported");
    }
    hp.shapes.clear();
    if (hp.n_recurrent() == hp.n_layer)
        throw gguf_error("model metadata: " + hp.arch + ".attention.head_count_kv is 0 for every layer (no attention layer)");
    // A window applies to the attention layers only (flags on recurrent
    // layers would be unused; cleared so that no window cache counts them).
    for (int64_t il = 0; il < hp.n_layer; ++il)
        if (hp.recurrent[(size_t)il] && !hp.swa_layers.empty()) hp.swa_layers[(size_t)il] = 0;
}

void set_swa_pattern(const gguf_file& f, hparams& hp, int period) {
    hp.swa_layers.assign((size_t)hp.n_layer, 0);
    if (hp.n_swa <= 0) return;
    const gguf_kv* kv = f.find_kv(hp.arch + ".attention.sliding_window_pattern");
    if (kv && kv->type == gguf_type::ARRAY) {
        const gguf_array& a = kv->array;
        if (a.count != (uint64_t)hp.n_layer)
            throw gguf_error(hp.arch + ".attention.sliding_window_pattern has " + std::to_string(a.count) +
                             " entries for " + std::to_string(hp.n_layer) + " layers");
        if (a.elem_type != gguf_type::BOOL && a.elem_type != gguf_type::U8 && a.elem_type != gguf_type::I8 &&
            a.elem_type != gguf_type::I32 && a.elem_type != gguf_type::U32)
            throw gguf_error(hp.arch + ".attention.sliding_window_pattern must hold flags");
        const size_t es = gguf_type_size(a.elem_type);
        for (int64_t il = 0; il < hp.n_layer; ++il) {
            const uint64_t pos = f.array_elem_pos(a, (uint64_t)il);
            uint32_t x = 0;
            std::memcpy(&x, f.bytes() + pos, es);
            hp.swa_layers[(size_t)il] = x != 0;
        }
        return;
    }
    if (kv) period = (int)arch_int(f, hp, "attention.sliding_window_pattern", period);
    if (period < 0) throw gguf_error("attention.sliding_window_pattern is negative");
    for (int64_t il = 0; il < hp.n_layer; ++il)
        hp.swa_layers[(size_t)il] = period == 0 || (il % period) < (period - 1);
}

hparams hparams::for_layer(int64_t il) const {
    hparams h = *this;
    if (shapes.empty()) return h;
    const layer_shape& s = shapes[(size_t)il];
    h.n_head_kv = s.n_head_kv;
    h.head_dim_k = s.head_dim_k;
    h.head_dim_v = s.head_dim_v;
    h.n_ff = s.n_ff;
    h.rope.n_rot = s.n_rot;
    h.shapes.clear();  // a layer's copy describes that layer only
    return h;
}

int64_t hparams::kv_width_k(int64_t il) const {
    if (!own_kv(il)) return 0;
    return shapes.empty() ? n_embd_k() : shapes[(size_t)il].n_head_kv * shapes[(size_t)il].head_dim_k;
}

int64_t hparams::kv_width_v(int64_t il) const {
    if (!own_kv(il)) return 0;
    return shapes.empty() ? n_embd_v() : shapes[(size_t)il].n_head_kv * shapes[(size_t)il].head_dim_v;
}

namespace {

// The per-layer shapes and KV sources after the architecture's setup: only
// architectures that read them may have them, and every layer's must be
// consistent (buffers are sized for the widest, the widest values are kept
// in hp).
void check_layer_shapes(hparams& hp) {
    if (!hp.shapes.empty() && !hp.v.layer_shapes)
        throw not_implemented_error("model metadata: " + hp.arch + " with per-layer head_count_kv or "
                                    "feed_forward_length (arrays) is not supported");
    for (size_t il = 0; il < hp.shapes.size(); ++il) {
        const layer_shape& s = hp.shapes[il];
        if (!hp.is_recurrent((int64_t)il)) check_positive(s.n_head_kv, "attention.head_count_kv (a layer's)", hp.n_head);
        check_positive(s.head_dim_k, "a layer's key_length", 1 << 16);
        check_positive(s.head_dim_v, "a layer's value_length", 1 << 16);
        if (s.n_rot < 0 || s.n_rot > s.head_dim_k || s.n_rot % 2 != 0)
            throw gguf_error("model metadata: layer " + std::to_string(il) + " rotates " + std::to_string(s.n_rot) +
                             " dims of heads of " + std::to_string(s.head_dim_k));
        if (s.n_head_kv > hp.n_head_kv || s.head_dim_k > hp.head_dim_k || s.head_dim_v > hp.head_dim_v ||
            s.n_ff > hp.n_ff || s.n_rot > std::max(hp.rope.n_rot, hp.rope_n_rot_swa))
            throw std::logic_error(hp.arch + ": the model-wide shape must be the widest of its layers'");
    }
    if (hp.kv_layer.empty()) return;
    if (hp.kv_layer.size() != (size_t)hp.n_layer) throw std::logic_error(hp.arch + ": kv_layer needs one entry per layer");
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const int src = hp.kv_layer[(size_t)il];
        if (src == (int)il) continue;
        if (src < 0 || src >= il || !hp.own_kv(src) || hp.swa_layers[(size_t)src] != hp.swa_layers[(size_t)il] ||
            (!hp.shapes.empty() && (hp.shapes[(size_t)src].n_head_kv != hp.shapes[(size_t)il].n_head_kv ||
                                    hp.shapes[(size_t)src].head_dim_k != hp.shapes[(size_t)il].head_dim_k ||
                                    hp.shapes[(size_t)src].head_dim_v != hp.shapes[(size_t)il].head_dim_v)))
            throw gguf_error("model metadata: layer " + std::to_string(il) + " would reuse the KV cache of layer " +
                             std::to_string(src) + ", which is not an earlier layer of the same kind and shape "
                             "with a cache of its own");
    }
}

}  // namespace

hparams model::read_hparams(const gguf_file& f) {
    hparams hp;
    hp.arch = f.get_string("general.architecture", "");
    hp.name = f.get_string("general.name", "");
    if (hp.arch.empty()) throw gguf_error("model file lacks general.architecture");
    const arch_def* a = find_arch(hp.arch);
    if (!a) {
        std::string names;
        for (const arch_def* s : supported_archs()) names += (names.empty() ? "" : ", ") + std::string(s->name);
        throw not_implemented_error("model architecture '" + hp.arch + "' is not supported (supported: " + names + ")");
    }
    read_common_hparams(f, hp);
    // The architecture's facts first (model.h arch_def), then its own keys.
    hp.v.encoder = a->encoder;
    if (a->swa_period < 0) hp.n_swa = 0;  // it ignores a window the file declares
    set_swa_pattern(f, hp, a->swa_period < 0 ? 0 : a->swa_period);
    a->setup(f, hp);
    check_moe(hp);
    if (!hp.nope_layers.empty() && hp.nope_layers.size() != (size_t)hp.n_layer)
        throw std::logic_error(hp.arch + ": nope_layers must have one flag per layer");
    if (!std::isfinite(hp.residual_scale) || !std::isfinite(hp.logit_scale) || !std::isfinite(hp.v.embd_scale) ||
        !std::isfinite(hp.attn_scale))
        throw gguf_error("model metadata: " + hp.arch + " has a scale that is not finite");
    check_layer_shapes(hp);
    if (hp.attn_scale == 0.0f) hp.attn_scale = 1.0f / std::sqrt((float)hp.head_dim_k);
    if (hp.rope_freq_base_swa == 0.0f) hp.rope_freq_base_swa = hp.rope.freq_base;
    if (hp.rope_freq_scale_swa == 0.0f) hp.rope_freq_scale_swa = hp.rope.freq_scale;
    return hp;
}

std::shared_ptr<model> model::load(const std::string& path, const model_params& p) {
    const bool vocab_only = p.vocab_only, use_mmap = p.use_mmap;
    std::shared_ptr<model> m(new model());
    // use_mmap false: the file read into memory (gguf.cpp read_into_memory), not mapped
    std::shared_ptr<gguf_file> file = gguf_file::open(path, !use_mmap && !vocab_only, p.huge_pages && !vocab_only);
    if (!p.kv_overrides.empty()) file->set_overrides(p.kv_overrides);
    m->file_ = file;
    const gguf_file& f = *m->file_;
    m->vocab_only_ = vocab_only;
    hparams& hp = m->hp_;
    hp.arch = f.get_string("general.architecture", "");
    hp.name = f.get_string("general.name", "");
    for (const gguf_tensor_info& t : f.tensors()) {
        m->size_bytes_ += t.nbytes;
        m->n_params_ += (uint64_t)t.n_elements();
    }
    if (vocab_only) {
        if (const gguf_kv* kv = f.find_kv("tokenizer.ggml.tokens"); kv && kv->type == gguf_type::ARRAY)
            hp.n_vocab = (int64_t)kv->array.count;
        // Read leniently (any architecture): what n_ctx 0 resolves to.
        hp.n_ctx_train = std::max<int64_t>(0, f.get_int(hp.arch + ".context_length", 0));
        return m;
    }
    hp = read_hparams(f);
    if (hp.v.encoder) load_encoder_weights(f, hp, m->w_);
    else load_weights(f, hp, m->w_);
    hp.rope.freq_factors = nullptr;  // set per context from weights().rope_freqs
    if (!hp.shapes.empty())
        for (int64_t il = 0; il < hp.n_layer; ++il) m->layer_hp_.push_back(hp.for_layer(il));
    return m;
}

std::vector<std::pair<std::string, const weight_view*>> model::matrices() const {
    std::vector<std::pair<std::string, const weight_view*>> out;
    auto add = [&](const std::string& name, const weight_view& w) {
        if (w.data) out.emplace_back(name, &w);
    };
    if (hp_.v.encoder || vocab_only_) return out;  // adapters are for decoders
    add("output.weight", w_.output);
    for (size_t il = 0; il < w_.layers.size(); ++il) {
        const layer_weights& l = w_.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        add(p + "attn_q.weight", l.wq);
        add(p + "attn_k.weight", l.wk);
        add(p + "attn_v.weight", l.wv);
        add(p + "attn_qkv.weight", l.wqkv);
        add(p + "attn_output.weight", l.wo);
        add(p + "ffn_gate.weight", l.ffn_gate);
        add(p + "ffn_up.weight", l.ffn_up);
        add(p + "ffn_down.weight", l.ffn_down);
    }
    return out;
}

std::string model::desc() const {
    std::string size = file_->get_string("general.size_label", "");
    if (size.empty()) {
        char buf[32];
        const double n = (double)n_params_;
        if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
        else std::snprintf(buf, sizeof buf, "%.0fM", n / 1e6);
        size = buf;
    }
    const gguf_kv* kv = file_->find_kv("general.file_type");
    const char* ft = "unknown type";
    const bool is_int = kv && gguf_type_size(kv->type) != 0 && kv->type != gguf_type::F32 &&
                        kv->type != gguf_type::F64 && kv->type != gguf_type::BOOL;
    if (is_int) ft = ftype_name(file_->get_int("general.file_type", -1));
    return hp_.arch + " " + size + " " + ft;
}

}  // namespace lp
