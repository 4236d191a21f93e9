// kv_cache.h — the key/value cache shared by many sequences.
//
// The cache has n_cells cells. A cell holds one token's keys and values for
// every layer, its position, and the set of sequences it belongs to (a token
// of a shared prompt can belong to several). A cell with no sequence is free.
// Cells need not be contiguous or ordered: attention finds, for each query
// token, the cells that share its sequence with a position not after its own
// (and, for sliding-window layers, within the window), so sequences can be
// copied (seq_cp shares cells, no data moves), trimmed and dropped freely.
//
// Not here: the attention arithmetic (cpu/ops.h), choosing what to evaluate
// (context.h).
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "ggml_type.h"

namespace lp {

constexpr int kMaxSequences = 256;  // sequence ids are 0 .. n_seq_max-1 < kMaxSequences

// Element types a cache may hold (llama.cpp's choices for its cache): float
// ones, and block-quantized ones whose blocks (32 elements) must divide the
// head sizes. The one list: the bindings (_engine.kv_cache_types()), Python's
// option parsing and the memory planner read it.
constexpr ggml_type kKvCacheTypes[] = {
    ggml_type::F32,  ggml_type::F16,  ggml_type::BF16, ggml_type::Q8_0,   ggml_type::Q4_0,
    ggml_type::Q4_1, ggml_type::Q5_0, ggml_type::Q5_1, ggml_type::IQ4_NL,
};
constexpr bool kv_cache_type_ok(ggml_type t) {
    for (ggml_type k : kKvCacheTypes)
        if (k == t) return true;
    return false;
}
// "F32, F16, ...": the list above for messages; ids: "0, 1, 30, ...".
std::string kv_cache_type_names();
std::string kv_cache_type_ids();

class kv_cache {
public:
    // n_embd_k / n_embd_v: elements of one token's keys / values in one layer
    // (n_head_kv * head_dim). type_k / type_v: kv_cache_type_ok types.
    // layers: which of the n_layer layers this cache holds (1 = held; empty:
    // all); a model with sliding-window layers may keep those in a second,
    // smaller cache. where: the device holding each layer's keys and values
    // (n_layer entries; empty: the host), one allocation per device.
    // values_in_keys: a cell's values are the first n_embd_v elements of its
    // keys and take no room of their own (multi-head latent attention: the
    // compressed latent is both); type_v is then type_k.
    kv_cache(int n_layer, int64_t n_cells, int64_t n_embd_k, int64_t n_embd_v, ggml_type type_k, ggml_type type_v,
             const std::vector<uint8_t>& layers = {}, const std::vector<device>& where = {},
             bool values_in_keys = false);
    // The same with each layer's own widths (n_layer entries each; models
    // whose layers differ in shape, as Gemma 4's sliding-window and global
    // layers): a layer's rows are as wide as its keys and values.
    kv_cache(int n_layer, int64_t n_cells, const std::vector<int64_t>& n_embd_k, const std::vector<int64_t>& n_embd_v,
             ggml_type type_k, ggml_type type_v, const std::vector<uint8_t>& layers = {},
             const std::vector<device>& where = {}, bool values_in_keys = false);

    int n_layer() const { return n_layer_; }
    int64_t n_cells() const { return n_cells_; }
    int64_t n_used() const { return n_used_; }
    // Hadamard rotation of a quantized cache (0: none): keys (and the
    // queries meeting them) and values are rotated in blocks of this many
    // elements before they are stored; attention outputs are rotated back.
    // The rotation leaves q·k and the value mix unchanged in exact arithmetic
    // and spreads outliers across each block, so quantization loses less.
    int rot_k() const { return rot_k_; }
    int rot_v() const { return rot_v_; }
    void set_rotation(int k_block, int v_block) { rot_k_ = k_block; rot_v_ = v_block; }
    ggml_type type_k() const { return type_k_; }
    ggml_type type_v() const { return type_v_; }
    bool values_in_keys() const { return v_in_k_; }
    // Bytes of one cell's keys / values in layer il (a held one).
    size_t k_row_bytes(int il) const { return k_row_[(size_t)il]; }
    size_t v_row_bytes(int il) const { return v_in_k_ ? k_row_[(size_t)il] : v_row_[(size_t)il]; }
    // Keys / values of layer il (a held one): (n_cells, n_embd_k) / (n_cells, n_embd_v).
    bool holds(int il) const { return slot_[(size_t)il] >= 0; }
    uint8_t* k(int il) { return data_[(size_t)buf_[(size_t)il]].u8() + off_[(size_t)il]; }
    uint8_t* v(int il) { return v_in_k_ ? k(il) : k(il) + (size_t)n_cells_ * k_row_[(size_t)il]; }
    const uint8_t* k(int il) const { return data_[(size_t)buf_[(size_t)il]].u8() + off_[(size_t)il]; }
    const uint8_t* v(int il) const { return v_in_k_ ? k(il) : k(il) + (size_t)n_cells_ * k_row_[(size_t)il]; }
    size_t bytes() const { return bytes_; }
    // Keys and values of held layer il.
    size_t layer_bytes(int il) const { return (size_t)n_cells_ * (k_row_[(size_t)il] + v_row_[(size_t)il]); }
    device where(int il) const { return data_[(size_t)buf_[(size_t)il]].where(); }  // a held layer's device

    int32_t pos(int64_t cell) const { return pos_[(size_t)cell]; }
    const int32_t* positions() const { return pos_.data(); }  // (n_cells), -1 for free cells
    bool has_seq(int64_t cell, int seq) const { return seqs_[(size_t)cell].test((size_t)seq); }
    bool is_free(int64_t cell) const { return seqs_[(size_t)cell].none(); }
    // One past the highest cell in use (0 when empty).
    int64_t used_end() const;

    // Writes the indices of n free cells, lowest first, to cells_out without
    // changing anything. Throws value_error when fewer than n are free.
    void find_free(int64_t n, int32_t* cells_out) const;
    // Puts a token in a free cell. y, x: its M-RoPE height and width
    // positions (llama.cpp's cell "ext"), which order cells that share a
    // temporal position under the causal mask; 0 for other models.
    void occupy(int32_t cell, int32_t pos, const int32_t* seqs, int n_seqs, int32_t y = 0, int32_t x = 0);
    // Frees a cell (undo of occupy).
    void release(int32_t cell);

    // Sequence operations. A position range [p0, p1) with p0 < 0 meaning 0 and
    // p1 < 0 meaning "to the end"; seq < 0 in seq_rm means every sequence.
    void seq_rm(int seq, int32_t p0, int32_t p1);
    void seq_cp(int src, int dst, int32_t p0, int32_t p1);
    void seq_keep(int seq);
    // In one pass over the cells, drops every sequence s < n_seq from its
    // cells at positions < limit[s] (a sliding window has moved past them;
    // INT32_MIN: keep all) and raises dropped[s] to the highest position dropped.
    void drop_before(const int32_t* limit, int n_seq, int32_t* dropped);
    int32_t seq_pos_max(int seq) const;  // -1 when the sequence is empty
    int32_t seq_pos_min(int seq) const;  // -1 when the sequence is empty
    void clear();

    // Which cells each query token sees: for token t at position pos[t] in
    // sequence seq[t], bit j of mask row t (words_per_row 64-bit words) is set
    // when cell j holds seq[t] at a position <= pos[t] and, if n_swa > 0, at a
    // position > pos[t] - n_swa. lo[t] / hi[t] bound the set bits.
    // M-RoPE (pos_y, pos_x: the queries' height and width positions, else
    // null): a cell at the query's own temporal position is hidden when its
    // (y, x) comes after the query's in raster order, as llama.cpp masks
    // the tokens of one image. causal=false (llama_set_causal_attn(false)):
    // every cell of the sequence is seen whatever its position; the window
    // (which only ever hides older cells) still applies.
    void build_mask(int64_t n_tok, const int32_t* pos, const int32_t* seq, int32_t n_swa, uint64_t* mask,
                    int64_t words_per_row, int32_t* lo, int32_t* hi, bool causal = true,
                    const int32_t* pos_y = nullptr, const int32_t* pos_x = nullptr) const;

    // Serialised cells in use (positions, sequences, keys and values of every
    // layer); read_state validates everything before changing the cache.
    void write_state(std::vector<uint8_t>& out) const;
    // Reads what write_state wrote and returns the bytes it takes. With
    // apply=false it only validates; with apply=true it replaces the contents
    // (after validating: a bad state throws and changes nothing).
    size_t read_state(const uint8_t* data, size_t size, bool apply);

private:
    int n_layer_;
    std::vector<int> slot_;        // (n_layer) index of each held layer in its buffer, -1 when not held
    std::vector<int> buf_;         // (n_layer) the buffer (data_) of each held layer
    std::vector<size_t> off_;      // (n_layer) byte offset of each held layer in its buffer
    int n_held_ = 0;
    int64_t n_cells_;
    int rot_k_ = 0, rot_v_ = 0;
    ggml_type type_k_, type_v_;
    bool v_in_k_ = false;          // values_in_keys
    // (n_layer) bytes of one cell's keys / values in each layer (values in keys: 0)
    std::vector<size_t> k_row_, v_row_;
    size_t bytes_ = 0;             // all held layers
    // The state's header names the widest rows (the same model and cache
    // types give the same); a cell's rows of every held layer.
    size_t widest_k_row() const;
    size_t widest_v_row() const;
    size_t cell_bytes() const;
    // One per device: (its held layers, [keys (n_cells, k_row) | values (n_cells, v_row)])
    std::vector<device_buffer> data_;
    std::vector<int32_t> pos_;     // (n_cells) position of each cell, -1 when free
    std::vector<int32_t> ext_y_, ext_x_;  // (n_cells) M-RoPE height / width position (0 otherwise)
    std::vector<std::bitset<kMaxSequences>> seqs_;  // (n_cells) sequences of each cell
    int64_t n_used_ = 0;
};

}  // namespace lp
