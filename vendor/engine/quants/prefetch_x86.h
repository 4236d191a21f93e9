// prefetch_x86.h — how far ahead the x86 kernels prefetch weights that
// stream from memory (mat-vec, the first pass of a tile): one place for the
// distances the k-quant row kernels (kquants_x86_common.h), the AVX-512 tiles
// (simd_x86.h) and the AVX2 tiles (tiles_avx2_common.h) use.
#pragma once

#include <cstddef>

namespace lp {
namespace prefetch_x86 {

// One row read alone, block after block, is one sequential stream: the
// kernel prefetches into L1 kStreamAhead bytes past the block it is on.
// A prefetch into L1 holds one of the core's ~12 fill buffers until its line
// arrives. Lines the L2 streamer has already brought in free it at once;
// lines beyond the streamer's reach hold it for a whole memory latency, and a
// prefetch that finds none free stalls the core. So nearer is better, down to
// where the line is not yet in L1 when the kernel gets there.
// Measured on the Intel Xeon VM (AVX-512 VNNI) with the weights in 2 MiB
// pages, GB of weights per CPU second of 2 threads over 1.2 GB of 1B-shaped
// rows (benchmarks/LOG.md, 2026-12-07 21:30-22:20): Q4_K 12.2-12.8 at 1.5-2
// KiB against 10.6-11.1 at 8 KiB; Q6_K 13.8-14.2 at 1.5 KiB against
// 12.6-13.4 at 2.5 KiB and 11.9-13.1 at 2 KiB; Q8_0 12.5-13.1 at 1.5-2 KiB
// against 11.2-11.3 at a row plus 8 KiB and 10.3-10.8 at 3 KiB. (On Zen 5, 4
// KiB measured best for the k-quant rows with 4 KiB pages; not re-measured.)
constexpr size_t kStreamAhead = 1536;

// Several rows walked side by side (the 2- and 4-row mat-vec tiles): the
// hardware prefetchers follow one sequential stream well and several
// interleaved ones badly, so the tile prefetches the rows after it as one
// linear stream, kTileAhead past its own rows, at the rate it reads. 8 KiB was
// measured on Zen 5. On the Xeon VM (2 threads, per CPU second, 2026-12-07
// 22:30): Q8_0's 2-row AVX2 tiles 13.8-14.0 GB at 1.5 KiB against 13.2-13.5 at
// 8 KiB; the 4-row tiles of MXFP4 (AVX2 and AVX-512) the same at 0-8 KiB.
constexpr size_t kTileAhead = 1536;

// The mat-mat panels' first pass over their rows (the rows unpacked once per
// call, then multiplied from cache): the next panel's bytes, kPanelAhead past
// the panel (measured on Zen 5; not re-measured on the Xeon VM).
constexpr size_t kPanelAhead = 8192;

}  // namespace prefetch_x86
}  // namespace lp
