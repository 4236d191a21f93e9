// vision_model.cpp — see vision_model.h.
#include "vision_model.h"

#include "../backend/registry.h"
#include "../common.h"

namespace lp {

namespace {

std::unique_ptr<backend> make_backend(const clip_model& m, patch_grid g, thread_pool& pool, attention_path path,
                                      int gpu) {
    if (gpu < 0) {
        auto be = std::make_unique<cpu_backend>(m.hp().blocks, m.n_pos(g), m.n_pos(g), pool.n_threads(), path);
        be->use_pool(pool);
        return be;
    }
    return create_gpu_backend(device{device::kind::gpu, gpu});
}

device device_of(int gpu) { return gpu < 0 ? device::host() : device{device::kind::gpu, gpu}; }

}  // namespace

vision_model::state::state(const clip_model& m, patch_grid g, thread_pool& pool, attention_path path, int gpu)
    : grid(g),
      be(make_backend(m, g, pool, path, gpu)),
      rs(m.hp().blocks, m.n_pos(g), m.n_pos(g), device_of(gpu)),
      st(m, g, rs) {
    const int64_t width = m.projector().work_width(m);
    work.a.resize((size_t)(m.n_pos(g) * width));
    work.b.resize((size_t)(m.n_pos(g) * width));
}

namespace {

int checked_flash_attn(int v) {
    if (v < -1 || v > 1) throw value_error("flash_attn must be -1 (auto), 0 (off) or 1 (on), got " + std::to_string(v));
    return v;
}

// flash_attn = auto: the flash path from this many rows on. The attention op
// alone (F16 keys / values, 16 heads, every row sees every row; CPU seconds,
// AVX2 on a shared Zen 3, 1 thread): at 16-64 rows the paths are within 30%
// either way; 197 rows (head 64): flash 2.3x faster; 577 (CLIP-L 336 px):
// 3.5-7.8x; 729 (SigLIP 384 px, head 72): 2.4x; 1025: 5x. The explicit path
// writes an n_rows x n_rows score matrix per head, which leaves the caches.
constexpr int64_t kAutoFlashRows = 128;

}  // namespace

static int checked_gpu(int gpu) {
    if (gpu < -1) throw value_error("vision encoder: gpu must be -1 (the CPU) or a GPU device number, got " +
                                    std::to_string(gpu));
    if (gpu < 0) return gpu;
    if (const std::string why = no_gpu_reason(); !why.empty())
        throw value_error("vision encoder: gpu=" + std::to_string(gpu) + ": " + why);
    if (gpu >= (int)gpu_slots().size())
        throw value_error("vision encoder: gpu=" + std::to_string(gpu) + " but there are " + gpu_count_phrase());
    return gpu;
}

vision_model::vision_model(const std::string& path, int n_threads, int flash_attn, int gpu)
    : m_(clip_model::load(path)), flash_attn_(checked_flash_attn(flash_attn)), gpu_(checked_gpu(gpu)),
      pool_(n_threads) {
    if (!m_->hp().dynamic_size) {
        const patch_grid g = grid_for(m_->hp().image_size, m_->hp().image_size);
        s_ = std::make_unique<state>(*m_, g, pool_, path_for(g), gpu_);
    }
}

attention_path vision_model::path_for(patch_grid g) const {
    const bool flash = flash_attn_ == 1 || (flash_attn_ == -1 && m_->n_pos(g) >= kAutoFlashRows);
    return flash ? attention_path::flash : attention_path::explicit_softmax;
}

patch_grid vision_model::grid_for(int64_t h, int64_t w) const {
    const clip_hparams& hp = m_->hp();
    const std::string size = std::to_string(h) + " x " + std::to_string(w);
    if (!hp.dynamic_size) {
        if (h != hp.image_size || w != hp.image_size)
            throw value_error("vision encoder: pixels of " + size + ", but projector " + hp.projector + " takes " +
                              std::to_string(hp.image_size) + " x " + std::to_string(hp.image_size) +
                              " (preprocess the image first)");
        return patch_grid{hp.n_side(), hp.n_side()};
    }
    const int64_t step = 2 * hp.patch_size;  // whole 2 x 2 merge blocks
    if (h <= 0 || w <= 0 || h % step || w % step)
        throw value_error("vision encoder: pixels of " + size + "; projector " + hp.projector +
                          " takes heights and widths that are multiples of " + std::to_string(step) +
                          " (preprocess the image first)");
    // Attention masks take n_patches² bits: 32768 patches (8192 image tokens, twice
    // llama.cpp's default Qwen budget) is 128 MB of mask.
    const int64_t n_patches = (h / hp.patch_size) * (w / hp.patch_size);
    if (n_patches > 32768)
        throw value_error("vision encoder: an image of " + size + " pixels has " + std::to_string(n_patches) +
                          " patches, more than 32768 (resize it smaller)");
    return patch_grid{w / hp.patch_size, h / hp.patch_size};
}

int64_t vision_model::n_tokens_fixed() const { return s_ && !m_->hp().dynamic_size ? n_tokens(s_->grid) : 0; }

void vision_model::encode(const float* pixels, int64_t h, int64_t w, float* out) {
    const patch_grid g = grid_for(h, w);
    std::lock_guard<std::mutex> lock(mu_);
    if (!s_ || s_->grid.nx != g.nx || s_->grid.ny != g.ny) {
        s_.reset();
        s_ = std::make_unique<state>(*m_, g, pool_, path_for(g), gpu_);
    }
    pass p(*s_->be, s_->rs, nullptr, m_->n_pos(g));
    try {
        const rows feats = vit_forward(p, *m_, s_->st, pixels);
        m_->projector().project(p, *m_, g, feats, s_->work, out);
        p.finish();  // a device's results are in `out`
    } catch (...) {
        s_->be->discard();
        throw;
    }
}

}  // namespace lp
