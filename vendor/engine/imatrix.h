// imatrix.h — the importance-matrix hook (llama-imatrix's statistics): for
// every weight matrix of a layer ("blk.*"), the sum over the evaluated rows
// of each input column's squared activation, and how many rows were summed.
// llama-quantize weighs its rounding errors with these sums.
//
// A context holds a collector only while one is switched on
// (context::set_imatrix); the forward pass then hands it every product's
// input (model/blocks.cpp pass::matmul / moe_matmul). Off, it costs one null
// check per product. As llama-imatrix: plain products over fewer than 16
// rows are not counted (its scheduler only asks for batches of 16 or more);
// expert products count per expert, one row per (token, expert) slot.
// Not here: the GGUF file (llamapy/imatrix.py writes it).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/op_args.h"
#include "gguf/gguf.h"

namespace lp {

struct imatrix_entry {
    std::string name;            // the weight's GGUF name, "blk.3.ffn_down.weight"
    int64_t n_cols = 0;          // input width
    int64_t n_mat = 1;           // matrices: 1, or the experts of a 3-D tensor
    std::vector<double> sum2;    // (n_mat, n_cols) sums of squared inputs
    std::vector<int64_t> count;  // (n_mat) rows summed
};

class imatrix_collector {
public:
    // Names every "blk.*" tensor of the file by the address of its data
    // (which the model's weight views point at).
    explicit imatrix_collector(const gguf_file& f);

    // n rows of x (row t at x + t * xs floats) entering the product with w.
    void add(const weight_view& w, const float* x, int64_t xs, int64_t n);
    // The expert products' inputs: slot s reads x row s / x_div and expert ids[s].
    void add_experts(const experts_view& w, const float* x, int64_t xs, int x_div, const int32_t* ids,
                     int64_t n_slots);
    // The entries seen so far, sorted by name.
    std::vector<imatrix_entry> entries() const;

    static constexpr int64_t kMinRows = 16;

private:
    imatrix_entry* entry_for(const void* data, int64_t n_cols, int64_t n_mat);

    std::unordered_map<const void*, std::string> names_;
    std::unordered_map<const void*, imatrix_entry> seen_;
    mutable std::mutex mutex_;
};

}  // namespace lp
