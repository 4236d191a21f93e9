// projector_qwen2vl.cpp — Qwen2-VL ("qwen2vl_merger"): a ViT over any image
// size (multiples of 2 patches; preprocess.py smart-resizes), patches in
// 2 x 2 merge order, the patch embedding the sum of the two temporal conv
// kernels (a still image fills both frames), 2-D RoPE on q and k, layer
// norms, quick-GELU FFN, post-LN; then each 2 x 2 block's four rows
// concatenated (4 n_embd) through mm.0 -> GELU -> mm.2.
// Qwen2.5-VL ("qwen2.5vl_merger") is the same with RMS norms, a gated SiLU
// FFN (with biases) and window attention: the merged blocks are regrouped
// window by window (windows of 112 px: llama.cpp reads no window key for
// this type), all blocks but every n_wa_pattern-th attend within their
// window, and the merger's output rows go back to raster order.
#include "../common.h"
#include "../model/blocks.h"
#include "clip_model.h"
#include "vit.h"

#include <algorithm>
#include <cstring>

namespace lp {

namespace {

void load_qwen2vl(clip_model& m) {
    clip_hparams& hp = m.hp_mut();
    clip_weights& w = m.weights_mut();
    const int64_t E = hp.n_embd, P = hp.patch_size;
    const int64_t merge = m.file().get_int("clip.vision.spatial_merge_size", 2);
    if (merge != 2)
        throw not_implemented_error("mmproj: clip.vision.spatial_merge_size " + std::to_string(merge) +
                                    " (qwen2vl_merger merges 2 x 2 patches)");
    hp.n_merge = 2;
    if (hp.head_dim % 4)
        throw value_error("mmproj: the head size " + std::to_string(hp.head_dim) + " must be a multiple of 4 for 2-D RoPE");
    if (!w.class_embd.empty() || !w.patch_bias.empty())
        throw value_error("mmproj: qwen2vl_merger has no class token or patch bias");
    hp.dynamic_size = hp.merge_order = hp.rope_2d = true;
    w.pos_embd.clear();
    const gguf_tensor_info& pe1 = m.tensor("v.patch_embd.weight.1");
    if (pe1.ne[0] != P || pe1.ne[1] != P || pe1.ne[2] != 3 || pe1.ne[3] != E || pe1.type != w.patch_embd.type)
        throw value_error("mmproj: tensor v.patch_embd.weight.1 must match v.patch_embd.weight");
    w.patch_embd1 = w.patch_embd;
    w.patch_embd1.data = m.file().tensor_data(pe1);
    const int64_t n_mid = m.tensor("mm.0.weight").ne[1];
    hp.n_out = m.tensor("mm.2.weight").ne[1];
    w.mm0 = m.matrix("mm.0.weight", 4 * E, n_mid);
    w.mm0_b = m.floats("mm.0.bias", n_mid);
    w.mm2 = m.matrix("mm.2.weight", n_mid, hp.n_out);
    w.mm2_b = m.floats("mm.2.bias", hp.n_out);
}

void load_qwen25vl(clip_model& m) {
    load_qwen2vl(m);
    clip_hparams& hp = m.hp_mut();
    const std::string key = "clip.vision.n_wa_pattern";
    if (!m.file().has_key(key)) throw value_error("mmproj: metadata key " + key + " is missing (required by qwen2.5vl_merger)");
    hp.n_wa_pattern = m.file().get_int(key, 0);
    if (hp.n_wa_pattern < 1 || hp.n_wa_pattern > 1 << 16)
        throw value_error("mmproj: " + key + " = " + std::to_string(hp.n_wa_pattern) + " must be positive");
    hp.window_px = 112;
    hparams& b = hp.blocks;
    b.v.norm = norm_kind::rms;
    b.swa_layers.assign((size_t)hp.n_layer, 0);  // windowed layers use the second mask slot
    for (int il = 0; il < (int)hp.n_layer; ++il) b.swa_layers[(size_t)il] = hp.full_attention(il) ? 0 : 1;
    for (const layer_weights& L : m.weights().layers)
        if (!L.ffn_gate.data) throw value_error("mmproj: qwen2.5vl_merger blocks need ffn_gate.weight");
}

int64_t n_tokens_qwen2vl(const clip_model&, patch_grid g) { return g.n() / 4; }

int64_t work_width_qwen2vl(const clip_model& m) { return std::max(m.weights().mm0.n_rows, m.hp().n_out); }

void project_qwen2vl(pass& p, const clip_model& m, patch_grid g, rows feats, projector_work& wk, float* out) {
    const clip_weights& w = m.weights();
    const int64_t n_mid = w.mm0.n_rows;
    const rows merged{feats.p, 4 * feats.s};  // four consecutive rows = one 2 x 2 block
    const rows h{wk.a.data(), n_mid};
    const window_layout win = window_order(m.hp(), g);
    const rows y{win.idx.empty() ? out : wk.b.data(), m.hp().n_out};
    p.set_n(g.n() / 4);
    p.matmul(w.mm0, merged, h);
    p.add_bias(h, w.mm0_b);
    p.act_mul(ffn_act::gelu, h, nullptr, 0, n_mid);
    p.matmul(w.mm2, h, y);
    p.add_bias(y, w.mm2_b);
    p.finish();  // read on the host below
    if (!win.idx.empty())  // window order -> raster order
        for (size_t src = 0; src < win.idx.size(); ++src)
            std::memcpy(out + src * (size_t)y.s, y.p + (size_t)win.idx[src] * (size_t)y.s, sizeof(float) * (size_t)y.s);
}

}  // namespace

extern const projector_def projector_qwen2vl = {"qwen2vl_merger", load_qwen2vl, n_tokens_qwen2vl, work_width_qwen2vl,
                                                project_qwen2vl};
extern const projector_def projector_qwen25vl = {"qwen2.5vl_merger", load_qwen25vl, n_tokens_qwen2vl,
                                                 work_width_qwen2vl, project_qwen2vl};

}  // namespace lp
