// grammar_vocab.h — a vocabulary's token texts prepared for grammar matching.
// Built once per vocabulary and shared (immutable) by every grammar and
// sampler that uses it:
//   - each token's bytes, and its code points decoded once;
//   - a trie over the texts in depth-first order, so every subtree is a
//     contiguous run of nodes and of tokens: filtering the vocabulary walks
//     shared prefixes once and can accept or drop a whole subtree at a time.
// grammar_vocab_index adds what depends on one grammar as well: the code point
// class of every trie node and, per node, a bit mask of the classes below it.
//
// Token kinds: end-of-generation ids (allowed only where the grammar can
// end); empty texts (never allowed); texts that are whole UTF-8 (in the trie);
// texts ending inside a UTF-8 sequence (checked one by one); texts that are
// not UTF-8 on their own, such as a lone continuation byte (allowed only to
// finish a sequence an earlier token began).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar.h"

namespace lp {

struct grammar_vocab {
    enum class kind : uint8_t { empty, eog, whole, tail, fragment };
    struct token {
        uint32_t byte_begin, n_bytes;  // in bytes
        uint32_t cp_begin, n_cps;      // in cps (whole and tail tokens)
        utf8_partial tail;             // tail tokens: the unfinished last sequence
        kind k;
    };

    // `texts[i]` is token i's text as bytes (what it prints as); `eog_ids`
    // are the end-of-generation tokens. Throws value_error on bad ids.
    grammar_vocab(const std::vector<std::string>& texts, const std::vector<int32_t>& eog_ids);

    int32_t n_tokens() const { return (int32_t)tokens.size(); }

    std::vector<token> tokens;          // (n_tokens)
    std::string bytes;                  // all texts, concatenated
    std::vector<uint32_t> cps;          // all decoded code points, concatenated
    std::vector<int32_t> eog_ids;
    std::vector<int32_t> tail_ids;      // tokens of kind tail

    // Trie over whole tokens, nodes in depth-first order; node 0 is the root.
    // Node n's subtree is nodes [n, n + node_size[n]) and its tokens are
    // trie_ids[node_tok[n] .. node_tok[n + node_size[n]]) (node_tok has a
    // sentinel); the first node_n_end[n] of them end at n.
    std::vector<uint32_t> node_cp;      // (n_nodes) code point on the edge into n
    std::vector<uint32_t> node_size;    // (n_nodes)
    std::vector<uint32_t> node_parent;  // (n_nodes)
    std::vector<uint32_t> node_tok;     // (n_nodes + 1)
    std::vector<uint32_t> node_n_end;   // (n_nodes)
    std::vector<uint16_t> node_height;  // (n_nodes) longest path below n (capped at 65535)
    std::vector<int32_t> trie_ids;      // (n_whole) token ids in trie order
    uint32_t n_nodes() const { return (uint32_t)node_cp.size(); }
};

// What the trie walk needs from one grammar and one vocabulary.
struct grammar_vocab_index {
    std::vector<uint16_t> node_class;   // (n_nodes) class of node_cp
    std::vector<uint64_t> below;        // (n_nodes) class bits of all strict descendants
    std::vector<uint8_t> class_bit;     // (n_classes) bit of each class in those masks
    std::vector<uint32_t> class_weight; // (n_classes) trie nodes of each class
};

// The index of `g` over `v`, built on first use and cached in the grammar.
std::shared_ptr<const grammar_vocab_index> vocab_index_for(const grammar& g,
                                                           const std::shared_ptr<const grammar_vocab>& v);

}  // namespace lp
