// test_rng.h — the seeded generator of the C++ checks (splitmix64): the same
// stream on every platform and compiler, so a failing case can be replayed.
#pragma once

#include <cstdint>

struct test_rng {
    uint64_t s;
    explicit test_rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    uint64_t next() {
        s += 0x9E3779B97F4A7C15ull;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, 1), 53 bits.
    double unit() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
};
