// projector_mlp.cpp — LLaVA 1.5 / 1.6 ("mlp"): CLIP ViT with a class token,
// features from the second-to-last block (the converter already dropped the
// last one, and llama.cpp's llava graph stops one block earlier still: it
// runs block_count - 1 blocks), then mm.2 · GELU(mm.0 · x + b0) + b2 per
// patch. LLaVA 1.6's anyres tiles are separate image chunks in mtmd, each
// encoded like a 1.5 image; model.image_newline is not used by that path.
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
    if (m.file().has_key("clip.vision.feature_layer"))
        throw not_implemented_error("mmproj: clip.vision.feature_layer (stacked feature layers, granite) is not supported");
    const int64_t E = hp.n_embd;
    const int64_t n_mid = m.tensor("mm.0.weight").ne[1];
    hp.n_out = m.tensor("mm.2.weight").ne[1];
    w.mm0 = m.matrix("mm.0.weight", E, n_mid);
    w.mm0_b = m.floats("mm.0.bias", n_mid);
    w.mm2 = m.matrix("mm.2.weight", n_mid, hp.n_out);
    w.mm2_b = m.floats("mm.2.bias", hp.n_out);
    hp.n_layer_run = hp.n_layer - 1;
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

extern const projector_def projector_mlp = {"mlp", load_mlp, n_tokens_mlp, work_width_mlp, project_mlp};

}  // namespace lp
