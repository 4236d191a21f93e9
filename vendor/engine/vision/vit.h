// vit.h — the vision transformer shared by the CLIP and SigLIP towers of the
// projector types: patch embedding (the conv kernel as a matmul over the
// image's patches, plus bias), class token (CLIP), learned positions,
// pre-LayerNorm (CLIP), then per block LN -> self-attention over every row
// (no mask) -> residual, LN -> FFN -> residual, and the post-LayerNorm where
// the file has one. The blocks are model/blocks.h's, run on the backend seam.
//
// Row order follows llama.cpp's graph: the patches in raster order and, for
// CLIP, the class token appended after them (position n_patches).
// Not here: the projector after the tower (projector_<type>.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "../model/blocks.h"
#include "clip_model.h"

namespace lp {

// Work memory of one image through the tower, sized once for the model.
struct vit_state {
    vit_state(const clip_model& m, run_state& rs);
    run_state& rs;                   // x, xb, xb2, qkv, att, ffn, masks (n_pos rows, n_pos cells)
    std::vector<float> patches;      // (n_patches, 3 * patch²) im2col of the image
    std::vector<uint16_t> k16, v16;  // (n_pos, n_embd) keys and values as F16, as llama.cpp's attention reads them
    std::vector<int32_t> cells;      // (n_pos) 0, 1, ...: where each row's key / value goes
};

// The tower over one image: pixels (3, H, W) float32, normalised, H = W =
// image_size. Leaves the output rows (n_pos, n_embd) in st.rs.x.
void vit_forward(pass& p, const clip_model& m, vit_state& st, const float* pixels);

}  // namespace lp
