// clip_model.cpp — see clip_model.h. Reads the clip.vision.* keys llama.cpp's
// clip_model_loader reads for the supported types and the ViT tensors
// v.patch_embd / v.position_embd / v.blk.<i>.*, then hands the projector
// tensors to the type's projector_def.
#include "clip_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../common.h"

namespace lp {

extern const projector_def projector_mlp;
extern const projector_def projector_gemma3;
extern const projector_def projector_idefics3;
extern const projector_def projector_qwen2vl;
extern const projector_def projector_qwen25vl;

const std::vector<const projector_def*>& supported_projectors() {
    static const std::vector<const projector_def*> table = {&projector_mlp, &projector_gemma3, &projector_idefics3,
                                                             &projector_qwen2vl, &projector_qwen25vl};
    return table;
}

std::string supported_projector_names() {
    std::string s;
    for (const projector_def* d : supported_projectors()) s += (s.empty() ? "" : ", ") + std::string(d->name);
    return s;
}

namespace {

std::string shape_of(const gguf_tensor_info& t) {
    std::string s = "[";
    for (uint32_t i = 0; i < t.n_dims; ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
    return s + "]";
}

int64_t req_int(const gguf_file& f, const std::string& key, int64_t lo, int64_t hi) {
    if (!f.has_key(key)) throw value_error("mmproj: metadata key " + key + " is missing");
    const int64_t v = f.get_int(key, 0);
    if (v < lo || v > hi)
        throw value_error("mmproj: " + key + " = " + std::to_string(v) + " is out of range (" + std::to_string(lo) +
                          ".." + std::to_string(hi) + ")");
    return v;
}

}  // namespace

std::vector<int64_t> read_feature_layers(const gguf_file& f, int64_t n_layer) {
    const std::string key = "clip.vision.feature_layer";
    std::vector<int64_t> layers;
    const gguf_kv* kv = f.find_kv(key);
    if (!kv) return layers;
    if (kv->type != gguf_type::ARRAY || kv->array.elem_type != gguf_type::I32)
        throw value_error("mmproj: " + key + " must be an array of i32, got " +
                          (kv->type == gguf_type::ARRAY ? "an array of " + std::string(gguf_type_name(kv->array.elem_type))
                                                        : std::string(gguf_type_name(kv->type))));
    for (uint64_t i = 0; i < kv->array.count; ++i) {
        const int64_t layer = f.scalar_at<int32_t>(f.array_elem_pos(kv->array, i));
        if (layer > n_layer)
            throw value_error("mmproj: " + key + " holds " + std::to_string(layer) + ", above clip.vision.block_count " +
                              std::to_string(n_layer) + " (the deepest hidden state is the output of the last block)");
        if (layer >= 0) layers.push_back(layer);
    }
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    return layers;
}

const gguf_tensor_info& clip_model::tensor(const std::string& name) const {
    const gguf_tensor_info* t = file_->find_tensor(name);
    if (!t) throw value_error("mmproj: tensor " + name + " is missing (needed by projector " + hp_.projector + ")");
    return *t;
}

weight_view clip_model::matrix(const std::string& name, int64_t n_cols, int64_t n_rows) const {
    const gguf_tensor_info& t = tensor(name);
    if (t.ne[0] != n_cols || t.ne[1] != n_rows || t.ne[2] != 1 || t.ne[3] != 1)
        throw value_error("mmproj: tensor " + name + " has shape " + shape_of(t) + ", expected [" +
                          std::to_string(n_cols) + ", " + std::to_string(n_rows) + "]");
    const type_traits& tr = traits(t.type);
    if (!tr.supported || (!tr.vec_dot && !tr.vec_dot_ref))
        throw not_implemented_error("mmproj: tensor " + name + " has type " + type_name(t.type) +
                                    ", which this build cannot compute with");
    weight_view w;
    w.type = t.type;
    w.n_rows = n_rows;
    w.n_cols = n_cols;
    w.data = file_->tensor_data(t);
    w.row_stride = row_size(t.type, n_cols);
    return w;
}

std::vector<float> clip_model::floats(const std::string& name, int64_t n) const {
    const gguf_tensor_info& t = tensor(name);
    if (t.n_elements() != n)
        throw value_error("mmproj: tensor " + name + " has shape " + shape_of(t) + ", expected " + std::to_string(n) +
                          " elements");
    const type_traits& tr = traits(t.type);
    if (!tr.to_float || t.ne[0] % tr.block_size != 0)
        throw not_implemented_error("mmproj: tensor " + name + " has type " + type_name(t.type) +
                                    ", which cannot be read");
    std::vector<float> v((size_t)n);
    // Row by row: a block type's blocks never straddle rows.
    const uint8_t* src = static_cast<const uint8_t*>(file_->tensor_data(t));
    const size_t rs = row_size(t.type, t.ne[0]);
    for (int64_t r = 0; r < n / t.ne[0]; ++r) tr.to_float(src + (size_t)r * rs, v.data() + r * t.ne[0], t.ne[0]);
    return v;
}

weight_view clip_model::transposed(const std::string& name) {
    const gguf_tensor_info& t = tensor(name);
    if (t.n_dims != 2) throw value_error("mmproj: tensor " + name + " has shape " + shape_of(t) + ", expected 2-D");
    const int64_t c = t.ne[0], r = t.ne[1];  // file: r rows of c
    const std::vector<float> src = floats(name, c * r);
    const bool half = t.type == ggml_type::F16;
    weight_view w;
    w.type = half ? ggml_type::F16 : ggml_type::F32;
    w.n_rows = c;
    w.n_cols = r;
    w.row_stride = (half ? 2 : 4) * (size_t)r;
    owned_.emplace_back(w.row_stride * (size_t)c);
    uint8_t* dst = owned_.back().data();
    for (int64_t i = 0; i < c; ++i)
        for (int64_t j = 0; j < r; ++j) {
            const float v = src[(size_t)(j * c + i)];
            if (half) {
                const uint16_t h = fp32_to_fp16(v);
                std::memcpy(dst + (size_t)(i * r + j) * 2, &h, 2);
            } else {
                std::memcpy(dst + (size_t)(i * r + j) * 4, &v, 4);
            }
        }
    w.data = dst;
    return w;
}

std::shared_ptr<clip_model> clip_model::load(const std::string& path) {
    std::shared_ptr<clip_model> m(new clip_model());
    m->file_ = gguf_file::open(path);
    const gguf_file& f = *m->file_;
    const std::string arch = f.get_string("general.architecture", "");
    if (arch != "clip")
        throw value_error("mmproj: general.architecture is '" + arch + "', not 'clip': not a projector file");
    if (!f.get_bool("clip.has_vision_encoder", false))
        throw value_error("mmproj: clip.has_vision_encoder is missing or false: no vision encoder");

    clip_hparams& hp = m->hp_;
    hp.projector = f.get_string("clip.projector_type", f.get_string("clip.vision.projector_type", "mlp"));
    if (hp.projector == "qwen2.5o") hp.projector = "qwen2.5vl_merger";  // omni files: the vision half
    for (const projector_def* d : supported_projectors())
        if (hp.projector == d->name) m->proj_ = d;
    if (!m->proj_)
        throw not_implemented_error("mmproj: projector type '" + hp.projector +
                                    "' has no vision encoder in this build (supported: " + supported_projector_names() +
                                    ")");

    const std::string v = "clip.vision.";
    hp.n_embd = req_int(f, v + "embedding_length", 1, 1 << 16);
    hp.n_ff = req_int(f, v + "feed_forward_length", 1, 1 << 20);
    hp.n_layer = req_int(f, v + "block_count", 1, 1024);
    hp.n_head = req_int(f, v + "attention.head_count", 1, 1024);
    if (hp.n_embd % hp.n_head)
        throw value_error("mmproj: " + v + "embedding_length " + std::to_string(hp.n_embd) +
                          " is not divisible by attention.head_count " + std::to_string(hp.n_head));
    hp.head_dim = hp.n_embd / hp.n_head;
    const int64_t n_head_kv = f.get_int(v + "attention.head_count_kv", hp.n_head);
    if (n_head_kv != hp.n_head)
        throw not_implemented_error("mmproj: grouped key/value heads (" + v + "attention.head_count_kv) in a vision tower");
    hp.image_size = req_int(f, v + "image_size", 1, 8192);
    hp.patch_size = req_int(f, v + "patch_size", 1, 65535);
    if (hp.image_size % hp.patch_size)
        throw value_error("mmproj: " + v + "patch_size " + std::to_string(hp.patch_size) + " does not divide " + v +
                          "image_size " + std::to_string(hp.image_size));
    const double eps = f.get_float(v + "attention.layer_norm_epsilon", -1.0);
    if (!(eps > 0.0) || !std::isfinite(eps))
        throw value_error("mmproj: " + v + "attention.layer_norm_epsilon is missing or not positive");
    hp.eps = (float)eps;
    const bool gelu = f.get_bool("clip.use_gelu", false), silu = f.get_bool("clip.use_silu", false);
    if (gelu && silu) throw value_error("mmproj: clip.use_gelu and clip.use_silu are both true");
    hp.n_layer_run = hp.n_layer;
    // Checked for every type, as llama.cpp's loader does; only the types whose
    // graph stacks them keep them.
    std::vector<int64_t> feature_layers = read_feature_layers(f, hp.n_layer);
    if (m->proj_->stacks_feature_layers) hp.feature_layers = std::move(feature_layers);

    // The view of the shared blocks (model/blocks.h): a bidirectional
    // pre-norm encoder with layer norms, biases and one ungated FFN.
    hparams& b = hp.blocks;
    b.arch = "clip";
    b.n_embd = hp.n_embd;
    b.n_layer = hp.n_layer;
    b.n_head = b.n_head_kv = hp.n_head;
    b.head_dim_k = b.head_dim_v = hp.head_dim;
    b.n_ff = hp.n_ff;
    b.norm_eps = hp.eps;
    b.attn_scale = 1.0f / std::sqrt((float)hp.head_dim);
    b.causal = false;
    b.rope.n_rot = 0;
    b.v.norm = norm_kind::layer;
    b.v.act = gelu ? ffn_act::gelu : silu ? ffn_act::silu : ffn_act::gelu_quick;
    b.v.qkv_bias = true;

    // ---- ViT tensors ----
    clip_weights& w = m->w_;
    const int64_t E = hp.n_embd, P = hp.patch_size;
    const gguf_tensor_info& pe = m->tensor("v.patch_embd.weight");
    if (pe.ne[0] != P || pe.ne[1] != P || pe.ne[2] != 3 || pe.ne[3] != E)
        throw value_error("mmproj: tensor v.patch_embd.weight has shape " + shape_of(pe) + ", expected [" +
                          std::to_string(P) + ", " + std::to_string(P) + ", 3, " + std::to_string(E) + "]");
    {
        // The conv kernel as E rows of 3·P·P: the layout of the file already.
        const type_traits& tr = traits(pe.type);
        if (!tr.supported || (!tr.vec_dot && !tr.vec_dot_ref) || (3 * P * P) % tr.block_size)
            throw not_implemented_error("mmproj: tensor v.patch_embd.weight has type " + std::string(type_name(pe.type)) +
                                        ", which this build cannot compute with");
        w.patch_embd = weight_view{pe.type, E, 3 * P * P, m->file_->tensor_data(pe), row_size(pe.type, 3 * P * P)};
    }
    w.patch_bias = m->floats_opt("v.patch_embd.bias", E);
    w.class_embd = m->floats_opt("v.class_embd", E);
    w.pre_ln = m->floats_opt("v.pre_ln.weight", E);
    w.pre_ln_b = m->floats_opt("v.pre_ln.bias", E);
    w.post_ln = m->floats_opt("v.post_ln.weight", E);
    w.post_ln_b = m->floats_opt("v.post_ln.bias", E);
    if (m->has("v.position_embd.weight"))  // fixed-size towers; their projector_def requires it
        w.pos_embd = m->floats("v.position_embd.weight", m->n_pos(patch_grid{hp.n_side(), hp.n_side()}) * E);

    w.layers.resize((size_t)hp.n_layer);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        layer_weights& L = w.layers[(size_t)il];
        const std::string p = "v.blk." + std::to_string(il) + ".";
        L.attn_norm = m->floats(p + "ln1.weight", E);
        L.attn_norm_b = m->floats_opt(p + "ln1.bias", E);  // (RMS-norm towers have none)
        L.ffn_norm = m->floats(p + "ln2.weight", E);
        L.ffn_norm_b = m->floats_opt(p + "ln2.bias", E);
        L.wq = m->matrix(p + "attn_q.weight", E, E);
        L.wk = m->matrix(p + "attn_k.weight", E, E);
        L.wv = m->matrix(p + "attn_v.weight", E, E);
        L.wo = m->matrix(p + "attn_out.weight", E, E);
        L.bq = m->floats_opt(p + "attn_q.bias", E);
        L.bk = m->floats_opt(p + "attn_k.bias", E);
        L.bv = m->floats_opt(p + "attn_v.bias", E);
        L.bo = m->floats_opt(p + "attn_out.bias", E);
        if (m->has(p + "ffn_gate.weight")) {  // gated FFN: act(gate x + b) * (up x + b)
            L.ffn_gate = m->matrix(p + "ffn_gate.weight", E, hp.n_ff);
            L.ffn_gate_b = m->floats_opt(p + "ffn_gate.bias", hp.n_ff);
        }
        // Old converters named fc1 / fc2 the other way round; llama.cpp
        // swaps them back when "down" takes n_embd inputs.
        std::string up = "ffn_up", down = "ffn_down";
        if (m->tensor(p + "ffn_down.weight").ne[0] == E) std::swap(up, down);
        L.ffn_up = m->matrix(p + up + ".weight", E, hp.n_ff);
        L.ffn_down = m->matrix(p + down + ".weight", hp.n_ff, E);
        L.ffn_up_b = m->floats_opt(p + up + ".bias", hp.n_ff);
        L.ffn_down_b = m->floats_opt(p + down + ".bias", E);
    }
    m->proj_->load(*m);
    // Feature layer 0 (the embeddings) runs no block at all; otherwise a
    // tower needs at least one.
    if (hp.n_layer_run < (hp.feature_layers.empty() ? 1 : 0) || hp.n_layer_run > hp.n_layer)
        throw value_error("mmproj: no vision block left to run (" + v + "block_count " + std::to_string(hp.n_layer) + ")");
    return m;
}

}  // namespace lp
