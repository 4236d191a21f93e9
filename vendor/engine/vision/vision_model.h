// vision_model.h — a loaded vision encoder ready to run: the clip_model, its
// thread pool, a CPU backend and all work memory for one image, allocated
// once. encode() takes one image chunk's pixels and writes the projector's
// output embeddings. Calls are serialised (one image at a time per model).
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
    vision_model(const std::string& path, int n_threads);

    const clip_model& model() const { return *m_; }
    int64_t n_tokens() const { return m_->projector().n_tokens(*m_); }
    int64_t n_out() const { return m_->hp().n_out; }
    int n_threads() const { return pool_.n_threads(); }

    // pixels (3, h, w) float32, normalised; h = w = image_size (value_error
    // otherwise). out: (n_tokens(), n_out()) floats.
    void encode(const float* pixels, int64_t h, int64_t w, float* out);

private:
    std::shared_ptr<clip_model> m_;
    thread_pool pool_;
    cpu_backend be_;
    run_state rs_;
    vit_state st_;
    projector_work work_;
    std::mutex mu_;
};

}  // namespace lp
