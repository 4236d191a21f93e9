// imatrix.cpp — see imatrix.h.
#include "imatrix.h"

#include <algorithm>
#include <cmath>

#include "common.h"

namespace lp {

imatrix_collector::imatrix_collector(const gguf_file& f) {
    for (const gguf_tensor_info& t : f.tensors())
        if (t.name.compare(0, 4, "blk.") == 0) names_.emplace(f.tensor_data(t), t.name);
}

imatrix_entry* imatrix_collector::entry_for(const void* data, int64_t n_cols, int64_t n_mat) {
    auto it = seen_.find(data);
    if (it == seen_.end()) {
        auto name = names_.find(data);
        if (name == names_.end()) return nullptr;  // the output head, a token table: not a layer's
        imatrix_entry e;
        e.name = name->second;
        e.n_cols = n_cols;
        e.n_mat = n_mat;
        e.sum2.assign((size_t)(n_cols * n_mat), 0.0);
        e.count.assign((size_t)n_mat, 0);
        it = seen_.emplace(data, std::move(e)).first;
    }
    if (it->second.n_cols != n_cols || it->second.n_mat != n_mat)
        throw value_error("imatrix: " + it->second.name + " is used with two shapes");
    return &it->second;
}

static void add_squares(double* acc, const float* x, int64_t n) {
    for (int64_t j = 0; j < n; ++j) acc[j] += (double)x[j] * (double)x[j];
}

static void check_finite(const imatrix_entry& e, const double* acc) {
    for (int64_t j = 0; j < e.n_cols; ++j)
        if (!std::isfinite(acc[j])) throw value_error("imatrix: non-finite activations enter " + e.name);
}

void imatrix_collector::add(const weight_view& w, const float* x, int64_t xs, int64_t n) {
    if (n < kMinRows) return;
    std::lock_guard<std::mutex> lock(mutex_);
    imatrix_entry* e = entry_for(w.data, w.n_cols, 1);
    if (!e) return;
    for (int64_t t = 0; t < n; ++t) add_squares(e->sum2.data(), x + t * xs, w.n_cols);
    check_finite(*e, e->sum2.data());
    e->count[0] += n;
}

void imatrix_collector::add_experts(const experts_view& w, const float* x, int64_t xs, int x_div,
                                    const int32_t* ids, int64_t n_slots) {
    std::lock_guard<std::mutex> lock(mutex_);
    imatrix_entry* e = entry_for(w.all.data, w.all.n_cols, w.n_expert);
    if (!e) return;
    const int64_t K = w.all.n_cols;
    for (int64_t s = 0; s < n_slots; ++s) {
        const int32_t ex = ids[s];
        if (ex < 0 || ex >= w.n_expert) throw value_error("imatrix: expert id out of range in " + e->name);
        add_squares(e->sum2.data() + ex * K, x + (s / x_div) * xs, K);
        e->count[(size_t)ex] += 1;
    }
    for (int64_t ex = 0; ex < w.n_expert; ++ex) check_finite(*e, e->sum2.data() + ex * K);
}

std::vector<imatrix_entry> imatrix_collector::entries() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<imatrix_entry> out;
    out.reserve(seen_.size());
    for (const auto& kv : seen_) out.push_back(kv.second);
    std::sort(out.begin(), out.end(), [](const imatrix_entry& a, const imatrix_entry& b) { return a.name < b.name; });
    return out;
}

}  // namespace lp
