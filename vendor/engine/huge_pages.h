// huge_pages.h — memory in 2 MiB pages (Linux transparent huge pages) for the
// buffers token generation streams: the model's weights and the read-bandwidth
// probe that generation is measured against.
//
// Why: a decode step streams every weight once. With 4 KiB pages every 4 KiB
// of weights costs a TLB miss and a page walk (in a virtual machine a
// two-level one), and the hardware prefetchers stop at each 4 KiB boundary.
// On the 2-core Xeon VM the same Q6_K mat-vec read 1.4x more bytes per CPU
// second from 2 MiB pages, Q4_K 1.16x, a plain sum 1.5x (benchmarks/LOG.md,
// 2026-12-07 18:15).
//
// The weights get them from the page cache rather than from anonymous memory:
// a file mapping advised MADV_HUGEPAGE makes the kernel read the file ahead in
// 2 MiB folios and map those with one page-table entry each, with no copy and
// no zeroing. (Anonymous huge pages must be zeroed first; on the Firecracker
// VMs here that first touch of fresh host memory ran at ~0.5 GB/s and made
// loading a 5 GB model 3x slower.) Whether the kernel does it depends on its
// version, its THP setting and the filesystem, and on the folios already in
// the page cache for that file, so it is checked, not assumed.
#pragma once

#include <cstddef>

namespace lp {

// Maps fd's first `size` bytes read-only (MAP_PRIVATE) at a 2 MiB-aligned
// address, advised for huge pages where the platform has them. Returns
// nullptr (errno set) if the mapping fails.
void* map_file_huge_advised(int fd, size_t size);

// Reads the mapping [m, m + size) in (MADV_POPULATE_READ): true when the
// kernel then maps at least `min_share` of it with 2 MiB entries
// (FilePmdMapped in /proc/self/smaps), false (the caller may unmap and read
// the file instead) when it does not, when the platform cannot tell, or when
// reading fails. Where the page cache already holds the file in smaller
// folios (written, or read earlier without the advice), those it can drop
// (clean, mapped by no other process) are dropped and read again from fd.
bool populate_in_huge_pages(void* m, size_t size, int fd, double min_share = 0.5);

// The share of the mapping that starts at m which the kernel maps with 2 MiB
// page-table entries, over what is resident (0 if unknown or nothing is).
double huge_mapped_share(const void* m);

// Anonymous read-write memory of `size` bytes advised for huge pages (the
// bandwidth probe's buffer); release with unmap_huge. nullptr on failure.
void* alloc_huge_advised(size_t size);
void unmap_huge(void* m, size_t size);

}  // namespace lp
