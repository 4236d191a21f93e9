// projector_gemma3.cpp — Gemma 3: SigLIP tower (no class token, post-LN),
// then the patch grid average-pooled in k x k blocks
// (k = clip.vision.projector.scale_factor), RMS-normed with
// mm.soft_emb_norm.weight and multiplied by mm.input_projection.weight,
// which the file stores transposed (n_embd rows of the text width; it is
// transposed once at load, keeping F16 exact).
#include "../common.h"
#include "../model/blocks.h"
#include "clip_model.h"

namespace lp {

namespace {

void load_gemma3(clip_model& m) {
    clip_hparams& hp = m.hp_mut();
    clip_weights& w = m.weights_mut();
    if (w.pos_embd.empty()) throw value_error("mmproj: tensor v.position_embd.weight is missing (needed by projector " + hp.projector + ")");
    const int64_t E = hp.n_embd;
    hp.n_merge = m.file().get_int("clip.vision.projector.scale_factor", 4);
    if (hp.n_merge < 1 || hp.n_side() % hp.n_merge)
        throw value_error("mmproj: clip.vision.projector.scale_factor " + std::to_string(hp.n_merge) +
                          " does not divide the " + std::to_string(hp.n_side()) + " patches per side");
    w.soft_emb_norm = m.floats("mm.soft_emb_norm.weight", E);
    if (m.tensor("mm.input_projection.weight").ne[1] != E)
        throw value_error("mmproj: tensor mm.input_projection.weight must have " + std::to_string(E) + " rows (ne[1])");
    w.input_proj = m.transposed("mm.input_projection.weight");
    hp.n_out = w.input_proj.n_rows;
}

int64_t n_tokens_gemma3(const clip_model& m, patch_grid) {
    const int64_t s = m.hp().n_side() / m.hp().n_merge;
    return s * s;
}

int64_t work_width_gemma3(const clip_model& m) { return m.hp().n_embd; }

void project_gemma3(pass& p, const clip_model& m, patch_grid, rows feats, projector_work& wk, float* out) {
    const clip_hparams& hp = m.hp();
    const int64_t E = hp.n_embd, k = hp.n_merge, side = hp.n_side(), s = side / k;
    float* pooled = wk.a.data();  // (s * s, E)
    // Average pooling in the order ggml's pool_2d sums: rows of the block,
    // then columns, one float sum divided by k².
    for (int64_t Y = 0; Y < s; ++Y)
        for (int64_t X = 0; X < s; ++X) {
            float* dst = pooled + (Y * s + X) * E;
            for (int64_t e = 0; e < E; ++e) {
                float acc = 0.0f;
                for (int64_t ky = 0; ky < k; ++ky)
                    for (int64_t kx = 0; kx < k; ++kx) acc += feats.p[((Y * k + ky) * side + X * k + kx) * feats.s + e];
                dst[e] = acc / (float)(k * k);
            }
        }
    const rows x{pooled, E};
    p.set_n(s * s);
    p.norm(norm_kind::rms, x, x, m.weights().soft_emb_norm, {}, E, hp.eps);
    p.matmul(m.weights().input_proj, x, rows{out, hp.n_out});
    p.flush();
}

}  // namespace

extern const projector_def projector_gemma3 = {"gemma3", load_gemma3, n_tokens_gemma3, work_width_gemma3,
                                               project_gemma3};

}  // namespace lp
