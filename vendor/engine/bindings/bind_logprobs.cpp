// bind_logprobs.cpp — _engine.logprob_rows: perplexity's and KL divergence's
// row arithmetic (cpu/logprobs.h) on arrays of logits, with the GIL released:
//   nll(logits, targets)                  -log p(target) per row
//   store_rows(logits, targets, out)      llama-perplexity's stored rows
//   kl_divergence(logits, base, targets)  per-row KL statistics
// Every argument is checked here (shapes, dtypes, token ids in range), so
// the kernels never read outside the arrays. `isa` picks the kernel level
// ("best": the one the engine uses; the tests compare the levels).
// Not here: running sums, statistics and files (llamapy/perplexity.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "common.h"
#include "cpu/features.h"
#include "cpu/logprobs.h"
#include "py_common.h"

namespace py = pybind11;
using namespace lp;

namespace {

using f32_array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using i32_array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

// A level this CPU can run and this build has (a kernel of another level would fault).
isa usable_isa(const std::string& name) {
    const isa lv = parse_isa(name);
    bool compiled = false;
    for (isa c : compiled_isas()) compiled |= c == lv;
    if (!compiled || !isa_at_least(cpu_best_isa(), lv))
        throw value_error(std::string("ISA level '") + isa_name(lv) + "' is not available here (this CPU and build: " +
                          isa_name(cpu_best_isa()) + ")");
    return lv;
}

struct rows_in {
    const float* logits;
    const int32_t* targets;
    int64_t n_rows, n_vocab;
};

// logits (n_rows, n_vocab) float32 and targets (n_rows) ids in [0, n_vocab).
rows_in check_rows(const f32_array& logits, const i32_array& targets) {
    if (logits.ndim() != 2) throw value_error("logits must be 2-D (rows, n_vocab)");
    const int64_t n_rows = logits.shape(0), n_vocab = logits.shape(1);
    if (n_vocab < 1) throw value_error("logits have no columns");
    if (targets.ndim() != 1 || targets.shape(0) != n_rows)
        throw value_error("targets must be 1-D with one id per row of logits (" + std::to_string(n_rows) + ")");
    const int32_t* t = targets.data();
    for (int64_t i = 0; i < n_rows; ++i)
        if (t[i] < 0 || t[i] >= n_vocab)
            throw value_error("target " + std::to_string(t[i]) + " (row " + std::to_string(i) +
                              ") is outside the vocabulary of " + std::to_string(n_vocab));
    return {logits.data(), t, n_rows, n_vocab};
}

// A C-contiguous uint16 array (n_rows, row words), writable when asked.
uint16_t* check_stored(py::array& a, const rows_in& r, bool write, const char* what) {
    const int64_t words = logprob_row_words(r.n_vocab);
    if (!a.dtype().is(py::dtype::of<uint16_t>()) || a.ndim() != 2 || a.shape(0) != r.n_rows ||
        a.shape(1) != words || !(a.flags() & py::array::c_style))
        throw value_error(std::string(what) + " must be a C-contiguous uint16 array (" + std::to_string(r.n_rows) +
                          ", " + std::to_string(words) + ")");
    if (write && !a.writeable()) throw value_error(std::string(what) + " is read-only");
    return static_cast<uint16_t*>(write ? a.mutable_data() : const_cast<void*>(a.data()));
}

py::array_t<double> nll_op(const f32_array& logits, const i32_array& targets, int n_threads, const std::string& level) {
    const rows_in r = check_rows(logits, targets);
    const isa lv = usable_isa(level);
    py::array_t<double> nll(r.n_rows);
    double* out = nll.mutable_data();
    thread_pool& pool = pool_for(n_threads);
    {
        py::gil_scoped_release nogil;
        nll_rows(lv, r.logits, r.n_rows, r.n_vocab, r.targets, out, pool);
    }
    return nll;
}

py::array_t<double> store_op(const f32_array& logits, const i32_array& targets, py::array out, int n_threads,
                             const std::string& level) {
    const rows_in r = check_rows(logits, targets);
    uint16_t* rows = check_stored(out, r, true, "out");
    const isa lv = usable_isa(level);
    py::array_t<double> nll(r.n_rows);
    double* np = nll.mutable_data();
    thread_pool& pool = pool_for(n_threads);
    {
        py::gil_scoped_release nogil;
        store_logprob_rows(lv, r.logits, r.n_rows, r.n_vocab, r.targets, rows, np, pool);
    }
    return nll;
}

py::tuple kld_op(const f32_array& logits, py::array base, const i32_array& targets, int n_threads,
                 const std::string& level) {
    const rows_in r = check_rows(logits, targets);
    const uint16_t* b = check_stored(base, r, false, "base");
    const isa lv = usable_isa(level);
    py::array_t<double> kld(r.n_rows);
    py::array_t<float> p_diff(r.n_rows), nll(r.n_rows), nll_base(r.n_rows);
    py::array_t<bool> same_top(r.n_rows);
    const kld_row_out out{kld.mutable_data(), p_diff.mutable_data(), nll.mutable_data(), nll_base.mutable_data(),
                          reinterpret_cast<uint8_t*>(same_top.mutable_data())};
    thread_pool& pool = pool_for(n_threads);
    {
        py::gil_scoped_release nogil;
        kld_rows(lv, r.logits, b, r.n_rows, r.n_vocab, r.targets, out, pool);
    }
    return py::make_tuple(kld, p_diff, nll, nll_base, same_top);
}

}  // namespace

void bind_logprobs(py::module_& m) {
    py::module_ lpm = m.def_submodule("logprob_rows", "Perplexity's and KL divergence's row arithmetic on logits.");
    lpm.def("row_words", [](int64_t n_vocab) {
        if (n_vocab < 1) throw value_error("n_vocab must be positive");
        return logprob_row_words(n_vocab);
    }, py::arg("n_vocab"), "uint16 words of one stored row: two float32 (scale, min log-prob), then one level per "
       "vocabulary entry, padded to an even count.");
    lpm.def("nll", &nll_op, py::arg("logits"), py::arg("targets"), py::arg("n_threads") = 0, py::arg("isa") = "best",
            "-log softmax(logits[i])[targets[i]] per row of logits (rows, n_vocab) float32: float64 (rows).\n"
            "n_threads 0: the default count.");
    lpm.def("store_rows", &store_op, py::arg("logits"), py::arg("targets"), py::arg("out"), py::arg("n_threads") = 0,
            py::arg("isa") = "best",
            "Write llama-perplexity's stored log-probability rows of logits into out (rows, row_words(n_vocab))\n"
            "uint16; returns each row's -log p(target) as stored (float64).");
    lpm.def("kl_divergence", &kld_op, py::arg("logits"), py::arg("base"), py::arg("targets"), py::arg("n_threads") = 0,
            py::arg("isa") = "best",
            "Per row of logits against stored rows base (rows, row_words(n_vocab)) uint16: (kld float64,\n"
            "p_diff float32 = p(target) - p_base(target), nll float32, nll_base float32, same_top bool).");
}
