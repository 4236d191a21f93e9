// unicode.h — the Unicode pieces the tokenizers need: lenient UTF-8 decoding
// (invalid bytes become U+FFFD one byte at a time, as llama.cpp does), UTF-8
// encoding, codepoint category flags (table generated from Unicode 15.1 by
// tools/gen_unicode_table.py) and GPT-2's byte <-> printable-codepoint map.
// Not here: normalization (NFC/NFD) or case mapping beyond ASCII.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lp {

// Category-group flags of a codepoint (one group bit, plus whitespace).
enum : uint16_t {
    cpt_flag_undefined   = 0x0001,  // Cn (unassigned)
    cpt_flag_number      = 0x0002,  // \p{N}
    cpt_flag_letter      = 0x0004,  // \p{L}
    cpt_flag_separator   = 0x0008,  // \p{Z}
    cpt_flag_mark        = 0x0010,  // \p{M}
    cpt_flag_punctuation = 0x0020,  // \p{P}
    cpt_flag_symbol      = 0x0040,  // \p{S}
    cpt_flag_control     = 0x0080,  // \p{C} except Cn
    cpt_flag_whitespace  = 0x0100,  // White_Space property
    cpt_flag_categories  = 0x00FF,
};

// Flags for any value; codepoints past U+10FFFF are undefined.
uint16_t cpt_flags(uint32_t cpt);

inline bool cpt_is_letter(uint32_t c) { return cpt_flags(c) & cpt_flag_letter; }
inline bool cpt_is_number(uint32_t c) { return cpt_flags(c) & cpt_flag_number; }
inline bool cpt_is_whitespace(uint32_t c) { return cpt_flags(c) & cpt_flag_whitespace; }

// ASCII-only lowercase (all that the contraction rules of the pre-tokenizers
// compare against: no other codepoint lowercases to s, t, m, d, r, e, v or l).
inline uint32_t cpt_ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// Bytes of a UTF-8 sequence from its first byte's high nibble (1 for
// continuation bytes), without validation — how llama.cpp splits symbols.
inline size_t utf8_len(uint8_t first) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[first >> 4];
}

// Decode UTF-8 leniently: a byte that does not start a well-formed sequence
// (by lead-byte shape and continuation bytes; overlong forms and surrogates are
// accepted) becomes U+FFFD and decoding resumes at the next byte. Sequences
// that decode past U+10FFFF also become U+FFFD.
std::vector<uint32_t> utf8_decode(std::string_view s);

// Append the UTF-8 encoding of cpt (cpt <= U+10FFFF) to out.
void utf8_append(std::string& out, uint32_t cpt);

// GPT-2 byte-level BPE: every byte maps to a printable codepoint (printable
// Latin-1 bytes to themselves, the rest to U+0100 upwards in byte order).
// byte_to_unicode_utf8(b) is that codepoint's UTF-8 text; unicode_to_byte(c)
// is the inverse, -1 for codepoints outside the map.
const std::string& byte_to_unicode_utf8(uint8_t b);
int unicode_to_byte(uint32_t cpt);

}  // namespace lp
