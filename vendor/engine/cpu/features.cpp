// features.cpp — CPU feature detection with cpuid/xgetbv (x86) or the
// kernel's hardware capability bits (aarch64 Linux), and the mapping from
// features to the ISA levels our kernels are written for.
#include "features.h"

#include "../common.h"

#include <sched.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>

#if defined(LP_X86)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace lp {

namespace {

#if defined(LP_X86)
void cpuid_count(unsigned leaf, unsigned sub, unsigned r[4]) {
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
}
unsigned long long xgetbv0() {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}
#endif

// Count distinct (physical id, core id) pairs among the CPUs this process may
// use; falls back to the affinity count when /proc/cpuinfo is unavailable.
std::pair<int, int> count_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    int n_logical = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        n_logical = CPU_COUNT(&set);
    } else {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_logical = n > 0 ? (int)n : 1;
        for (int i = 0; i < n_logical && i < CPU_SETSIZE; ++i) CPU_SET(i, &set);
    }
    std::ifstream f("/proc/cpuinfo");
    std::set<std::pair<int, int>> cores;
    int processor = -1, phys = 0, core = -1;
    std::string line;
    auto flush = [&]() {
        if (processor >= 0 && processor < CPU_SETSIZE && CPU_ISSET(processor, &set))
            cores.insert({phys, core >= 0 ? core : processor});
        processor = -1; phys = 0; core = -1;
    };
    while (std::getline(f, line)) {
        if (line.empty()) { flush(); continue; }
        auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string key = line.substr(0, colon);
        while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
        int value = std::atoi(line.c_str() + colon + 1);
        if (key == "processor") processor = value;
        else if (key == "physical id") phys = value;
        else if (key == "core id") core = value;
    }
    flush();
    int n_phys = cores.empty() ? n_logical : (int)cores.size();
    if (n_phys < 1) n_phys = 1;
    if (n_phys > n_logical) n_phys = n_logical;
    return {n_phys, n_logical < 1 ? 1 : n_logical};
}

}  // namespace

bool cpu_features::zen4() const { return avx512f && family == 0x19 && std::strcmp(vendor, "AuthenticAMD") == 0; }

namespace {

cpu_features detect() {
    cpu_features c;
#if defined(LP_X86)
    unsigned r[4] = {0, 0, 0, 0};
    cpuid_count(0, 0, r);
    const unsigned max_leaf = r[0];
    std::memcpy(c.vendor, &r[1], 4);  // ebx, edx, ecx spell the vendor
    std::memcpy(c.vendor + 4, &r[3], 4);
    std::memcpy(c.vendor + 8, &r[2], 4);
    cpuid_count(1, 0, r);
    const unsigned ecx1 = r[2];
    {
        const int base = (int)((r[0] >> 8) & 0xf), ext = (int)((r[0] >> 20) & 0xff);
        c.family = base == 0xf ? base + ext : base;
    }
    c.sse3 = ecx1 & (1u << 0);
    c.ssse3 = ecx1 & (1u << 9);
    c.fma = ecx1 & (1u << 12);
    const bool osxsave = ecx1 & (1u << 27);
    const bool avx_hw = ecx1 & (1u << 28);
    c.f16c = ecx1 & (1u << 29);
    unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
    const bool os_ymm = (xcr0 & 0x6) == 0x6;     // SSE + AVX state saved by the OS
    const bool os_zmm = (xcr0 & 0xe6) == 0xe6;   // plus opmask and ZMM state
    c.avx = avx_hw && os_ymm;
    if (!c.avx) { c.fma = false; c.f16c = false; }
    if (max_leaf >= 7) {
        cpuid_count(7, 0, r);
        const unsigned ebx7 = r[1], ecx7 = r[2];
        c.avx2 = c.avx && (ebx7 & (1u << 5));
        c.bmi2 = ebx7 & (1u << 8);
        c.avx512f = os_zmm && (ebx7 & (1u << 16));
        c.avx512dq = c.avx512f && (ebx7 & (1u << 17));
        c.avx512bw = c.avx512f && (ebx7 & (1u << 30));
        c.avx512vl = c.avx512f && (ebx7 & (1u << 31));
        c.avx512vnni = c.avx512f && (ecx7 & (1u << 11));
        cpuid_count(7, 1, r);
        c.avx_vnni = c.avx2 && (r[0] & (1u << 4));
        c.avx512bf16 = c.avx512f && (r[0] & (1u << 5));
    }
#elif defined(__aarch64__)
#if defined(__linux__)
    // The kernel reports what user space may use; the bits are those of
    // <asm/hwcap.h> (HWCAP_ASIMD = 1 << 1, HWCAP_ASIMDDP = 1 << 20), spelled
    // out because older C libraries lack the names.
    const unsigned long hw = getauxval(AT_HWCAP);
    c.neon = hw & (1ul << 1);
    c.dotprod = c.neon && (hw & (1ul << 20));
#else
    c.neon = true;  // Advanced SIMD is mandatory in armv8-a; the dot product is not assumed
#endif
#endif
    auto cores = count_cores();
    c.n_physical_cores = cores.first;
    c.n_logical_cpus = cores.second;
    return c;
}

}  // namespace

const cpu_features& cpu() {
    static const cpu_features features = detect();
    return features;
}

std::vector<isa> compiled_isas() {
    std::vector<isa> v{isa::scalar};
#if defined(LP_HAVE_AVX2)
    v.push_back(isa::avx2);
#endif
#if defined(LP_HAVE_AVX512)
    v.push_back(isa::avx512);
#endif
#if defined(LP_HAVE_NEON)
    v.push_back(isa::neon);
    v.push_back(isa::neon_dot);
#endif
    return v;
}

isa cpu_best_isa() {
    const cpu_features& c = cpu();
    isa best = isa::scalar;
#if defined(LP_HAVE_AVX2)
    if (c.avx2 && c.fma && c.f16c && c.bmi2) best = isa::avx2;
#endif
#if defined(LP_HAVE_AVX512)
    if (best == isa::avx2 && c.avx512f && c.avx512bw && c.avx512vl && c.avx512dq && c.avx512vnni) best = isa::avx512;
#endif
#if defined(LP_HAVE_NEON)
    if (c.neon) best = c.dotprod ? isa::neon_dot : isa::neon;
#endif
    (void)c;
    return best;
}

namespace {

// LLAMAPY_ISA, read once: the only place the engine reads the environment.
// It caps the level picked at run time so that every level can be tested on
// one machine; it never raises the level above what the CPU runs.
struct isa_cap_setting {
    bool set = false;
    isa level = isa::scalar;
    std::string error;  // non-empty: the value is not a level name
};

const isa_cap_setting& isa_cap_env() {
    static const isa_cap_setting s = [] {
        isa_cap_setting r;
        const char* v = std::getenv("LLAMAPY_ISA");
        if (!v || !*v) return r;
        std::string name(v);
        for (auto& ch : name) ch = (char)std::tolower((unsigned char)ch);
        if (name == "native" || name == "auto" || name == "best") return r;
        for (isa level : {isa::scalar, isa::avx2, isa::avx512, isa::neon, isa::neon_dot}) {
            if (name == isa_name(level)) {
                r.set = true;
                r.level = level;
                return r;
            }
        }
        r.error = "LLAMAPY_ISA='" + std::string(v) + "' is not a kernel level: use scalar, avx2, avx512, neon, neon_dot "
                  "(a cap: the level used is the lower of this and the best the CPU and build support; a level of "
                  "the other architecture leaves scalar), or leave it unset";
        return r;
    }();
    return s;
}

}  // namespace

isa best_isa() {
    // Fixed for the process (the CPU and LLAMAPY_ISA, read once), and asked for
    // on hot paths (every traits() lookup): worked out once.
    static const isa level = [] {
        const isa best = cpu_best_isa();
        const isa_cap_setting& cap = isa_cap_env();
        if (!cap.set) return best;
        if (isa_at_least(best, cap.level)) return cap.level;  // at or below the best: the cap
        if (isa_at_least(cap.level, best)) return best;       // above it in the same chain
        return isa::scalar;  // a level of the other architecture: only the shared bottom is below it
    }();
    return level;
}

const char* isa_cap_name() {
    const isa_cap_setting& cap = isa_cap_env();
    return cap.set ? isa_name(cap.level) : "";
}

const std::string& isa_cap_error() { return isa_cap_env().error; }

int default_n_threads() { return cpu().n_physical_cores; }

const char* isa_name(isa level) {
    switch (level) {
        case isa::scalar: return "scalar";
        case isa::avx2: return "avx2";
        case isa::avx512: return "avx512";
        case isa::neon: return "neon";
        case isa::neon_dot: return "neon_dot";
    }
    return "unknown";
}

}  // namespace lp
