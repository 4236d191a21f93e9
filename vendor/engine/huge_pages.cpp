// huge_pages.cpp — see huge_pages.h.
#include "huge_pages.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/mman.h>
#endif

namespace lp {

namespace {
constexpr size_t kHuge = size_t(2) << 20;
}  // namespace

#if defined(__linux__) && defined(MADV_HUGEPAGE)

void* map_file_huge_advised(int fd, size_t size) {
    if (size == 0) {
        errno = EINVAL;
        return nullptr;
    }
    // Reserve size + 2 MiB of address space, then map the file at the first
    // 2 MiB boundary inside it: huge page-table entries need the virtual
    // address and the file offset aligned alike.
    void* r = ::mmap(nullptr, size + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return nullptr;
    const uintptr_t lo = (uintptr_t)r, a = (lo + kHuge - 1) & ~(uintptr_t)(kHuge - 1);
    void* m = ::mmap((void*)a, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (m == MAP_FAILED) {
        const int e = errno;
        ::munmap(r, size + kHuge);
        errno = e;
        return nullptr;
    }
    const uintptr_t end = lo + size + kHuge, mend = a + ((size + 4095) & ~(size_t)4095);
    if (a > lo) ::munmap(r, a - lo);
    if (end > mend) ::munmap((void*)mend, end - mend);
    ::madvise(m, size, MADV_HUGEPAGE);  // advice: without THP it changes nothing
    return m;
}

double huge_mapped_share(const void* m) {
    FILE* f = std::fopen("/proc/self/smaps", "r");
    if (!f) return 0.0;
    char line[512];
    char want[32];
    std::snprintf(want, sizeof want, "%lx-", (unsigned long)(uintptr_t)m);
    const size_t wl = std::strlen(want);
    bool in = false;
    unsigned long rss = 0, pmd = 0;
    while (std::fgets(line, sizeof line, f)) {
        // A mapping's header line starts with its lower-case hex "start-end";
        // its fields ("Rss:", "FilePmdMapped:", ...) start with a capital.
        const char c = line[0];
        const bool header = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        if (header) {
            if (in) break;  // the next mapping: ours is done
            in = std::strncmp(line, want, wl) == 0;
            continue;
        }
        if (!in) continue;
        unsigned long v = 0;
        if (std::sscanf(line, "Rss: %lu kB", &v) == 1) rss = v;
        else if (std::sscanf(line, "FilePmdMapped: %lu kB", &v) == 1) pmd = v;
    }
    std::fclose(f);
    return rss ? (double)pmd / (double)rss : 0.0;
}

bool populate_in_huge_pages(void* m, size_t size, int fd, double min_share) {
#if defined(MADV_POPULATE_READ)
    // All of it, then the share: a sample would not tell (the file's first
    // megabytes are often in small folios, left by reads of its header).
    if (::madvise(m, size, MADV_POPULATE_READ) != 0) return false;
    if (huge_mapped_share(m) >= min_share) return true;
    // The page cache holds the file in small folios (written or read without
    // the advice). Drop this mapping's pages and those folios (clean ones
    // nobody else maps), then read it again: the advised read-ahead now
    // brings 2 MiB folios, which later loads map directly. One re-read from
    // the disk, once per file.
    ::madvise(m, size, MADV_DONTNEED);
    ::posix_fadvise(fd, 0, (off_t)size, POSIX_FADV_DONTNEED);
    if (::madvise(m, size, MADV_POPULATE_READ) != 0) return false;
    return huge_mapped_share(m) >= min_share;
#else
    (void)m, (void)size, (void)fd, (void)min_share;
    return false;
#endif
}

void* alloc_huge_advised(size_t size) {
    void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    ::madvise(m, size, MADV_HUGEPAGE);
    return m;
}

void unmap_huge(void* m, size_t size) {
    if (m) ::munmap(m, size);
}

#else  // no transparent huge pages: plain mappings, and nothing is ever "huge"

void* map_file_huge_advised(int fd, size_t size) {
#if defined(__unix__) || defined(__APPLE__)
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    return m == MAP_FAILED ? nullptr : m;
#else
    (void)fd, (void)size;
    return nullptr;
#endif
}
double huge_mapped_share(const void*) { return 0.0; }
bool populate_in_huge_pages(void*, size_t, int, double) { return false; }
void* alloc_huge_advised(size_t size) { return std::aligned_alloc(4096, (size + 4095) & ~(size_t)4095); }
void unmap_huge(void* m, size_t) { std::free(m); }

#endif

}  // namespace lp
