// vision_model.h — a loaded vision encoder ready to run: the clip_model, its
// thread pool, and a CPU backend with all work memory for one image, kept
// for the last patch grid (fixed-size types: always the same one). encode()
// takes one image chunk's pixels and writes the projector's output
// embeddings. Calls are serialised (one image at a time per model).
// Self-attention runs the explicit or the flash path of cpu/attention.h
// (flash_attn: -1 auto, 0 off, 1 on; auto: see path_for). Both are
// non-causal over the image's rows; Qwen2.5-VL's windowed layers are the
// same call with a block-diagonal mask.
// gpu >= 0 (a build with a GPU backend, backend/registry.h): the tower and
// the projector run on that GPU device instead (its attention; the weights
// are uploaded on first use; the activations live in its mapped memory).
// Not here: loading (clip_model.h), the tower (vit.h), the projectors.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "../backend/cpu_backend.h"
#include "../cpu/threadpool.h"
#include "../model/blocks.h"
#include "clip_model.h"
#include "vit.h"

namespace lp {

class vision_model {
public:
    // flash_attn: -1 auto, 0 off, 1 on (value_error otherwise).
    vision_model(const std::string& path, int n_threads, int flash_attn = -1, int gpu = -1);

    const clip_model& model() const { return *m_; }
    // The patch grid of an h x w pixel image; value_error when the projector
    // cannot take that size.
    patch_grid grid_for(int64_t h, int64_t w) const;
    int64_t n_tokens(patch_grid g) const { return m_->projector().n_tokens(*m_, g); }
    int64_t n_tokens_fixed() const;  // fixed-size types: tokens per chunk; 0 for dynamic ones
    int64_t n_out() const { return m_->hp().n_out; }
    int n_threads() const { return pool_.n_threads(); }
    int flash_attn() const { return flash_attn_; }  // the option: -1 auto, 0 off, 1 on
    int gpu() const { return gpu_; }                 // the GPU device, or -1: the CPU
    // The attention path an image of grid g runs.
    attention_path path_for(patch_grid g) const;

    // pixels (3, h, w) float32, normalised, h x w a size grid_for accepts.
    // out: (n_tokens(grid_for(h, w)), n_out()) floats.
    void encode(const float* pixels, int64_t h, int64_t w, float* out);

private:
    struct state {
        state(const clip_model& m, patch_grid g, thread_pool& pool, attention_path path, int gpu);
        patch_grid grid;
        std::unique_ptr<backend> be;  // the CPU's, or the Vulkan device's
        run_state rs;
        vit_state st;
        projector_work work;
    };
    std::shared_ptr<clip_model> m_;
    int flash_attn_;
    int gpu_;
    thread_pool pool_;
    std::unique_ptr<state> s_;
    std::mutex mu_;
};

}  // namespace lp
