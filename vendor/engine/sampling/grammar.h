// grammar.h — GBNF grammars (llama.cpp's grammar format), parsed and compiled
// into flat tables that the recogniser (grammar_state.h) walks.
//
// Format: rules `name ::= alternatives`, one per line (a body continues on the
// next line after `|` or inside parentheses); literals "..." with escapes
// \n \r \t \\ \" \[ \] \- \^ \/ \xNN \uNNNN \UNNNNNNNN; character classes
// [a-z0-9_] and [^...]; `.` (any code point); grouping ( ); postfix operators
// * + ? {m} {m,} {m,n} {,n}; comments from # to the end of the line. Rule names
// are [A-Za-z0-9_-]+. Malformed text, references to undefined rules, a missing
// start rule and left recursion throw grammar_error naming line and column.
//
// Compiled form: a rule is a list of alternatives; an alternative is a run of
// elements (a character set or a rule reference) closed by an `end` element,
// all in one array, so a position in the grammar is one index. Groups and
// repetitions become helper rules (x* -> R ::= x R | "" ; right recursion, so
// the recogniser's stacks stay flat). Code points are partitioned into
// classes that no character set of the grammar tells apart, so the recogniser
// keys its transitions by class rather than by code point.
//
// Not here: matching text (grammar_state.h), token vocabularies
// (grammar_vocab.h).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../common.h"

namespace lp {

// Malformed grammar text; maps to ValueError.
struct grammar_error : value_error {
    using value_error::value_error;
};

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// A UTF-8 sequence cut off at a token boundary: the bits read so far, the
// continuation bytes still due and the sequence's full length.
struct utf8_partial {
    uint32_t value = 0;
    uint8_t n_remain = 0;
    uint8_t len = 0;
    bool empty() const { return n_remain == 0; }
};

// Decodes `bytes` continuing `pend`, appending whole code points to `out` and
// leaving an incomplete last sequence in `pend`. False on invalid UTF-8
// (stray continuation byte, bad lead byte, overlong form, surrogate, > U+10FFFF).
bool decode_utf8(std::string_view bytes, utf8_partial& pend, std::vector<uint32_t>& out);
// The code points an incomplete sequence can still become, [lo, hi].
std::pair<uint32_t, uint32_t> utf8_partial_range(const utf8_partial& pend);
void append_utf8(std::string& out, uint32_t cp);

// Throws grammar_error for `msg` at byte offset `at` of `text`, naming the
// line and column and quoting the line.
[[noreturn]] void throw_grammar_error(std::string_view text, size_t at, const std::string& msg);

struct grammar_vocab;
struct grammar_vocab_index;

class grammar {
public:
    enum class op : uint8_t { end, chars, rule };
    struct elem {
        op kind;
        uint32_t arg;  // chars: charset id; rule: rule id; end: unused
    };
    struct range {
        uint32_t lo, hi;  // inclusive
    };

    // Parses GBNF `text`; `root` names the start rule. Throws grammar_error.
    static std::shared_ptr<grammar> parse(std::string_view text, std::string_view root = "root");

    // ---- rules and elements
    int32_t n_rules() const { return (int32_t)rule_names_.size(); }
    int32_t root_rule() const { return root_; }
    const std::string& rule_name(int32_t r) const { return rule_names_[r]; }
    // Element positions where the alternatives of rule r start.
    const uint32_t* alts_begin(int32_t r) const { return alt_starts_.data() + rule_alts_[r]; }
    const uint32_t* alts_end(int32_t r) const { return alt_starts_.data() + rule_alts_[r + 1]; }
    const elem& at(uint32_t pos) const { return elems_[pos]; }
    size_t n_elems() const { return elems_.size(); }

    // ---- code point classes
    int32_t n_classes() const { return n_classes_; }
    int32_t class_of(uint32_t cp) const;
    bool charset_has_class(uint32_t charset, int32_t cls) const {
        return (charset_bits_[(size_t)charset * class_words_ + (cls >> 6)] >> (cls & 63)) & 1;
    }
    // The partition as intervals: interval i is [interval_lo(i), interval_lo(i+1) - 1].
    int32_t n_intervals() const { return (int32_t)interval_lo_.size() - 1; }
    uint32_t interval_lo(int32_t i) const { return interval_lo_[i]; }
    int32_t interval_class(int32_t i) const { return interval_class_[i]; }
    int32_t interval_of(uint32_t cp) const;

    // A random sentence of the language: alternatives chosen uniformly until
    // `max_depth` nested rules, then the shortest way out. For tests and
    // examples. Throws grammar_error if the start rule derives no finite text.
    std::string random_string(uint64_t seed, int32_t max_depth) const;

private:
    friend class gbnf_parser;
    friend std::shared_ptr<const grammar_vocab_index> vocab_index_for(
        const grammar& g, const std::shared_ptr<const grammar_vocab>& v);

    struct rule_src {            // a rule as parsed, before flattening
        std::string name;
        size_t offset = 0;       // where it is defined (or first used, if undefined)
        uint32_t owner = 0;      // the named rule a helper was made for (itself if named)
        bool defined = false;
        std::vector<std::vector<elem>> alts;
    };
    grammar() = default;
    void compile(std::vector<rule_src> rules, std::vector<std::vector<range>> charsets,
                 std::string_view text, std::string_view root_name, int32_t root);
    void check_left_recursion(const std::vector<rule_src>& rules, std::string_view text) const;
    void build_classes();
    void compute_min_lengths();

    std::vector<std::string> rule_names_;
    std::vector<uint32_t> rule_alts_;        // (n_rules + 1) offsets into alt_starts_
    std::vector<uint32_t> alt_starts_;       // (n_alts) element positions
    std::vector<elem> elems_;                // (n_elems) all alternatives, each closed by `end`
    std::vector<std::vector<range>> charsets_;  // (n_charsets) sorted, disjoint ranges
    int32_t root_ = -1;

    int32_t n_classes_ = 0;
    size_t class_words_ = 0;                 // 64-bit words per charset row
    std::vector<uint64_t> charset_bits_;     // (n_charsets, class_words_) class membership
    std::vector<uint32_t> interval_lo_;      // (n_intervals + 1) starts, last = 0x110000
    std::vector<int32_t> interval_class_;    // (n_intervals)
    int32_t ascii_class_[128] = {};

    std::vector<uint64_t> min_len_;          // (n_rules) shortest derivation, in code points

    // Per-vocabulary indexes, built on first use (grammar_vocab.cpp).
    mutable std::mutex index_mu_;
    mutable std::vector<std::pair<std::weak_ptr<const grammar_vocab>, std::shared_ptr<const grammar_vocab_index>>>
        indexes_;
};

}  // namespace lp
