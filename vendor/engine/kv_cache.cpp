// kv_cache.cpp — see kv_cache.h.
#include "kv_cache.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>
#include <string>

#include "common.h"

namespace lp {

std::string kv_cache_type_names() {
    std::string out;
    for (ggml_type t : kKvCacheTypes) out += std::string(out.empty() ? "" : ", ") + type_name(t);
    return out;
}

std::string kv_cache_type_ids() {
    std::string out;
    for (ggml_type t : kKvCacheTypes) out += std::string(out.empty() ? "" : ", ") + std::to_string((int)t);
    return out;
}

namespace {

constexpr uint32_t kStateMagic = 0x564b504c;  // "LPKV"
constexpr uint32_t kStateVersion = 3;  // 3: each cell's M-RoPE (y, x) follows its position

bool in_range(int32_t p, int32_t p0, int32_t p1) {
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = std::numeric_limits<int32_t>::max();
    return p >= p0 && p < p1;
}

template <class T> void put(std::vector<uint8_t>& out, T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
}

// Reads values from a byte range, throwing on truncation.
struct reader {
    const uint8_t* p;
    size_t n, at = 0;
    const uint8_t* take(size_t k) {
        if (k > n - at) throw value_error("KV cache state is truncated at byte " + std::to_string(at));
        const uint8_t* r = p + at;
        at += k;
        return r;
    }
    template <class T> T get() {
        T v;
        std::memcpy(&v, take(sizeof(T)), sizeof(T));
        return v;
    }
};

}  // namespace

kv_cache::kv_cache(int n_layer, int64_t n_cells, int64_t n_embd_k, int64_t n_embd_v, ggml_type type_k,
                   ggml_type type_v, const std::vector<uint8_t>& layers, const std::vector<device>& where,
                   bool values_in_keys)
    : kv_cache(n_layer, n_cells, std::vector<int64_t>((size_t)std::max(n_layer, 0), n_embd_k),
               std::vector<int64_t>((size_t)std::max(n_layer, 0), n_embd_v), type_k, type_v, layers, where,
               values_in_keys) {}

kv_cache::kv_cache(int n_layer, int64_t n_cells, const std::vector<int64_t>& n_embd_k,
                   const std::vector<int64_t>& n_embd_v, ggml_type type_k, ggml_type type_v,
                   const std::vector<uint8_t>& layers, const std::vector<device>& where, bool values_in_keys)
    : n_layer_(n_layer), n_cells_(n_cells), type_k_(type_k), type_v_(values_in_keys ? type_k : type_v),
      v_in_k_(values_in_keys) {
    if ((int)n_embd_k.size() != std::max(n_layer, 0) || (int)n_embd_v.size() != std::max(n_layer, 0))
        throw value_error("KV cache: layer widths do not match n_layer");
    for (int il = 0; il < n_layer; ++il)
        if (values_in_keys && (n_embd_v[(size_t)il] > n_embd_k[(size_t)il] ||
                               row_size(type_k, n_embd_v[(size_t)il]) == 0))
            throw value_error("KV cache: values in keys need whole blocks of " + std::string(type_name(type_k)) +
                              " within the keys");
    if (!layers.empty() && (int)layers.size() != n_layer) throw value_error("KV cache: layer flags do not match n_layer");
    if (!where.empty() && (int)where.size() != n_layer) throw value_error("KV cache: layer devices do not match n_layer");
    slot_.assign((size_t)std::max(n_layer, 0), -1);
    buf_.assign((size_t)std::max(n_layer, 0), 0);
    off_.assign((size_t)std::max(n_layer, 0), 0);
    k_row_.assign((size_t)std::max(n_layer, 0), 0);
    v_row_.assign((size_t)std::max(n_layer, 0), 0);
    std::vector<device> devs;      // the distinct devices, in layer order
    std::vector<int> n_on;         // held layers on each
    std::vector<size_t> size_on;   // their bytes
    for (int il = 0; il < n_layer; ++il) {
        if (!layers.empty() && !layers[(size_t)il]) continue;
        const device d = where.empty() ? device::host() : where[(size_t)il];
        size_t b = 0;
        while (b < devs.size() && !(devs[b] == d)) ++b;
        if (b == devs.size()) {
            devs.push_back(d);
            n_on.push_back(0);
            size_on.push_back(0);
        }
        k_row_[(size_t)il] = row_size(type_k, n_embd_k[(size_t)il]);
        v_row_[(size_t)il] = v_in_k_ ? 0 : row_size(type_v, n_embd_v[(size_t)il]);
        buf_[(size_t)il] = (int)b;
        slot_[(size_t)il] = n_on[b]++;
        off_[(size_t)il] = size_on[b];
        size_on[b] += layer_bytes(il);
        bytes_ += layer_bytes(il);
        ++n_held_;
    }
    for (ggml_type t : {type_k, type_v})
        if (!kv_cache_type_ok(t))
            throw value_error(std::string("KV cache type ") + type_name(t) + " is not supported (" +
                              kv_cache_type_names() + ")");
    if (n_layer <= 0 || n_cells <= 0 || n_held_ == 0) throw value_error("KV cache needs at least one layer and one cell");
    // Not zeroed: a cell's rows are always written before any token can see it.
    for (size_t b = 0; b < devs.size(); ++b) data_.emplace_back(devs[b], size_on[b]);
    pos_.assign((size_t)n_cells, -1);
    ext_y_.assign((size_t)n_cells, 0);
    ext_x_.assign((size_t)n_cells, 0);
    seqs_.assign((size_t)n_cells, {});
}

int64_t kv_cache::used_end() const {
    for (int64_t j = n_cells_; j > 0; --j)
        if (!seqs_[(size_t)j - 1].none()) return j;
    return 0;
}

void kv_cache::find_free(int64_t n, int32_t* cells_out) const {
    if (n > n_cells_ - n_used_)
        throw value_error("KV cache is full: the batch needs " + std::to_string(n) + " cells, " +
                          std::to_string(n_cells_ - n_used_) + " of " + std::to_string(n_cells_) +
                          " are free (free cells with kv_seq_rm, or create the context with a larger n_ctx)");
    int64_t k = 0;
    for (int64_t j = 0; j < n_cells_ && k < n; ++j)
        if (seqs_[(size_t)j].none()) cells_out[k++] = (int32_t)j;
}

void kv_cache::occupy(int32_t cell, int32_t pos, const int32_t* seqs, int n_seqs, int32_t y, int32_t x) {
    auto& s = seqs_[(size_t)cell];
    if (s.none()) ++n_used_;
    pos_[(size_t)cell] = pos;
    ext_y_[(size_t)cell] = y;
    ext_x_[(size_t)cell] = x;
    for (int i = 0; i < n_seqs; ++i) s.set((size_t)seqs[i]);
}

void kv_cache::release(int32_t cell) {
    auto& s = seqs_[(size_t)cell];
    if (!s.none()) --n_used_;
    s.reset();
    pos_[(size_t)cell] = -1;
}

void kv_cache::seq_rm(int seq, int32_t p0, int32_t p1) {
    for (int64_t j = 0; j < n_cells_; ++j) {
        auto& s = seqs_[(size_t)j];
        if (s.none() || !in_range(pos_[(size_t)j], p0, p1)) continue;
        if (seq < 0) s.reset();
        else s.reset((size_t)seq);
        if (s.none()) {
            pos_[(size_t)j] = -1;
            --n_used_;
        }
    }
}

void kv_cache::seq_cp(int src, int dst, int32_t p0, int32_t p1) {
    if (src == dst) return;
    for (int64_t j = 0; j < n_cells_; ++j) {
        auto& s = seqs_[(size_t)j];
        if (s.test((size_t)src) && in_range(pos_[(size_t)j], p0, p1)) s.set((size_t)dst);
    }
}

void kv_cache::seq_keep(int seq) {
    for (int64_t j = 0; j < n_cells_; ++j) {
        auto& s = seqs_[(size_t)j];
        if (s.none()) continue;
        const bool keep = s.test((size_t)seq);
        s.reset();
        if (keep) {
            s.set((size_t)seq);
        } else {
            pos_[(size_t)j] = -1;
            --n_used_;
        }
    }
}

void kv_cache::drop_before(const int32_t* limit, int n_seq, int32_t* dropped) {
    std::bitset<kMaxSequences> active;  // sequences with something to drop
    std::vector<int> list;
    for (int q = 0; q < n_seq; ++q)
        if (limit[q] != INT32_MIN) active.set((size_t)q), list.push_back(q);
    if (list.empty()) return;
    for (int64_t j = 0; j < n_cells_; ++j) {
        auto& s = seqs_[(size_t)j];
        const int32_t p = pos_[(size_t)j];
        if (p < 0 || (s & active).none()) continue;  // free, or none of the batch's sequences
        for (int q : list) {
            if (!s.test((size_t)q) || p >= limit[q]) continue;
            dropped[q] = std::max(dropped[q], p);
            s.reset((size_t)q);
        }
        if (s.none()) {
            pos_[(size_t)j] = -1;
            --n_used_;
        }
    }
}

int32_t kv_cache::seq_pos_max(int seq) const {
    int32_t m = -1;
    for (int64_t j = 0; j < n_cells_; ++j)
        if (seqs_[(size_t)j].test((size_t)seq)) m = std::max(m, pos_[(size_t)j]);
    return m;
}

int32_t kv_cache::seq_pos_min(int seq) const {
    int32_t m = -1;
    for (int64_t j = 0; j < n_cells_; ++j)
        if (seqs_[(size_t)j].test((size_t)seq) && (m < 0 || pos_[(size_t)j] < m)) m = pos_[(size_t)j];
    return m;
}

void kv_cache::clear() {
    std::fill(pos_.begin(), pos_.end(), -1);
    for (auto& s : seqs_) s.reset();
    n_used_ = 0;
}

void kv_cache::build_mask(int64_t n_tok, const int32_t* pos, const int32_t* seq, int32_t n_swa, uint64_t* mask,
                          int64_t words_per_row, int32_t* lo, int32_t* hi, bool causal, const int32_t* pos_y,
                          const int32_t* pos_x) const {
    const int64_t end = used_end();
    for (int64_t t = 0; t < n_tok; ++t) {
        uint64_t* row = mask + t * words_per_row;
        std::memset(row, 0, sizeof(uint64_t) * (size_t)((end + 63) / 64));
        const int32_t p = pos[t];
        const size_t s = (size_t)seq[t];
        int32_t first = -1, last = -1;
        for (int64_t j = 0; j < end; ++j) {
            const int32_t pj = pos_[(size_t)j];
            if (!seqs_[(size_t)j].test(s)) continue;
            if (causal) {
                if (pj > p) continue;
                if (pos_y && pj == p) {
                    const int32_t y = ext_y_[(size_t)j], x = ext_x_[(size_t)j];
                    if (y > pos_y[t] || (y == pos_y[t] && x > pos_x[t])) continue;
                }
            }
            if (n_swa > 0 && p - pj >= n_swa) continue;
            row[j >> 6] |= (uint64_t)1 << (j & 63);
            if (first < 0) first = (int32_t)j;
            last = (int32_t)j;
        }
        lo[t] = first < 0 ? 0 : first;
        hi[t] = first < 0 ? 0 : last + 1;
    }
}

size_t kv_cache::widest_k_row() const { return *std::max_element(k_row_.begin(), k_row_.end()); }
size_t kv_cache::widest_v_row() const { return *std::max_element(v_row_.begin(), v_row_.end()); }
size_t kv_cache::cell_bytes() const {
    size_t b = 0;
    for (int il = 0; il < n_layer_; ++il)
        if (holds(il)) b += k_row_[(size_t)il] + v_row_[(size_t)il];
    return b;
}

void kv_cache::write_state(std::vector<uint8_t>& out) const {
    put<uint32_t>(out, kStateMagic);
    put<uint32_t>(out, kStateVersion);
    put<uint32_t>(out, (uint32_t)n_layer_);
    put<uint32_t>(out, (uint32_t)n_held_);
    put<int32_t>(out, (int32_t)type_k_);
    put<int32_t>(out, (int32_t)type_v_);
    put<uint64_t>(out, (uint64_t)widest_k_row());
    put<uint64_t>(out, (uint64_t)widest_v_row());
    std::vector<int64_t> used;
    for (int64_t j = 0; j < n_cells_; ++j)
        if (!seqs_[(size_t)j].none()) used.push_back(j);
    put<uint64_t>(out, (uint64_t)used.size());
    for (int64_t j : used) {
        put<int32_t>(out, pos_[(size_t)j]);
        put<int32_t>(out, ext_y_[(size_t)j]);
        put<int32_t>(out, ext_x_[(size_t)j]);
        const auto& s = seqs_[(size_t)j];
        put<uint32_t>(out, (uint32_t)s.count());
        for (size_t q = 0; q < s.size(); ++q)
            if (s.test(q)) put<int32_t>(out, (int32_t)q);
    }
    const size_t at = out.size();
    out.resize(at + used.size() * cell_bytes());
    uint8_t* dst = out.data() + at;
    for (int il = 0; il < n_layer_; ++il) {
        if (!holds(il)) continue;
        const size_t kr = k_row_[(size_t)il], vr = v_row_[(size_t)il];
        for (int64_t j : used) {
            std::memcpy(dst, k(il) + (size_t)j * kr, kr);
            dst += kr;
        }
        for (int64_t j : used) {
            std::memcpy(dst, v(il) + (size_t)j * vr, vr);
            dst += vr;
        }
    }
}

size_t kv_cache::read_state(const uint8_t* data, size_t size, bool apply) {
    reader r{data, size};
    if (r.get<uint32_t>() != kStateMagic) throw value_error("not a llamapy KV cache state (bad magic)");
    const uint32_t version = r.get<uint32_t>();
    if (version != kStateVersion)
        throw value_error("KV cache state version " + std::to_string(version) + " is not supported");
    const uint32_t n_layer = r.get<uint32_t>();
    const uint32_t n_held = r.get<uint32_t>();
    const int32_t tk = r.get<int32_t>(), tv = r.get<int32_t>();
    const uint64_t k_row = r.get<uint64_t>(), v_row = r.get<uint64_t>();
    if (n_layer != (uint32_t)n_layer_ || n_held != (uint32_t)n_held_ || tk != (int32_t)type_k_ || tv != (int32_t)type_v_ ||
        k_row != widest_k_row() || v_row != widest_v_row())
        throw value_error("KV cache state was saved by a context with another model, cache types or sliding-window cache layout (swa_full)");
    const uint64_t n = r.get<uint64_t>();
    if (n > (uint64_t)n_cells_)
        throw value_error("KV cache state holds " + std::to_string(n) + " cells, this context has only " +
                          std::to_string(n_cells_));
    std::vector<int32_t> pos((size_t)n), ey((size_t)n), ex((size_t)n);
    std::vector<std::bitset<kMaxSequences>> seqs((size_t)n);
    for (uint64_t i = 0; i < n; ++i) {
        pos[i] = r.get<int32_t>();
        ey[i] = r.get<int32_t>();
        ex[i] = r.get<int32_t>();
        const uint32_t ns = r.get<uint32_t>();
        if (pos[i] < 0 || ns == 0 || ns > (uint32_t)kMaxSequences)
            throw value_error("KV cache state has a malformed cell " + std::to_string(i));
        for (uint32_t q = 0; q < ns; ++q) {
            const int32_t s = r.get<int32_t>();
            if (s < 0 || s >= kMaxSequences) throw value_error("KV cache state has a bad sequence id");
            seqs[i].set((size_t)s);
        }
    }
    const uint8_t* rows = r.take((size_t)n * cell_bytes());
    if (!apply) return r.at;
    // Everything is valid: replace the contents.
    clear();
    for (uint64_t i = 0; i < n; ++i) {
        pos_[i] = pos[i];
        ext_y_[i] = ey[i];
        ext_x_[i] = ex[i];
        seqs_[i] = seqs[i];
    }
    n_used_ = (int64_t)n;
    for (int il = 0; il < n_layer_; ++il) {
        if (!holds(il)) continue;
        const size_t kr = k_row_[(size_t)il], vr = v_row_[(size_t)il];
        std::memcpy(k(il), rows, (size_t)n * kr);
        rows += (size_t)n * kr;
        std::memcpy(v(il), rows, (size_t)n * vr);
        rows += (size_t)n * vr;
    }
    return r.at;
}

}  // namespace lp
