// cpu_backend.h — the reference backend: the ops of backend.h on the host,
// with the kernels of cpu/ (matmul, attention, row ops) and quants/ (the
// best ISA level this CPU has), spread over a thread pool. Row programs run
// fused: every op of run_rows on row t before row t+1, one pool round trip
// per call, and a single row (token generation) inline on the calling thread.
// Not here: the kernels themselves, the order of the ops (model/blocks.h).
#pragma once

#include <vector>

#include "../cpu/attention.h"
#include "../cpu/matmul.h"
#include "../cpu/moe.h"
#include "../cpu/threadpool.h"
#include "../model/model.h"
#include "backend.h"

namespace lp {

// The attention shapes of a model's layers, each once, in layer order: one
// for most models, one per kind of layer where layers differ (Gemma 4). What
// the CPU backend's attention scratch is sized for (and the memory planner
// asks for through _engine.model_shape).
std::vector<attention_shape> attention_shapes(const hparams& hp);

class cpu_backend final : public backend {
public:
    // Work memory for a context on model hp: n_ubatch rows, n_cells KV cells,
    // up to n_threads threads, attention on path `path` (every attention()
    // call runs that path).
    cpu_backend(const hparams& hp, int64_t n_ubatch, int64_t n_cells, int n_threads, attention_path path);
    // Without reserved work memory (it grows on use; attention needs the
    // sized constructor): for running single ops (the op tests).
    explicit cpu_backend(thread_pool& pool);

    // The pool the next ops run on (the context picks one per micro-batch).
    void use_pool(thread_pool& pool) { pool_ = &pool; }

    device dev() const override { return device::host(); }
    const char* name() const override { return "cpu"; }
    void matmul(const weight_view& w, const float* x, int64_t xs, float* y, int64_t ys, int64_t n,
                const lora_work& lora) override;
    void get_rows(const weight_view& table, const int32_t* ids, float* y, int64_t ys, int64_t n) override;
    void gather_rows(float* data, int64_t stride, int64_t n_cols, const int32_t* idx, int64_t n) override;
    void rope_table(const rope_params& p, const int32_t* pos, int64_t pos_stride, float* out, int64_t n) override;
    void moe_route(const moe_route_args& a) override;
    void moe_matmul(const experts_view& w, const float* x, int64_t xs, int x_div, const int32_t* ids, int64_t n_slots,
                    float* y, int64_t ys, const float* bias) override;
    void attention(const attention_args& a) override;
    void ssm_conv(const ssm_conv_args& a) override;
    void gated_delta(const gated_delta_args& a) override;
    void ssm_scan(const ssm_scan_args& a) override;
    void run_rows(const row_op* ops, int n_ops, int64_t n) override;
    size_t scratch_bytes() const override;
    size_t attention_scratch_bytes() const { return attn_.bytes(); }

private:
    // fn(t) for t in [0, n): inline for one row or one thread, else on the pool.
    template <class F> void for_rows(int64_t n, const F& fn);

    thread_pool* pool_ = nullptr;
    // throughput for encoders (their products never meet a decode step's)
    matmul_kernels kernels_ = matmul_kernels::consistent;
    matmul_scratch mm_;
    moe_scratch moe_;
    attention_scratch attn_;
    // gated_delta's chunked form, per thread (grows on a context's first prefill)
    std::vector<std::vector<float>> delta_work_;
};

}  // namespace lp
