// projector_mlp.cpp — LLaVA 1.5 / 1.6 ("mlp"): CLIP ViT with a class token,
// features from the second-to-last block (the converter already dropped the
// last one, and llama.cpp's llava graph stops one block earlier still: it
// runs block_count - 1 blocks), then mm.2 · GELU(mm.0 · x + b0) + b2 per
// patch. LLaVA 1.6's anyres tiles are separate image chunks in mtmd, each
// encoded like a 1.5 image; model.image_newline is not used by that path.
//
// Files with clip.vision.feature_layer (the legacy converter writes it from
// the checkpoint's vision_feature_layer; Granite Vision lists several) run
// blocks up to the deepest listed layer and feed the projector the listed
// hidden states side by side (clip_hparams::feature_layers), so mm.0 takes
// n_embd per layer. The converter already cut the file to that many blocks.
//
// The rows kept are llama.cpp's: with a class token, rows 1..n_patches of
// the tower (its graph appends the class token after the patches and then
// skips row 0, so the class token's row is projected and patch 0's is not).
#include "../common.h"
#include "../model/blocks.h"
#include "clip_model.h"

namespace lp {

namespace {

void load_mlp(clip_model& m) {
    clip_hparams& hp = m.hp_mut();
    clip_weights& w = m.weights_mut();
    if (w.pos_embd.empty()) throw value_error("mmproj: tensor v.position_embd.weight is missing (needed by projector " + hp.projector + ")");
    if (m.has("mm.3.weight"))
        throw not_implemented_error("mmproj: Yi-style LLaVA projector (mlp_norm: mm.3.weight) has no encoder in this build");
    const int64_t n_in = hp.n_embd_proj();
    const gguf_tensor_info& mm0 = m.tensor("mm.0.weight");
    if (mm0.ne[0] != n_in) {
        std::string from = "the vision tower's output (clip.vision.embedding_length)";
        if (!hp.feature_layers.empty()) {
            from = "the hidden states of feature layers";
            for (size_t i = 0; i < hp.feature_layers.size(); ++i)
                from += (i ? ", " : " ") + std::to_string(hp.feature_layers[i]);
            from += " (clip.vision.feature_layer) side by side, " + std::to_string(hp.n_embd) +
                    " each (clip.vision.embedding_length)";
        }
        throw value_error("mmproj: tensor mm.0.weight takes rows of " + std::to_string(mm0.ne[0]) +
                          " features, but the projector's input is " + std::to_string(n_in) + " wide: " + from);
    }
    const int64_t n_mid = mm0.ne[1];
    hp.n_out = m.tensor("mm.2.weight").ne[1];
    w.mm0 = m.matrix("mm.0.weight", n_in, n_mid);
    w.mm0_b = m.floats("mm.0.bias", n_mid);
    w.mm2 = m.matrix("mm.2.weight", n_mid, hp.n_out);
    w.mm2_b = m.floats("mm.2.bias", hp.n_out);
    // Without feature layers llama.cpp's llava graph stops one block before
    // the file's last; with them, at the deepest one.
    hp.n_layer_run = hp.feature_layers.empty() ? hp.n_layer - 1 : hp.feature_layers.back();
}

int64_t n_tokens_mlp(const clip_model& m, patch_grid) { return m.hp().n_patches(); }

int64_t work_width_mlp(const clip_model& m) { return m.weights().mm0.n_rows; }

void project_mlp(pass& p, const clip_model& m, patch_grid g, rows feats, projector_work& wk, float* out) {
    const clip_weights& w = m.weights();
    const int64_t n_mid = w.mm0.n_rows;
    // rows 1..n_patches with a class token (llama.cpp skips row 0), else all
    const int64_t first = w.class_embd.empty() ? 0 : 1;
    const rows sel{feats.p + first * feats.s, feats.s};
    const rows h{wk.a.data(), n_mid};
    const rows y{out, m.hp().n_out};
    p.set_n(n_tokens_mlp(m, g));
    p.matmul(w.mm0, sel, h);
    p.add_bias(h, w.mm0_b);
    p.act_mul(ffn_act::gelu, h, nullptr, 0, n_mid);
    p.matmul(w.mm2, h, y);
    p.add_bias(y, w.mm2_b);
    p.flush();
}

}  // namespace

extern const projector_def projector_mlp = {"mlp", load_mlp, n_tokens_mlp, work_width_mlp, project_mlp,
                                            /*stacks_feature_layers=*/true};

}  // namespace lp
