// unicode_norm.cpp — see unicode_norm.h.
#include "vocab/unicode_norm.h"

#include <algorithm>
#include <iterator>

namespace lp {

namespace {

#include "vocab/unicode_norm.inc"

constexpr uint32_t kHangulFirst = 0xAC00, kHangulCount = 11172;
constexpr uint32_t kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7, kVCount = 21, kTCount = 28;

// The entry of a sorted (first, last, ...) range table holding cpt, or null.
template <size_t W, size_t N> const uint32_t* find_range(const uint32_t (&table)[N][W], uint32_t cpt) {
    auto it = std::upper_bound(std::begin(table), std::end(table), cpt,
                               [](uint32_t c, const uint32_t (&r)[W]) { return c < r[0]; });
    if (it == std::begin(table)) return nullptr;
    const uint32_t* r = *std::prev(it);
    return cpt <= r[1] ? r : nullptr;
}

template <size_t W, size_t N> const uint32_t* find_exact(const uint32_t (&table)[N][W], uint32_t cpt) {
    auto it = std::lower_bound(std::begin(table), std::end(table), cpt,
                               [](const uint32_t (&r)[W], uint32_t c) { return r[0] < c; });
    return (it != std::end(table) && (*it)[0] == cpt) ? *it : nullptr;
}

}  // namespace

uint8_t cpt_combining_class(uint32_t cpt) {
    const uint32_t* r = find_range(k_ccc_ranges, cpt);
    return r ? (uint8_t)r[2] : 0;
}

bool cpt_is_nonspacing_mark(uint32_t cpt) { return find_range(k_mn_ranges, cpt) != nullptr; }

void cpt_append_lower(uint32_t cpt, std::vector<uint32_t>& out) {
    if (cpt < 0x80) {
        out.push_back((cpt >= 'A' && cpt <= 'Z') ? cpt + 32 : cpt);
        return;
    }
    if (cpt == k_lower_multi_cpt) {
        out.insert(out.end(), std::begin(k_lower_multi), std::end(k_lower_multi));
        return;
    }
    const uint32_t* m = find_exact(k_lower, cpt);
    out.push_back(m ? m[1] : cpt);
}

std::vector<uint32_t> unicode_nfd(const std::vector<uint32_t>& cpts) {
    std::vector<uint32_t> out;
    out.reserve(cpts.size());
    for (uint32_t c : cpts) {
        if (c < 0xC0) {  // nothing below U+00C0 decomposes
            out.push_back(c);
        } else if (c >= kHangulFirst && c < kHangulFirst + kHangulCount) {
            const uint32_t s = c - kHangulFirst;
            out.push_back(kLBase + s / (kVCount * kTCount));
            out.push_back(kVBase + (s % (kVCount * kTCount)) / kTCount);
            if (s % kTCount) out.push_back(kTBase + s % kTCount);
        } else if (const uint32_t* d = find_exact(k_nfd_index, c)) {
            out.insert(out.end(), k_nfd_data + d[1], k_nfd_data + d[1] + d[2]);
        } else {
            out.push_back(c);
        }
    }
    // Canonical ordering: each run of non-starters sorted stably by class.
    for (size_t i = 0; i < out.size();) {
        if (out[i] < 0x300 || cpt_combining_class(out[i]) == 0) {  // no mark below U+0300
            ++i;
            continue;
        }
        size_t j = i;
        while (j < out.size() && cpt_combining_class(out[j]) != 0) ++j;
        if (j - i > 1)
            std::stable_sort(out.begin() + (std::ptrdiff_t)i, out.begin() + (std::ptrdiff_t)j,
                             [](uint32_t a, uint32_t b) { return cpt_combining_class(a) < cpt_combining_class(b); });
        i = j;
    }
    return out;
}

}  // namespace lp
