// vocab_impl.h — private indexes of lp::vocab shared by vocab.cpp (loading,
// pieces) and vocab_tokenize.cpp (tokenizing). Not part of the public API.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "vocab/vocab.h"

namespace lp {

// A node of the unigram tokenizer's byte tries.
struct ugm_node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    token_id token = token_null;
};

inline int32_t ugm_child(const std::vector<ugm_node>& t, int32_t node, uint8_t c) {
    const auto& next = t[node].next;
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, (int32_t)INT32_MIN));
    return it != next.end() && it->first == c ? it->second : -1;
}

struct vocab::impl {
    // --- BPE merges -------------------------------------------------------
    // Every string that is a token or a merge part/result gets a symbol id;
    // a merge is keyed by its two parts' ids.
    std::deque<std::string> sym_text;                        // (n_syms); a deque, so views stay valid
    std::vector<token_id> sym_token;                         // (n_syms) token with that text, or token_null
    std::unordered_map<std::string_view, int32_t> sym_index; // views into sym_text (stable after build)
    struct merge { int32_t rank; int32_t result; };
    std::unordered_map<uint64_t, merge> merges;              // (left sym << 32 | right sym) -> merge

    int32_t sym_of(std::string_view s) const {
        auto it = sym_index.find(s);
        return it == sym_index.end() ? -1 : it->second;
    }
    static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

    // --- special tokens ---------------------------------------------------
    // Control / user-defined / unknown tokens in llama.cpp's processing order
    // (longest text first), and a byte trie over their texts.
    std::vector<token_id> specials;
    std::vector<int32_t> special_rank;                 // (n_tokens) position in `specials`, -1 if not special
    struct trie_node {
        std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
        std::vector<token_id> ends;                     // tokens whose text ends here
    };
    std::vector<trie_node> trie{trie_node{}};
    bool first_byte[256] = {};

    // --- unigram (t5) -----------------------------------------------------
    // Byte tries: every normal, user-defined and unused token (as the GGUF
    // types say), and the user-defined ones alone; node 0 is the root.
    std::vector<ugm_node> ugm_tokens{ugm_node{}}, ugm_user{ugm_node{}};
    double ugm_unknown_score = 0.0;             // lowest normal score - 10
    std::vector<uint32_t> xcda;                 // the charsmap's double array
    std::string replacements;                   // and its NUL-terminated replacement strings
    std::vector<int32_t> plamo_score;           // (n_tokens) PLaMo 2: score * 1e4 rounded, or "invalid"
};

}  // namespace lp
