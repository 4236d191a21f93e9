// recurrent_state.h — the per-sequence memory of recurrent layers (Qwen3.5's
// gated delta-net, LFM2's short convolution, Granite 4.0-H's Mamba-2), beside
// the KV cache of the attention layers.
//
// Each sequence id has one slot: for every recurrent layer, the convolution's
// last d_conv - 1 inputs per channel and the delta-net's / Mamba-2's state
// matrices (none for a short convolution; model.h ssm_hparams). The state after the token at position p summarises
// every token <= p, so unlike KV cells it cannot be cut at an arbitrary
// position: removing a sequence's suffix [p0, end) needs the state as it was
// after p0 - 1. That is what checkpoints are for: copies of a slot taken at
// chosen positions (the context takes one before and after every multi-row
// decode: prompt chunks, the end of a prompt, the start of a speculative
// draft batch), at most n_checkpoints per sequence, the lowest positions
// dropped first. rm() restores the checkpoint at exactly p0 - 1 or refuses
// (can_rm false): a state that still includes removed tokens is never kept.
// resume_at() tells the caller where it can continue without evaluating from
// the start.
//
// Where the state lives: each recurrent layer's slots are one device_buffer on
// the device that runs the layer (the context passes each layer's part's
// device, as it does for the KV cache), so a GPU layer's ops advance the
// state in place, without copying it in and out at every step. GPU buffers
// are mapped (buffer.h), so everything here (checkpoints, rm / cp, save and
// load) reads and writes them from the host; the context does so only between
// steps, after the backends' sync. Checkpoints are host copies.
//
// Not here: the ops that advance the state (backend.h ssm_conv / gated_delta / ssm_scan),
// when checkpoints are taken (context.cpp), the KV cells (kv_cache.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/buffer.h"
#include "model/model.h"

namespace lp {

class recurrent_state {
public:
    // Slots for n_seq sequences of model hp (nothing when it has no recurrent
    // layers), zeroed; where: the device of each layer (n_layer entries;
    // empty: the host).
    recurrent_state(const hparams& hp, int n_seq, int n_checkpoints, const std::vector<device>& where = {});

    bool empty() const { return n_rec_ == 0; }
    int n_checkpoints_max() const { return n_ckpt_; }
    // Layer il's convolution tails and delta-net states (il recurrent): slot s
    // at conv(il) + s * conv_floats() and delta(il) + s * delta_floats().
    float* conv(int il) { return conv_[(size_t)index_[(size_t)il]].f32(); }
    float* delta(int il) { return delta_[(size_t)index_[(size_t)il]].f32(); }
    int64_t conv_floats() const { return conv_n_; }
    int64_t delta_floats() const { return delta_n_; }

    // Last position the sequence's state includes (-1: empty).
    int32_t pos(int seq) const { return pos_[(size_t)seq]; }
    void set_pos(int seq, int32_t p) { pos_[(size_t)seq] = p; }

    // Removing positions [p0, p1) of seq (p0 < 0: 0; p1 < 0: to the end)
    // from a sequence whose first position is pos_min: possible when nothing
    // of the state is in the range, when the range covers the whole
    // sequence, or when it is a suffix [p0, end) with a checkpoint at p0 - 1.
    bool can_rm(int seq, int32_t p0, int32_t p1, int32_t pos_min) const;
    // Does it (can_rm must have said yes): clears the slot or restores the
    // checkpoint; checkpoints at removed positions go.
    void rm(int seq, int32_t p0, int32_t p1, int32_t pos_min);
    // dst becomes a copy of src (state and checkpoints).
    void cp(int src, int dst);
    void keep(int seq);        // every other slot cleared
    void clear_seq(int seq);   // empty state, no checkpoints
    void clear();

    // Copies the slot's state at its current position (nothing when empty or
    // when a checkpoint there exists already).
    void checkpoint(int seq);
    // Puts back the checkpoint at position p; false when there is none.
    bool restore(int seq, int32_t p);
    // The largest m <= n such that the sequence can continue at position m
    // keeping [0, m): the live state's pos + 1, a checkpoint's pos + 1, or 0.
    int32_t resume_at(int seq, int32_t n) const;
    int n_checkpoints(int seq) const { return (int)ckpt_[(size_t)seq].size(); }

    // Bytes of the live slots, and the most the checkpoints can hold.
    size_t bytes() const { return bytes_of(n_rec_, conv_n_, delta_n_, (int)pos_.size()); }
    size_t checkpoint_bytes_max() const { return (size_t)n_ckpt_ * bytes(); }
    size_t checkpoint_bytes() const;  // held now
    // The same from the hyperparameters alone (the memory planner's numbers).
    static size_t bytes_for(const hparams& hp, int n_seq);

    // Serialised live slots (positions and states); read_state validates
    // before it changes anything (apply=false: only validates) and returns the
    // bytes it read. Checkpoints are not saved: after a load there are none.
    void write_state(std::vector<uint8_t>& out) const;
    size_t read_state(const uint8_t* data, size_t size, bool apply);

private:
    static size_t bytes_of(int64_t n_rec, int64_t conv_n, int64_t delta_n, int n_seq) {
        return sizeof(float) * (size_t)(n_rec * (conv_n + delta_n)) * (size_t)n_seq;
    }
    struct snapshot {
        int32_t pos;
        std::vector<float> data;  // every recurrent layer's conv tail then delta state, layer by layer
    };
    void save_to(int seq, std::vector<float>& out) const;
    void load_from(int seq, const std::vector<float>& in);

    int64_t n_rec_ = 0;
    int64_t conv_n_ = 0, delta_n_ = 0;
    int n_ckpt_ = 0;
    std::vector<int> index_;                 // (n_layer) position among the recurrent layers, -1 otherwise
    std::vector<device_buffer> conv_;   // (n_rec) (n_seq, conv_floats) on the layer's device
    std::vector<device_buffer> delta_;  // (n_rec) (n_seq, delta_floats) likewise
    std::vector<int32_t> pos_;               // (n_seq)
    std::vector<std::vector<snapshot>> ckpt_;  // (n_seq) by ascending position
};

}  // namespace lp
