// projector_idefics3.cpp — Idefics3 / SmolVLM: SigLIP tower, then a pixel
// shuffle by s = clip.vision.projector.scale_factor (each s x s block of
// patches becomes one token whose features are the block's patches, rows
// outer, columns inner) and the linear mm.model.fc.weight.
#include "../common.h"
#include "../model/blocks.h"
#include "clip_model.h"

#include <cstring>

namespace lp {

namespace {

void load_idefics3(clip_model& m) {
    clip_hparams& hp = m.hp_mut();
    clip_weights& w = m.weights_mut();
    if (w.pos_embd.empty()) throw value_error("mmproj: tensor v.position_embd.weight is missing (needed by projector " + hp.projector + ")");
    hp.n_merge = m.file().get_int("clip.vision.projector.scale_factor", 1);
    if (hp.n_merge < 1 || hp.n_side() % hp.n_merge)
        throw value_error("mmproj: clip.vision.projector.scale_factor " + std::to_string(hp.n_merge) +
                          " does not divide the " + std::to_string(hp.n_side()) + " patches per side");
    const int64_t n_in = hp.n_embd * hp.n_merge * hp.n_merge;
    hp.n_out = m.tensor("mm.model.fc.weight").ne[1];
    w.fc = m.matrix("mm.model.fc.weight", n_in, hp.n_out);
}

int64_t n_tokens_idefics3(const clip_model& m, patch_grid) {
    const int64_t s = m.hp().n_side() / m.hp().n_merge;
    return s * s;
}

int64_t work_width_idefics3(const clip_model& m) { return m.hp().n_embd * m.hp().n_merge * m.hp().n_merge; }

void project_idefics3(pass& p, const clip_model& m, patch_grid, rows feats, projector_work& wk, float* out) {
    const clip_hparams& hp = m.hp();
    const int64_t E = hp.n_embd, k = hp.n_merge, side = hp.n_side(), s = side / k, n_in = E * k * k;
    float* shuffled = wk.a.data();  // (s * s, E k²)
    for (int64_t Y = 0; Y < s; ++Y)
        for (int64_t X = 0; X < s; ++X)
            for (int64_t dy = 0; dy < k; ++dy)
                for (int64_t dx = 0; dx < k; ++dx)
                    std::memcpy(shuffled + (Y * s + X) * n_in + (dy * k + dx) * E,
                                feats.p + ((Y * k + dy) * side + X * k + dx) * feats.s, sizeof(float) * (size_t)E);
    p.set_n(s * s);
    p.matmul(m.weights().fc, rows{shuffled, n_in}, rows{out, hp.n_out});
    p.flush();
}

}  // namespace

extern const projector_def projector_idefics3 = {"idefics3", load_idefics3, n_tokens_idefics3, work_width_idefics3,
                                                 project_idefics3};

}  // namespace lp
