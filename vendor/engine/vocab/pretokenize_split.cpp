// pretokenize_split.cpp — hand-written splitters (pretokenize_split.h). Each
// follows llama.cpp's own, quirks included (e.g. the "\s+(?!\S)" rule leaves
// the last whitespace of a run for the next word only when something follows
// inside the same piece; a lone space at the end of a piece is a word of the
// punctuation rule).
#include "vocab/pretokenize_split.h"

namespace lp::pretok {

namespace {

// [^\s\p{L}\p{N}] (and \p{M} when `extra` has cpt_flag_mark) for a codepoint
// inside the piece (flags 0 means outside).
bool is_word_other(uint16_t f, uint16_t extra = 0) {
    return f && !(f & (cpt_flag_whitespace | cpt_flag_letter | cpt_flag_number | extra));
}

// The contractions 's 't 're 've 'm 'll 'd at pos; their length or 0.
// No codepoint outside ASCII lowercases to one of these letters, so ASCII
// case folding is all that (?i:) needs here.
size_t contraction_len(const piece_cursor& c, size_t pos, bool any_case) {
    if (c.cpt(pos) != '\'' || pos + 1 >= c.end) return 0;
    auto low = [&](uint32_t x) { return any_case ? cpt_ascii_lower(x) : x; };
    const uint32_t n1 = low(c.cpt(pos + 1));
    if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
    if (pos + 2 >= c.end) return 0;
    const uint32_t n2 = low(c.cpt(pos + 2));
    if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) return 3;
    return 0;
}

// The whitespace rules shared by the Llama-3-like splitters:
// \s*[\r\n]+ | \s+(?!\S) | \s+ | (any one codepoint). Returns the new pos.
size_t whitespace_rules(piece_cursor& c, size_t pos) {
    size_t n_ws = 0, last_nl_end = 0;
    while (c.flags(pos + n_ws) & cpt_flag_whitespace) {
        const uint32_t w = c.cpt(pos + n_ws);
        if (w == '\r' || w == '\n') last_nl_end = pos + n_ws + 1;
        ++n_ws;
    }
    if (last_nl_end > 0) pos = last_nl_end;                                     // \s*[\r\n]+
    else if (n_ws > 1 && c.cpt(pos + n_ws) != k_out) pos += n_ws - 1;          // \s+(?!\S)
    else if (n_ws > 0) pos += n_ws;                                             // \s+
    else ++pos;                                                                 // no rule matches
    c.emit(pos);
    return pos;
}

// Han characters as llama.cpp lists them (CJK ideograph blocks).
bool is_han(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0x2CEB0 && c <= 0x2EBEF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

}  // namespace

void split_gpt2(piece_cursor& c) {
    size_t pos = c.ini;
    while (pos < c.end) {
        const uint32_t cp = c.cpt(pos);
        const uint16_t f = c.flags(pos);
        if (size_t n = contraction_len(c, pos, false)) { pos += n; c.emit(pos); continue; }
        const uint16_t f2 = cp == ' ' ? c.flags(pos + 1) : f;
        if (f2 & cpt_flag_letter) {  // ' ?\p{L}+'
            pos += cp == ' ';
            while (c.flags(pos) & cpt_flag_letter) ++pos;
            c.emit(pos);
            continue;
        }
        if (f2 & cpt_flag_number) {  // ' ?\p{N}+'
            pos += cp == ' ';
            while (c.flags(pos) & cpt_flag_number) ++pos;
            c.emit(pos);
            continue;
        }
        if (is_word_other(f2)) {  // ' ?[^\s\p{L}\p{N}]+'
            pos += cp == ' ';
            while (is_word_other(c.flags(pos))) ++pos;
            c.emit(pos);
            continue;
        }
        size_t n_ws = 0;
        while (c.flags(pos + n_ws) & cpt_flag_whitespace) ++n_ws;
        if (n_ws > 1 && c.cpt(pos + n_ws) != k_out) { pos += n_ws - 1; c.emit(pos); continue; }  // '\s+(?!\S)'
        if (n_ws > 0) { pos += n_ws; c.emit(pos); continue; }                                    // '\s+'
        c.emit(++pos);
    }
}

void split_llama3_like(piece_cursor& c, size_t max_digits, bool marks) {
    const uint16_t word = cpt_flag_letter | (marks ? cpt_flag_mark : 0);
    const uint16_t mark = marks ? cpt_flag_mark : 0;
    size_t pos = c.ini;
    while (pos < c.end) {
        const uint32_t cp = c.cpt(pos);
        const uint16_t f = c.flags(pos);
        if (size_t n = contraction_len(c, pos, true)) { pos += n; c.emit(pos); continue; }
        // '[^\r\n\p{L}\p{N}]?L+' (llama.cpp lets a mark stand where the
        // optional leading codepoint is, too)
        if (!(cp == '\r' || cp == '\n' || (f & cpt_flag_number)) && ((f & word) || (c.flags(pos + 1) & word))) {
            ++pos;
            while (c.flags(pos) & word) ++pos;
            c.emit(pos);
            continue;
        }
        if (f & cpt_flag_number) {  // '\p{N}{1,D}'
            size_t ini = pos;
            while (c.flags(pos) & cpt_flag_number) {
                if (++pos - ini >= max_digits) { c.emit(pos); ini = pos; }
            }
            c.emit(pos);
            continue;
        }
        // ' ?[^\s L \p{N}]+[\r\n]*' (the test of the first codepoint is only
        // "inside the piece", so a lone trailing space lands here too)
        const uint16_t f2 = cp == ' ' ? c.flags(pos + 1) : f;
        if (!(f2 & (cpt_flag_whitespace | cpt_flag_letter | cpt_flag_number | mark)) && f) {
            pos += cp == ' ';
            while (is_word_other(c.flags(pos), mark)) ++pos;
            while (c.cpt(pos) == '\r' || c.cpt(pos) == '\n') ++pos;
            c.emit(pos);
            continue;
        }
        pos = whitespace_rules(c, pos);
    }
}

void split_kimi_k2(piece_cursor& c) {
    auto letter_not_han = [&](size_t p) { return (c.flags(p) & cpt_flag_letter) && !is_han(c.cpt(p)); };
    size_t pos = c.ini;
    while (pos < c.end) {
        const uint32_t cp = c.cpt(pos);
        const uint16_t f = c.flags(pos);
        if (is_han(cp)) {  // [\p{Han}]+
            while (is_han(c.cpt(pos))) ++pos;
            c.emit(pos);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?<non-Han letters>+ then an optional contraction
        const bool can_lead = !(cp == '\r' || cp == '\n' || (f & (cpt_flag_letter | cpt_flag_number)));
        if (letter_not_han(pos) || (can_lead && letter_not_han(pos + 1))) {
            if (can_lead) ++pos;
            while (letter_not_han(pos)) ++pos;
            if (c.cpt(pos) == '\'' && pos + 1 < c.end) {
                const uint32_t n1 = cpt_ascii_lower(c.cpt(pos + 1));
                if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
                    pos += 2;
                } else if (pos + 2 < c.end) {
                    const uint32_t n2 = cpt_ascii_lower(c.cpt(pos + 2));
                    if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) pos += 3;
                }
            }
            c.emit(pos);
            continue;
        }
        if (f & cpt_flag_number) {  // \p{N}{1,3}
            size_t ini = pos;
            while (c.flags(pos) & cpt_flag_number) {
                if (++pos - ini >= 3) { c.emit(pos); ini = pos; }
            }
            c.emit(pos);
            continue;
        }
        // ' ?[^\s\p{L}\p{N}]+[\r\n]*' (here the test is on the codepoint
        // after the optional space)
        const uint16_t f2 = cp == ' ' ? c.flags(pos + 1) : f;
        if (is_word_other(f2)) {
            pos += cp == ' ';
            while (is_word_other(c.flags(pos))) ++pos;
            while (c.cpt(pos) == '\r' || c.cpt(pos) == '\n') ++pos;
            c.emit(pos);
            continue;
        }
        pos = whitespace_rules(c, pos);
    }
}

void split_afmoe_digits(piece_cursor& c) {
    size_t pos = c.ini;
    while (pos < c.end) {
        if (!(c.flags(pos) & cpt_flag_number)) {
            ++pos;
            continue;
        }
        const size_t start = pos;
        while (c.flags(pos) & cpt_flag_number) ++pos;
        size_t at = start + (pos - start) % 3;
        if (at > start) c.emit(at);  // the leading 1-2 digits, with any text before them
        for (; at < pos; at += 3) c.emit(at + 3);
    }
    c.emit(c.end);
}

void split_newlines(piece_cursor& c) {
    size_t pos = c.ini;
    while (pos < c.end) {
        const bool nl = c.cpts[pos] == '\n';
        while (pos < c.end && (c.cpts[pos] == '\n') == nl) ++pos;
        c.emit(pos);
    }
}

}  // namespace lp::pretok
