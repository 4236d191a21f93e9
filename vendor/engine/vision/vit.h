// vit.h — the vision transformer shared by the CLIP and SigLIP towers of the
// projector types: patch embedding (the conv kernel as a matmul over the
// image's patches, plus bias), class token (CLIP), learned positions,
// pre-LayerNorm (CLIP), then per block LN -> self-attention over every row
// (no mask) -> residual, LN -> FFN -> residual, and the post-LayerNorm where
// the file has one. The blocks are model/blocks.h's, run on the backend seam.
// With feature layers (llava files carrying clip.vision.feature_layer) the
// hidden state entering each listed block, and the output, are copied side
// by side into one wider row per position.
//
// Row order follows llama.cpp's graph: the patches in raster order and, for
// CLIP, the class token appended after them (position n_patches); Qwen2-VL
// takes them in 2 x 2 merge order (each block's four patches together) and
// rotates q and k by the patch's (row, column) instead of learned positions.
// Not here: the projector after the tower (projector_<type>.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "../model/blocks.h"
#include "clip_model.h"

namespace lp {

// Qwen2.5-VL's windows over the merged 2 x 2 blocks (llama.cpp's
// window_idx / inv_window_idx): windows of window_px / patch / 2 blocks a
// side in raster order, the blocks of each window made consecutive.
struct window_layout {
    std::vector<int32_t> idx;     // (n_blocks) raster block -> its place in window order
    std::vector<int32_t> inv;     // (n_blocks) place in window order -> raster block
    std::vector<int32_t> lo, hi;  // (n_blocks) per window-ordered block: its window's range of places
};
window_layout window_order(const clip_hparams& hp, patch_grid g);  // empty vectors without windows

// Work memory of one image through the tower, sized once for the model.
struct vit_state {
    vit_state(const clip_model& m, patch_grid g, run_state& rs);
    patch_grid grid;
    run_state& rs;                   // x, xb, xb2, qkv, att, ffn, masks (n_pos rows, n_pos cells)
    std::vector<float> patches;      // (n_patches, 3 * patch²) im2col of the image
    std::vector<float> embd1;        // (n_patches, n_embd) the second temporal kernel's output (Qwen2-VL)
    std::vector<float> rope_cs;      // (n_pos, head_dim) 2-D RoPE cos/sin pairs (Qwen2-VL)
    window_layout windows;           // Qwen2.5-VL: token order and the windowed layers' mask (rs.mask[1])
    std::vector<uint16_t> k16, v16;  // (n_pos, n_embd) keys and values as F16, as llama.cpp's attention reads them
    std::vector<int32_t> cells;      // (n_pos) 0, 1, ...: where each row's key / value goes
    device_buffer stacked;           // (n_pos, n_embd_proj) the feature layers side by side, on rs's device; empty without them
};

// The tower over one image: pixels (3, ny·patch, nx·patch) float32,
// normalised. Returns the rows the projector reads, (n_pos, n_embd_proj()):
// the tower's output in st.rs.x, or with feature layers (clip_hparams::
// feature_layers) their hidden states side by side in st.stacked.
rows vit_forward(pass& p, const clip_model& m, vit_state& st, const float* pixels);

}  // namespace lp
