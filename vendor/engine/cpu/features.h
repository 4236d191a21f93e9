// features.h — what the running CPU supports and what this build compiled in.
// Read once (cpuid + xgetbv), cached; no global state is filled at load time.
#pragma once

#include <string>
#include <vector>

#include "../ggml_type.h"

namespace lp {

struct cpu_features {
    bool sse3 = false, ssse3 = false, avx = false, f16c = false, fma = false, avx2 = false, bmi2 = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512vnni = false;
    bool avx512bf16 = false, avx_vnni = false;
    bool neon = false, dotprod = false;  // aarch64: Advanced SIMD, SDOT/UDOT (HWCAP_ASIMDDP)
    // x86: the vendor ("AuthenticAMD", "GenuineIntel", ...) and the display
    // family (base + extended), for the few kernel choices measured per core
    // design (quants/float_tiles_avx512.cpp).
    char vendor[13] = {0};
    int family = 0;
    // AMD family 0x19 with AVX-512: Zen 4, whose 512-bit ops run as two 256-bit halves.
    bool zen4() const;
    int n_physical_cores = 1;  // best guess; used for the default thread count
    int n_logical_cpus = 1;
};

const cpu_features& cpu();
// Highest level supported by both this CPU and this build.
isa cpu_best_isa();
// The level the kernels use: cpu_best_isa(), capped by the LLAMAPY_ISA
// environment variable (scalar | avx2 | avx512 | neon | neon_dot) when it is
// set; a cap from the other architecture's chain leaves scalar.
isa best_isa();
// The cap LLAMAPY_ISA sets ("" when unset), and the error for a value that
// names no level ("" when fine; the Python package raises it at import).
const char* isa_cap_name();
const std::string& isa_cap_error();
// Levels compiled into this build, lowest first ("scalar", "avx2", ...).
std::vector<isa> compiled_isas();
// Default thread count: the number of physical cores the process may run on.
int default_n_threads();

}  // namespace lp
