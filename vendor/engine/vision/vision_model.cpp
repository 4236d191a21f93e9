// vision_model.cpp — see vision_model.h.
#include "vision_model.h"

#include "../common.h"

namespace lp {

vision_model::vision_model(const std::string& path, int n_threads)
    : m_(clip_model::load(path)),
      pool_(n_threads),
      be_(m_->hp().blocks, m_->n_pos(), m_->n_pos(), n_threads, attention_path::explicit_softmax),
      rs_(m_->hp().blocks, m_->n_pos(), m_->n_pos(), device::host()),
      st_(*m_, rs_) {
    be_.use_pool(pool_);
    const int64_t width = m_->projector().work_width(*m_);
    work_.a.resize((size_t)(m_->n_pos() * width));
    work_.b.resize((size_t)(m_->n_pos() * width));
}

void vision_model::encode(const float* pixels, int64_t h, int64_t w, float* out) {
    const int64_t side = m_->hp().image_size;
    if (h != side || w != side)
        throw value_error("vision encoder: pixels of " + std::to_string(h) + " x " + std::to_string(w) +
                          ", but projector " + m_->hp().projector + " takes " + std::to_string(side) + " x " +
                          std::to_string(side) + " (preprocess the image first)");
    std::lock_guard<std::mutex> lock(mu_);
    pass p(be_, rs_, nullptr, m_->n_pos());
    vit_forward(p, *m_, st_, pixels);
    m_->projector().project(p, *m_, rows{rs_.x.f32(), m_->hp().n_embd}, work_, out);
}

}  // namespace lp
