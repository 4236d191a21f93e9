// clip_model.h — a vision encoder loaded from a projector ("mmproj") GGUF
// file (general.architecture = "clip"): the hyperparameters under
// clip.vision.*, the ViT's weights as the engine's layer_weights (so the
// shared blocks of model/blocks.h run it) and the projector's own tensors.
// Keys and tensor names are llama.cpp's (tools/mtmd/clip-impl.h); every
// missing or mis-shaped one is a value_error naming it.
//
// A projector type is one file (projector_<type>.cpp) defining a
// projector_def: which tensors it loads, how many tokens an image gives and
// the forward pass after the ViT. The table of supported types is
// supported_projectors() below.
// Not here: running the encoder (vision_model.h, vit.h), preprocessing
// (llamapy/multimodal/preprocess.py).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../gguf/gguf.h"
#include "../model/model.h"

namespace lp {

class clip_model;
class pass;
struct rows;

// The ViT's shape. `blocks` is the view the shared blocks read (n_embd,
// heads, n_ff, layer norm, the FFN activation, attn_scale).
struct clip_hparams {
    std::string projector;       // clip.projector_type ("mlp", "gemma3", "idefics3")
    int64_t n_embd = 0;          // vision width
    int64_t n_ff = 0;
    int64_t n_layer = 0;         // blocks in the file
    int64_t n_layer_run = 0;     // blocks the forward pass runs (llava: all but the last)
    // The hidden states the projector takes, from clip.vision.feature_layer
    // (llava-type projectors; see read_feature_layers): layer k is the input
    // of block k, so 0 is the embeddings after the pre-LayerNorm and k the
    // output of block k - 1. Ascending without repeats; concatenated along
    // the features in that order. n_layer_run is then the deepest one, and
    // only that one passes the post-LayerNorm (it is the tower's output).
    // Empty: the projector takes the output of the last block run.
    std::vector<int64_t> feature_layers;
    int64_t n_head = 0;
    int64_t head_dim = 0;
    int64_t image_size = 0;      // square input side (px)
    int64_t patch_size = 0;
    int64_t n_merge = 1;         // gemma3: pooling kernel; idefics3: pixel-shuffle factor
    float eps = 1e-6f;           // layer-norm epsilon
    int64_t n_out = 0;           // projector output width (the language model's n_embd)
    // Qwen2-VL towers: any image size (multiples of 2 patches), patches in
    // 2 x 2 merge order, 2-D rotary positions instead of learned ones.
    bool dynamic_size = false;
    bool merge_order = false;
    bool rope_2d = false;
    // Qwen2.5-VL window attention: every n_wa_pattern-th block attends over
    // the whole image, the others within windows of window_px pixels
    // (0: no windows).
    int64_t n_wa_pattern = 0;
    int64_t window_px = 0;
    hparams blocks;

    bool full_attention(int il) const { return n_wa_pattern <= 0 || (il + 1) % n_wa_pattern == 0; }

    int64_t n_side() const { return image_size / patch_size; }  // patches per side (fixed-size types)
    int64_t n_patches() const { return n_side() * n_side(); }
    // Width of the rows the projector reads: n_embd per feature layer.
    int64_t n_embd_proj() const { return n_embd * (feature_layers.empty() ? 1 : (int64_t)feature_layers.size()); }
};

struct clip_weights {
    weight_view patch_embd;          // (n_embd, 3 * patch * patch): conv kernel rows in (channel, y, x) order
    weight_view patch_embd1;         // Qwen2-VL: the second temporal kernel (a still image is both frames), or absent
    std::vector<float> patch_bias;   // (n_embd) or empty
    std::vector<float> class_embd;   // (n_embd) or empty (SigLIP has none)
    std::vector<float> pos_embd;     // (n_pos, n_embd) learned positions, as floats; empty with rope_2d
    std::vector<float> pre_ln, pre_ln_b;    // (n_embd) or empty
    std::vector<float> post_ln, post_ln_b;  // (n_embd) or empty
    std::vector<layer_weights> layers;      // (n_layer)
    // projector tensors (which ones: the type's projector_def)
    weight_view mm0, mm2;                   // mlp: (n_mid, n_embd), (n_out, n_mid)
    std::vector<float> mm0_b, mm2_b;
    std::vector<float> soft_emb_norm;       // gemma3: (n_embd)
    weight_view input_proj;                 // gemma3: (n_out, n_embd), transposed from the file at load
    weight_view fc;                         // idefics3: (n_out, n_embd * n_merge²)
};

// The patch grid of one image: nx x ny patches.
struct patch_grid {
    int64_t nx = 0, ny = 0;
    int64_t n() const { return nx * ny; }
};

// Work rows a projector may use, sized at load for one image.
struct projector_work {
    std::vector<float> a, b;  // (n_tok, widest intermediate) each
};

struct projector_def {
    const char* name;
    // Reads the type's tensors into m (weights and hp.n_out); may set
    // n_layer_run and other hparams from the file.
    void (*load)(clip_model& m);
    // Output tokens of one image.
    int64_t (*n_tokens)(const clip_model& m, patch_grid g);
    // Widest intermediate row the projector needs (floats), for projector_work.
    int64_t (*work_width)(const clip_model& m);
    // out (n_tokens, n_out) from the ViT's output rows feats (n_pos, n_embd_proj()).
    void (*project)(pass& p, const clip_model& m, patch_grid g, rows feats, projector_work& w, float* out);
    // The type takes clip.vision.feature_layer (llama.cpp's llava graph does;
    // its other graphs ignore the key): clip_model::load fills feature_layers.
    bool stacks_feature_layers = false;
};

// clip.vision.feature_layer as llama.cpp's clip loader reads it: an array of
// i32, no value above block_count (value_error otherwise). Negative values
// are llama.cpp's "unset" and select nothing. Returned ascending without
// repeats, because llama.cpp's graph asks "is layer k listed?" while walking
// the blocks: the listed order and repeats do not change what it stacks.
std::vector<int64_t> read_feature_layers(const gguf_file& f, int64_t n_layer);

const std::vector<const projector_def*>& supported_projectors();
std::string supported_projector_names();  // "mlp, gemma3, idefics3, qwen2vl_merger"

class clip_model {
public:
    // Opens and validates a projector file. value_error (or gguf_error) for a
    // malformed file, not_implemented_error for a projector type this build
    // does not run.
    static std::shared_ptr<clip_model> load(const std::string& path);

    const clip_hparams& hp() const { return hp_; }
    const clip_weights& weights() const { return w_; }
    const projector_def& projector() const { return *proj_; }
    const gguf_file& file() const { return *file_; }
    int64_t n_pos(patch_grid g) const { return g.n() + (w_.class_embd.empty() ? 0 : 1); }  // ViT rows

    // ---- for projector files: typed tensor access, errors name the tensor ----
    bool has(const std::string& name) const { return file_->find_tensor(name) != nullptr; }
    const gguf_tensor_info& tensor(const std::string& name) const;
    // A matrix of n_rows rows of n_cols, of a type the matmul supports.
    weight_view matrix(const std::string& name, int64_t n_cols, int64_t n_rows) const;
    // A tensor of n elements (any shape) as floats.
    std::vector<float> floats(const std::string& name, int64_t n) const;
    std::vector<float> floats_opt(const std::string& name, int64_t n) const {
        return has(name) ? floats(name, n) : std::vector<float>{};
    }
    // The transpose of a 2-D tensor (ne0 = n_rows of the result) as a matrix
    // owned by the model: F16 stays F16 (exact), other types become F32.
    weight_view transposed(const std::string& name);

    clip_hparams& hp_mut() { return hp_; }
    clip_weights& weights_mut() { return w_; }

private:
    clip_model() = default;
    std::shared_ptr<const gguf_file> file_;
    clip_hparams hp_;
    clip_weights w_;
    const projector_def* proj_ = nullptr;
    std::vector<std::vector<uint8_t>> owned_;  // transposed copies
};

}  // namespace lp
