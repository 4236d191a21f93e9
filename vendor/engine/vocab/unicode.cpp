// unicode.cpp — UTF-8 coding, codepoint flags and the GPT-2 byte map.
#include "vocab/unicode.h"

#include <algorithm>
#include <array>

namespace lp {

namespace {

#include "vocab/unicode_table.inc"

constexpr uint32_t k_max_codepoint = 0x10FFFF;
constexpr size_t k_n_ranges = sizeof(k_unicode_ranges) / sizeof(k_unicode_ranges[0]);

uint16_t flags_by_search(uint32_t cpt) {
    // Last range whose first codepoint is <= cpt.
    size_t lo = 0, hi = k_n_ranges;
    while (hi - lo > 1) {
        const size_t mid = (lo + hi) / 2;
        if (k_unicode_ranges[mid][0] <= cpt) lo = mid; else hi = mid;
    }
    return (uint16_t)k_unicode_ranges[lo][1];
}

// Flags of the Basic Multilingual Plane, looked up directly.
struct bmp_table {
    std::array<uint16_t, 0x10000> flags;
    bmp_table() {
        for (size_t r = 0; r < k_n_ranges; ++r) {
            const uint32_t first = k_unicode_ranges[r][0];
            if (first >= 0x10000) break;
            const uint32_t end = r + 1 < k_n_ranges ? std::min<uint32_t>(k_unicode_ranges[r + 1][0], 0x10000) : 0x10000;
            for (uint32_t c = first; c < end; ++c) flags[c] = (uint16_t)k_unicode_ranges[r][1];
        }
    }
};

const bmp_table& bmp() {
    static const bmp_table t;
    return t;
}

struct byte_map {
    std::string to_utf8[256];
    int16_t from_cpt[324];  // codepoints used by the map are all below 0x144
    byte_map() {
        std::fill(std::begin(from_cpt), std::end(from_cpt), (int16_t)-1);
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const uint32_t cpt = printable ? (uint32_t)b : (uint32_t)(256 + n++);
            utf8_append(to_utf8[b], cpt);
            from_cpt[cpt] = (int16_t)b;
        }
    }
};

const byte_map& bytes() {
    static const byte_map m;
    return m;
}

inline bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

uint16_t cpt_flags(uint32_t cpt) {
    if (cpt < 0x10000) return bmp().flags[cpt];
    if (cpt > k_max_codepoint) return cpt_flag_undefined;
    return flags_by_search(cpt);
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
    std::vector<uint32_t> out;
    out.reserve(s.size());
    const uint8_t* p = (const uint8_t*)s.data();
    const size_t n = s.size();
    size_t i = 0;
    while (i < n) {
        const uint8_t b = p[i];
        if (b < 0x80) {
            out.push_back(b);
            i += 1;
        } else if ((b & 0x40) == 0) {  // stray continuation byte
            out.push_back(0xFFFD);
            i += 1;
        } else if ((b & 0x20) == 0) {
            if (i + 1 < n && is_cont(p[i + 1])) {
                out.push_back(((uint32_t)(b & 0x1F) << 6) | (p[i + 1] & 0x3F));
                i += 2;
            } else {
                out.push_back(0xFFFD);
                i += 1;
            }
        } else if ((b & 0x10) == 0) {
            if (i + 2 < n && is_cont(p[i + 1]) && is_cont(p[i + 2])) {
                out.push_back(((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F));
                i += 3;
            } else {
                out.push_back(0xFFFD);
                i += 1;
            }
        } else if ((b & 0x08) == 0) {
            if (i + 3 < n && is_cont(p[i + 1]) && is_cont(p[i + 2]) && is_cont(p[i + 3])) {
                const uint32_t c = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(p[i + 1] & 0x3F) << 12) |
                                   ((uint32_t)(p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
                // llama.cpp would throw on re-encoding these; we keep going.
                out.push_back(c <= k_max_codepoint ? c : 0xFFFD);
                i += 4;
            } else {
                out.push_back(0xFFFD);
                i += 1;
            }
        } else {
            out.push_back(0xFFFD);
            i += 1;
        }
    }
    return out;
}

void utf8_append(std::string& out, uint32_t c) {
    if (c < 0x80) {
        out.push_back((char)c);
    } else if (c < 0x800) {
        out.push_back((char)(0xC0 | (c >> 6)));
        out.push_back((char)(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back((char)(0xE0 | (c >> 12)));
        out.push_back((char)(0x80 | ((c >> 6) & 0x3F)));
        out.push_back((char)(0x80 | (c & 0x3F)));
    } else {
        out.push_back((char)(0xF0 | ((c >> 18) & 0x07)));
        out.push_back((char)(0x80 | ((c >> 12) & 0x3F)));
        out.push_back((char)(0x80 | ((c >> 6) & 0x3F)));
        out.push_back((char)(0x80 | (c & 0x3F)));
    }
}

const std::string& byte_to_unicode_utf8(uint8_t b) { return bytes().to_utf8[b]; }

int unicode_to_byte(uint32_t cpt) {
    return cpt < 324 ? bytes().from_cpt[cpt] : -1;
}

}  // namespace lp
