// regex.h — a small backtracking regex engine for pre-tokenizer patterns.
//
// It implements the ECMAScript semantics llama.cpp gets from std::regex
// (leftmost match, ordered alternation, greedy/lazy quantifiers with
// backtracking, lookahead), over a sequence of 32-bit symbols instead of
// chars, and without recursion on the input length (long inputs cannot
// overflow the stack).
//
// Two symbol modes, chosen per pattern as llama.cpp does:
//  - collapsed (the pattern uses \p{L}, \p{N}, \p{P}, \p{M}, \p{S} or
//    \p{Lu|Ll|Lt|Lm|Lo}): ASCII codepoints stand for themselves and every other
//    codepoint is replaced by one code for its category (collapse_symbol());
//    \p{X} then matches that code plus X's ASCII members. The pattern must be
//    ASCII.
//  - wide: symbols are codepoints, except non-ASCII whitespace, which becomes
//    U+000B so that \s sees it.
// \s, \d, \w are ASCII classes (the "C" locale); '.' excludes \n and \r.
//
// Supported: | ( ) (?: ) (?= ) (?! ) [ ] [^ ] ranges, escapes \s\S\d\D\w\W
// \r\n\t\f\v\0 \xHH \uHHHH and escaped punctuation, \p{..} (collapsed mode),
// quantifiers * + ? {n} {n,} {n,m} and their lazy forms, ^ and $ (whole
// subject). Not supported (throws lp::value_error): backreferences, (?i:),
// lookbehind, quantified sub-patterns that can match the empty string.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lp {

// Collapsed-mode codes for non-ASCII codepoints.
enum : uint32_t {
    collapsed_whitespace = 0x0B,
    collapsed_other = 0xD0,
    collapsed_number = 0xD1,
    collapsed_letter = 0xD2,
    collapsed_punctuation = 0xD3,
    collapsed_mark = 0xD4,
    collapsed_symbol = 0xD5,
};

uint32_t collapse_symbol(uint32_t cpt);   // collapsed mode
uint32_t wide_symbol(uint32_t cpt);       // wide mode

// True if llama.cpp would run this pattern on collapsed text.
bool regex_uses_categories(std::string_view pattern);

class pretok_regex {
public:
    // Compile; throws lp::value_error for syntax outside the subset above.
    explicit pretok_regex(std::string_view pattern);

    bool collapsed() const { return collapsed_; }
    const std::string& pattern() const { return pattern_; }

    // Backtracking state, reusable across calls (one per thread).
    struct scratch {
        struct frame { int32_t pc; int32_t kind; size_t pos; size_t aux; };
        std::vector<frame> stack;
    };

    // Leftmost match in subject [begin, end) starting at or after `from`.
    // With `not_null_here`, only a non-empty match starting exactly at `from`
    // counts (std::regex's match_not_null | match_continuous).
    bool search(const uint32_t* syms, size_t begin, size_t end, size_t from, bool not_null_here,
                scratch& s, size_t& match_begin, size_t& match_end) const;

    // One symbol predicate: a set of ranges, or a combination of predicates.
    struct pred {
        enum kind_t { SET, AND, OR, NOT } kind = SET;
        std::vector<std::pair<uint32_t, uint32_t>> ranges;  // SET: sorted, inclusive
        bool negated = false;                                // SET
        std::vector<int> kids;                               // AND / OR / NOT
        std::bitset<256> low;                                // result for symbols < 256
    };
    struct inst {
        enum op_t : uint8_t { SYM, REP, SPLIT, JMP, PEEK, LOOK, BOL, EOL, MATCH } op = MATCH;
        bool flag = false;   // REP: greedy; PEEK/LOOK: negated; SPLIT: unused
        int32_t a = 0;       // SYM/REP/PEEK: predicate; SPLIT/JMP: first target; LOOK: sub-program start
        int32_t b = 0;       // SPLIT: second target
        int32_t min = 0, max = 0;  // REP (max < 0: unbounded)
    };

private:
    friend struct regex_compiler;
    bool test(int p, uint32_t sym) const;
    bool test_slow(int p, uint32_t sym) const;
    // Run from pc at pos; returns the end of the first match or SIZE_MAX.
    size_t run(int pc, const uint32_t* syms, size_t begin, size_t end, size_t pos, size_t not_null_at,
               scratch& s) const;

    std::string pattern_;
    bool collapsed_ = false;
    std::vector<pred> preds_;
    std::vector<inst> prog_;
};

}  // namespace lp
