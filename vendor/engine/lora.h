// lora.h — LoRA adapters in llama.cpp's GGUF format (general.type "adapter",
// adapter.type "lora", adapter.lora.alpha; for a base matrix W named
// "<name>", tensors "<name>.lora_a" with ne [n_in, rank] and "<name>.lora_b"
// with ne [rank, n_out]). An adapter applied with scale s adds
//   s · (alpha / rank) · B (A x)          (alpha 0: s · B (A x))
// to W x, as llama.cpp does, without touching the base weights; several
// adapters may be applied at once.
// Not here: where products happen (model/decoder.cpp asks lora_set).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cpu/matmul.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace lp {

class lora_adapter {
public:
    struct pair {
        weight_view a;  // (rank, n_in)
        weight_view b;  // (n_out, rank)
    };

    // Opens an adapter for `base`: throws gguf_error when the file is not a
    // LoRA adapter, is for another architecture, or names a matrix the base
    // lacks or with shapes that do not fit it.
    static std::shared_ptr<lora_adapter> load(const std::string& path, const model& base);

    float alpha() const { return alpha_; }
    const std::unordered_map<std::string, pair>& pairs() const { return pairs_; }
    const std::string& path() const { return file_->path(); }

private:
    lora_adapter() = default;
    std::shared_ptr<const gguf_file> file_;
    float alpha_ = 0.0f;
    std::unordered_map<std::string, pair> pairs_;
};

// The adapters active in a context, by base matrix.
class lora_set {
public:
    struct term {
        weight_view a, b;
        float scale;  // s · alpha / rank
    };

    // Replaces the active adapters (each with its scale s).
    void set(const model& base, const std::vector<std::pair<std::shared_ptr<const lora_adapter>, float>>& adapters);
    bool empty() const { return terms_.empty(); }
    // The terms of base matrix w (nullptr: none).
    const std::vector<term>* find(const weight_view* w) const {
        auto it = terms_.find(w);
        return it == terms_.end() ? nullptr : &it->second;
    }
    // Calls fn(m) for every adapter matrix m (the A and B of each term).
    template <class F> void for_each_matrix(F fn) const {
        for (const auto& entry : terms_)
            for (const term& t : entry.second) {
                fn(t.a);
                fn(t.b);
            }
    }
    int64_t max_rank() const { return max_rank_; }
    int64_t max_out() const { return max_out_; }

private:
    std::unordered_map<const weight_view*, std::vector<term>> terms_;
    std::vector<std::shared_ptr<const lora_adapter>> keep_;  // the mapped files stay open while used
    int64_t max_rank_ = 0, max_out_ = 0;
};

}  // namespace lp
