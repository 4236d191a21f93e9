// moe.h — the two mixture-of-experts operations on the CPU (backend.h:
// moe_route, moe_matmul): choosing each row's experts from the router's
// logits, and the expert products, grouped by expert so that an expert's
// weight rows are read once for all the tokens that chose it and the experts
// nobody chose are not read at all.
// Not here: the layer they make (model/blocks.cpp moe_ffn_block), the
// kernels (quants/, through the trait table as matmul.h uses them).
#pragma once

#include <cstdint>
#include <vector>

#include "../backend/op_args.h"
#include "../ggml_type.h"
#include "threadpool.h"

namespace lp {

// The experts and weights of row t of a (op_args.h moe_route_args).
// work: n_expert * 2 floats.
void moe_route_row(const moe_route_args& a, int64_t t, float* work);
// Every row, on the pool.
void moe_route(const moe_route_args& a, thread_pool& pool);

// Reusable memory of moe_matmul: the slots in expert order, their converted
// activations and their outputs in that order.
struct moe_scratch {
    std::vector<int32_t> count, start, order;
    std::vector<uint8_t> act;
    std::vector<float> out;
    std::vector<int64_t> jobs;
    // Room for products of up to n_slots slots over n_expert experts whose
    // rows and columns are at most `widest` long, so a context's first pass
    // allocates nothing (and the memory planner can count it).
    void reserve(int64_t n_slots, int64_t n_expert, int64_t widest);
    static size_t reserve_bytes(int64_t n_slots, int64_t n_expert, int64_t widest);
    size_t bytes() const;
};

// backend.h moe_matmul on the pool, with the kernels of ISA level `level`.
void moe_matmul(const experts_view& w, const float* x, int64_t xs, int x_div, const int32_t* ids, int64_t n_slots,
                float* y, int64_t ys, const float* bias, thread_pool& pool, moe_scratch& scratch, isa level);

// The same with the scalar reference kernels, one slot at a time (tests).
void moe_matmul_ref(const experts_view& w, const float* x, int64_t xs, int x_div, const int32_t* ids,
                    int64_t n_slots, float* y, int64_t ys, const float* bias);

}  // namespace lp
