// pretokenize_split.h — the hand-written word splitters of the BPE
// pre-tokenizers (private to pretokenize.cpp). llama.cpp runs these patterns
// through its own code instead of std::regex, with a few differences from
// what the regexes say (noted where they are), so we follow that code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "vocab/unicode.h"

namespace lp::pretok {

constexpr uint32_t k_out = 0xFFFFFFFFu;  // "no codepoint": outside the piece

// One piece [ini, end) of the codepoints being split; emit(e) closes a word
// at e (empty words are dropped).
struct piece_cursor {
    const std::vector<uint32_t>& cpts;
    size_t ini, end;
    size_t prev;
    std::vector<size_t>& out;

    uint32_t cpt(size_t p) const { return p >= ini && p < end ? cpts[p] : k_out; }
    uint16_t flags(size_t p) const { return p >= ini && p < end ? cpt_flags(cpts[p]) : 0; }
    void emit(size_t e) {
        if (e > prev) out.push_back(e - prev);
        prev = e;
    }
};

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
void split_gpt2(piece_cursor& c);

// Llama 3's pattern and its relatives:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?L+|\p{N}{1,D}| ?[^\s L \p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with D = max_digits (3 for Llama 3, 1 for Qwen 2) and L = \p{L}, or
// [\p{L}\p{M}] with `marks` (Qwen 3.5).
void split_llama3_like(piece_cursor& c, size_t max_digits, bool marks);

// Kimi K2: Han runs, then Llama-3-like words of non-Han letters with an
// optional trailing contraction.
void split_kimi_k2(piece_cursor& c);

// AFMoE (and Tiny Aya's "\d{1,3}(?=(?:\d{3})*\b)"): digit runs split in
// threes from the right; the text before a run stays in the run's first word.
void split_afmoe_digits(piece_cursor& c);

// [^\n]+|[\n]+ (Gemma 4)
void split_newlines(piece_cursor& c);

}  // namespace lp::pretok
