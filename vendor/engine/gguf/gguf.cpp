// gguf.cpp — maps a GGUF file and validates it in one pass (gguf.h documents
// the byte layout), and for a split model opens and checks its other parts.
// The parser never reads a byte it has not bounds-checked, never allocates
// from an unchecked count, and recurses at most max_array_depth levels, so
// any input ends in a table or a gguf_error.
// Not here: Python conversion of values (bindings/bind_gguf.cpp).
#include "gguf.h"

#include "../huge_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace lp {

namespace {

constexpr uint64_t default_alignment = 32;
constexpr int max_array_depth = 16;    // arrays nested deeper are rejected
constexpr uint64_t min_kv_bytes = 13;  // empty key (8) + type (4) + u8 value (1)
constexpr uint64_t min_tensor_info_bytes = 24;  // empty name, n_dims 0, type, offset
constexpr uint64_t header_bytes = 24;  // magic, version, n_tensors, n_kv
constexpr uint64_t max_reserve = 4096;  // tables grow past this only as entries are actually read

// Smallest number of bytes one value of type t can occupy.
uint64_t min_value_bytes(gguf_type t) {
    if (t == gguf_type::STRING) return 8;   // u64 length
    if (t == gguf_type::ARRAY) return 12;   // u32 element type + u64 count
    return gguf_type_size(t);
}

bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is invalid
// (overlong forms, surrogates and code points past U+10FFFF included).
size_t utf8_sequence_length(const std::string& s, size_t i) {
    const auto at = [&](size_t k) { return i + k < s.size() ? (unsigned char)s[i + k] : 0u; };
    const unsigned c = at(0);
    const auto cont = [&](size_t k, unsigned lo, unsigned hi) { return at(k) >= lo && at(k) <= hi; };
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return cont(1, 0x80, 0xbf) ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        const unsigned lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        return cont(1, lo, hi) && cont(2, 0x80, 0xbf) ? 3 : 0;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        const unsigned lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        return cont(1, lo, hi) && cont(2, 0x80, 0xbf) && cont(3, 0x80, 0xbf) ? 4 : 0;
    }
    return 0;
}

// A name from the file, quoted for an error message: at most ~80 bytes,
// control characters and invalid UTF-8 replaced by '?', so the message is
// always valid UTF-8 (Python decodes it strictly).
std::string quoted(const std::string& s) {
    std::string out = "'";
    size_t i = 0;
    while (i < s.size() && i < 80) {
        const size_t n = utf8_sequence_length(s, i);
        const unsigned char ch = (unsigned char)s[i];
        if (n == 0 || (n == 1 && (ch < 0x20 || ch == 0x7f))) {
            out += '?';
            ++i;
        } else {
            out.append(s, i, n);
            i += n;
        }
    }
    if (i < s.size()) out += "...";
    return out + "'";
}

}  // namespace

const char* gguf_type_name(gguf_type t) {
    static const char* names[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    const uint32_t i = (uint32_t)t;
    return i < (uint32_t)gguf_type::COUNT ? names[i] : "unknown";
}

size_t gguf_type_size(gguf_type t) {
    switch (t) {
        case gguf_type::U8: case gguf_type::I8: case gguf_type::BOOL: return 1;
        case gguf_type::U16: case gguf_type::I16: return 2;
        case gguf_type::U32: case gguf_type::I32: case gguf_type::F32: return 4;
        case gguf_type::U64: case gguf_type::I64: case gguf_type::F64: return 8;
        default: return 0;
    }
}

// ---------------------------------------------------------------------------
// The validating parser: a bounds-checked cursor plus the context ("key #5
// 'general.name', element 12") that error messages carry.
// ---------------------------------------------------------------------------
class gguf_parser {
public:
    explicit gguf_parser(gguf_file& f) : f_(f), p_(f.base_), size_(f.size_) {}

    void parse() {
        parse_header();
        parse_kvs();
        parse_alignment();
        parse_tensor_infos();
        place_data_section();
        check_tensor_data();
    }

private:
    gguf_file& f_;
    const uint8_t* p_;
    uint64_t size_;
    uint64_t pos_ = 0;
    uint64_t n_tensors_ = 0;
    uint64_t n_kv_ = 0;

    // error context
    const char* kind_ = "header";
    uint64_t index_ = 0;
    const std::string* name_ = nullptr;
    uint64_t elem_path_[max_array_depth + 1] = {};
    int depth_ = 0;  // array nesting level of the value being read

    uint64_t remaining() const { return size_ - pos_; }

    std::string context() const {
        std::string s = kind_;
        if (kind_[0] != 'h') s += " #" + std::to_string(index_);
        if (name_) s += " " + quoted(*name_);
        for (int d = 0; d < depth_; ++d) s += (d == 0 ? ", element " : ".") + std::to_string(elem_path_[d]);
        return s;
    }

    [[noreturn]] void fail(uint64_t at, const std::string& msg) const {
        throw gguf_error("GGUF: " + context() + " at byte " + std::to_string(at) + ": " + msg);
    }

    void need(uint64_t n, const char* what) const {
        if (n > remaining())
            fail(pos_, std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes, " +
                           std::to_string(remaining()) + " remain (file size " + std::to_string(size_) + ")");
    }

    template <class T> T read(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, p_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    gguf_str read_string(const char* what) {
        const uint64_t at = pos_;
        const uint64_t len = read<uint64_t>(what);
        if (len > remaining())
            fail(at, std::string(what) + " length " + std::to_string(len) + " exceeds remaining " +
                         std::to_string(remaining()) + " bytes");
        gguf_str s{pos_, len};
        pos_ += len;
        return s;
    }

    // ---- header -----------------------------------------------------------
    void parse_header() {
        if (size_ < 4) fail(0, "file is too small to be GGUF (" + std::to_string(size_) + " bytes)");
        if (std::memcmp(p_, "GGUF", 4) != 0) {
            std::string magic;
            for (int i = 0; i < 4; ++i) magic += (p_[i] >= 0x20 && p_[i] < 0x7f) ? (char)p_[i] : '?';
            fail(0, "not a GGUF file: magic is '" + magic + "', expected 'GGUF'");
        }
        pos_ = 4;
        const uint32_t version = read<uint32_t>("version");
        check_version(version);
        f_.version_ = version;
        need(header_bytes - pos_, "header");
        n_tensors_ = read<uint64_t>("n_tensors");
        n_kv_ = read<uint64_t>("n_kv");
        // each pair and tensor info takes some bytes: bound both before any reserve
        if (n_kv_ > remaining() / min_kv_bytes)
            fail(16, "n_kv " + std::to_string(n_kv_) + " cannot fit in the remaining " +
                         std::to_string(remaining()) + " bytes");
        if (n_tensors_ > (remaining() - n_kv_ * min_kv_bytes) / min_tensor_info_bytes)
            fail(8, "n_tensors " + std::to_string(n_tensors_) + " cannot fit in the remaining " +
                        std::to_string(remaining()) + " bytes");
    }

    void check_version(uint32_t v) const {
        if (v == 2 || v == 3) return;
        if (v == 1) fail(4, "GGUF version 1 is not supported (only versions 2 and 3); re-convert the model");
        if (v == 0x02000000u || v == 0x03000000u)
            fail(4, "big-endian GGUF files are not supported (version field reads " + std::to_string(v) +
                        " little-endian)");
        fail(4, "unsupported GGUF version " + std::to_string(v) + " (supported: 2 and 3)");
    }

    // ---- metadata ---------------------------------------------------------
    void parse_kvs() {
        f_.kvs_.reserve(std::min(n_kv_, max_reserve));
        f_.kv_index_.reserve(std::min(n_kv_, max_reserve));
        kind_ = "key";
        for (uint64_t i = 0; i < n_kv_; ++i) {
            index_ = i;
            name_ = nullptr;
            f_.kvs_.emplace_back();
            gguf_kv& kv = f_.kvs_.back();
            kv.key_pos = pos_;
            kv.key = f_.string_value(read_string("key"));
            name_ = &kv.key;
            if (!f_.kv_index_.emplace(kv.key, i).second) fail(kv.key_pos, "duplicate key");
            kv.type = read_type("value type");
            kv.value_pos = pos_;
            if (kv.type == gguf_type::ARRAY) {
                scan_array(&kv.array);
            } else {
                scan_value(kv.type);
            }
            kv.value_size = pos_ - kv.value_pos;
        }
        name_ = nullptr;
    }

    gguf_type read_type(const char* what) {
        const uint64_t at = pos_;
        const uint32_t t = read<uint32_t>(what);
        if (t >= (uint32_t)gguf_type::COUNT) fail(at, std::string("unknown ") + what + " " + std::to_string(t));
        return (gguf_type)t;
    }

    // Skip over one value of type t, checking it.
    void scan_value(gguf_type t) {
        if (t == gguf_type::STRING) {
            read_string("string");
        } else if (t == gguf_type::ARRAY) {
            scan_array(nullptr);
        } else {
            const size_t n = gguf_type_size(t);
            need(n, gguf_type_name(t));
            if (t == gguf_type::BOOL && p_[pos_] > 1)
                fail(pos_, "bool value " + std::to_string(p_[pos_]) + " is not 0 or 1");
            pos_ += n;
        }
    }

    // Skip over an array, checking its count against the bytes left before
    // looking at any element. Fills `out` (a top-level array) with the
    // element positions; nested arrays are re-read on demand (array_at).
    void scan_array(gguf_array* out) {
        if (depth_ >= max_array_depth)
            fail(pos_, "arrays nested deeper than " + std::to_string(max_array_depth) + " levels");
        const uint64_t at = pos_;
        const gguf_type elem = read_type("array element type");
        const uint64_t count = read<uint64_t>("array count");
        const uint64_t min = min_value_bytes(elem);
        if (count > remaining() / min)
            fail(at, "array of " + std::to_string(count) + " " + gguf_type_name(elem) + " (at least " +
                         std::to_string(min) + " bytes each) exceeds remaining " + std::to_string(remaining()) +
                         " bytes");
        if (out) {
            out->elem_type = elem;
            out->count = count;
            out->data_pos = pos_;
        }
        if (min_value_bytes(elem) == gguf_type_size(elem)) {
            scan_fixed_elements(elem, count);
            return;
        }
        if (out) out->elem_pos.reserve(count);  // bounded: count * 8 <= remaining
        ++depth_;
        for (uint64_t i = 0; i < count; ++i) {
            elem_path_[depth_ - 1] = i;
            if (out) out->elem_pos.push_back(pos_);
            scan_value(elem);
        }
        --depth_;
    }

    void scan_fixed_elements(gguf_type elem, uint64_t count) {
        const uint64_t n = count * gguf_type_size(elem);  // fits: checked by the caller
        if (elem == gguf_type::BOOL) {
            for (uint64_t i = 0; i < count; ++i)
                if (p_[pos_ + i] > 1)
                    fail(pos_ + i, "bool array element " + std::to_string(i) + " is " +
                                       std::to_string(p_[pos_ + i]) + ", not 0 or 1");
        }
        pos_ += n;
    }

    void parse_alignment() {
        const gguf_kv* kv = f_.find_kv("general.alignment");
        if (!kv) return;
        kind_ = "key";
        index_ = (uint64_t)(kv - f_.kvs_.data());
        name_ = &kv->key;
        if (kv->type != gguf_type::U32)
            fail(kv->value_pos, std::string("general.alignment must be a u32, found ") + gguf_type_name(kv->type));
        const uint32_t a = f_.scalar_at<uint32_t>(kv->value_pos);
        if (!is_power_of_two(a))
            fail(kv->value_pos, "alignment " + std::to_string(a) + " is not a nonzero power of two");
        f_.alignment_ = a;
        name_ = nullptr;
    }

    // ---- tensor infos -----------------------------------------------------
    void parse_tensor_infos() {
        f_.tensors_.reserve(std::min(n_tensors_, max_reserve));
        f_.tensor_index_.reserve(std::min(n_tensors_, max_reserve));
        kind_ = "tensor";
        for (uint64_t i = 0; i < n_tensors_; ++i) {
            index_ = i;
            name_ = nullptr;
            f_.tensors_.emplace_back();
            gguf_tensor_info& t = f_.tensors_.back();
            t.info_pos = pos_;
            t.name = f_.string_value(read_string("tensor name"));
            name_ = &t.name;
            if (!f_.tensor_index_.emplace(t.name, i).second) fail(t.info_pos, "duplicate tensor name");
            parse_dims(t);
            parse_tensor_type(t);
            const uint64_t at = pos_;
            t.offset = read<uint64_t>("tensor offset");
            if (t.offset % f_.alignment_ != 0)
                fail(at, "offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                             std::to_string(f_.alignment_));
        }
        name_ = nullptr;
    }

    void parse_dims(gguf_tensor_info& t) {
        const uint64_t at = pos_;
        t.n_dims = read<uint32_t>("n_dims");
        if (t.n_dims > 4) fail(at, "n_dims " + std::to_string(t.n_dims) + " exceeds 4");
        uint64_t n_elements = 1;
        for (uint32_t d = 0; d < t.n_dims; ++d) {
            const uint64_t dim_at = pos_;
            const uint64_t ne = read<uint64_t>("dimension");
            if (ne > (uint64_t)INT64_MAX) fail(dim_at, "ne[" + std::to_string(d) + "] = " + std::to_string(ne) + " is negative");
            if (ne != 0 && n_elements > (uint64_t)INT64_MAX / ne)
                fail(dim_at, "element count overflows at ne[" + std::to_string(d) + "] = " + std::to_string(ne));
            n_elements *= ne;
            t.ne[d] = (int64_t)ne;
        }
    }

    void parse_tensor_type(gguf_tensor_info& t) {
        const uint64_t at = pos_;
        const uint32_t type = read<uint32_t>("tensor type");
        if (type > (uint32_t)INT32_MAX || !type_is_valid((int32_t)type))
            fail(at, "unknown tensor type " + std::to_string(type));
        t.type = (ggml_type)type;
        const type_traits& tr = traits(t.type, isa::scalar);
        if (t.ne[0] % tr.block_size != 0)
            fail(at, std::string("ne[0] = ") + std::to_string(t.ne[0]) + " is not a multiple of the " + tr.name +
                         " block size " + std::to_string(tr.block_size));
        const uint64_t n_blocks = (uint64_t)(t.ne[0] / tr.block_size);
        if (n_blocks > UINT64_MAX / tr.type_size) fail(at, "tensor byte size overflows 64 bits");
        uint64_t nbytes = n_blocks * tr.type_size;  // one row
        for (int d = 1; d < 4; ++d) {
            const uint64_t ne = (uint64_t)t.ne[d];
            if (ne != 0 && nbytes > UINT64_MAX / ne) fail(at, "tensor byte size overflows 64 bits");
            nbytes *= ne;
        }
        t.nbytes = nbytes;
    }

    // ---- data section -----------------------------------------------------
    void place_data_section() {
        kind_ = "header";
        const uint64_t a = f_.alignment_;
        const uint64_t start = pos_ + (a - pos_ % a) % a;  // pos_ <= size_ < 2^63, a <= 2^31
        if (n_tensors_ > 0 && start > size_)
            fail(pos_, "data section would start at byte " + std::to_string(start) + ", past the end of the file (size " +
                           std::to_string(size_) + ")");
        f_.data_offset_ = start;
    }

    void check_tensor_data() {
        const uint64_t data_size = n_tensors_ > 0 ? size_ - f_.data_offset_ : 0;
        std::vector<uint32_t> order;  // indices of non-empty tensors, sorted by offset
        order.reserve(f_.tensors_.size());
        for (size_t i = 0; i < f_.tensors_.size(); ++i) {
            const gguf_tensor_info& t = f_.tensors_[i];
            if (t.offset > data_size || t.nbytes > data_size - t.offset)
                tensor_fail(t, "data [offset " + std::to_string(f_.data_offset_ + t.offset) + ", " +
                                   std::to_string(t.nbytes) + " bytes] runs past the end of the file (file size " +
                                   std::to_string(size_) + ")");
            if (t.nbytes > 0) order.push_back((uint32_t)i);
        }
        std::sort(order.begin(), order.end(),
                  [&](uint32_t a, uint32_t b) { return f_.tensors_[a].offset < f_.tensors_[b].offset; });
        for (size_t k = 1; k < order.size(); ++k) {
            const gguf_tensor_info& prev = f_.tensors_[order[k - 1]];
            const gguf_tensor_info& t = f_.tensors_[order[k]];
            if (t.offset < prev.offset + prev.nbytes)
                tensor_fail(t, "data at offset " + std::to_string(f_.data_offset_ + t.offset) + " overlaps tensor " +
                                   quoted(prev.name) + " [" + std::to_string(f_.data_offset_ + prev.offset) + ", " +
                                   std::to_string(prev.nbytes) + " bytes]");
        }
    }

    [[noreturn]] void tensor_fail(const gguf_tensor_info& t, const std::string& msg) const {
        throw gguf_error("GGUF: tensor " + quoted(t.name) + ": " + msg);
    }
};

// ---------------------------------------------------------------------------
// gguf_file
// ---------------------------------------------------------------------------
namespace {

// Closes a file descriptor on scope exit.
struct fd_guard {
    int fd;
    ~fd_guard() { if (fd >= 0) ::close(fd); }
};

}  // namespace

// The file read into private anonymous memory, read-only afterwards. Token
// generation streams every weight once per token; from a file mapping (page
// cache pages wherever the kernel put them, 4 KB at a time) the 2-core VMs
// here decoded a 1B Q4_K_M model 5-30 % slower than from this copy in all
// but one pair of alternating runs (benchmarks/RESULTS.md 2026-12-06).
// llama.cpp's CPU repack buffers are such copies too. Not advised for huge
// pages: anonymous huge pages are zeroed on first touch, which made loads
// 2-6x slower on the VMs here; the default now prefers the file's own pages
// mapped 2 MiB at a time where the kernel gives them (huge_pages.h) and
// falls back to this copy.
// Files below this are read into memory even where huge pages are preferred:
// a few 2 MiB pages gain nothing, and tiny files would waste most of one.
static constexpr uint64_t kMinHugeMapped = uint64_t(16) << 20;

static void* read_into_memory(int fd, uint64_t size, const std::string& path) {
    void* m = ::mmap(nullptr, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        throw gguf_os_error("cannot allocate " + std::to_string(size) + " bytes to read " + path + " into: " +
                                std::strerror(errno), errno, path);
    uint64_t off = 0;
    while (off < size) {
        const size_t want = (size_t)std::min<uint64_t>(size - off, uint64_t(1) << 26);
        const ssize_t r = ::pread(fd, static_cast<char*>(m) + off, want, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            const int e = r < 0 ? errno : EIO;
            ::munmap(m, (size_t)size);
            throw gguf_os_error("cannot read " + path + " at byte " + std::to_string(off) + ": " +
                                    (r < 0 ? std::strerror(e) : "the file ended early (changed while reading?)"),
                                e, path);
        }
        off += (uint64_t)r;
    }
    ::mprotect(m, (size_t)size, PROT_READ);
    return m;
}

std::shared_ptr<gguf_file> gguf_file::open(const std::string& path, bool in_memory, bool huge_pages) {
    std::shared_ptr<gguf_file> f = open_one(path, in_memory, huge_pages);
    f->open_parts(in_memory, huge_pages);
    if (f->huge_mapped_)
        for (const auto& p : f->parts_) f->huge_mapped_ = f->huge_mapped_ && p->huge_mapped_;
    return f;
}

std::shared_ptr<gguf_file> gguf_file::open_one(const std::string& path, bool in_memory, bool huge_pages) {
    fd_guard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
    if (fd.fd < 0) throw gguf_os_error("cannot open " + path + ": " + std::strerror(errno), errno, path);
    struct stat st;
    if (::fstat(fd.fd, &st) != 0) throw gguf_os_error("cannot stat " + path + ": " + std::strerror(errno), errno, path);
    if (S_ISDIR(st.st_mode)) throw gguf_os_error("is a directory: " + path, EISDIR, path);
    if (!S_ISREG(st.st_mode)) throw gguf_error("GGUF: " + path + " is not a regular file");
    if (st.st_size < 4) throw gguf_error("GGUF: header at byte 0: file is too small to be GGUF (" +
                                         std::to_string((long long)st.st_size) + " bytes)");
    std::shared_ptr<gguf_file> f(new gguf_file());
    f->path_ = path;
    f->size_ = (uint64_t)st.st_size;
    void* m = MAP_FAILED;
    if (huge_pages && (!in_memory || f->size_ >= kMinHugeMapped)) {
        m = map_file_huge_advised(fd.fd, (size_t)f->size_);
        if (!m) m = MAP_FAILED;
        // Reading into memory was asked: keep this mapping only if the
        // kernel read the file in 2 MiB pages (huge_pages.h).
        if (m != MAP_FAILED && in_memory) {
            if (populate_in_huge_pages(m, (size_t)f->size_, fd.fd)) {
                f->huge_mapped_ = true;
                in_memory = false;
            } else {
                ::munmap(m, (size_t)f->size_);
                m = MAP_FAILED;
            }
        }
    }
    if (m == MAP_FAILED)
        m = in_memory ? read_into_memory(fd.fd, f->size_, path)
                      : ::mmap(nullptr, (size_t)f->size_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (m == MAP_FAILED) throw gguf_os_error("cannot map " + path + ": " + std::strerror(errno), errno, path);
    f->base_ = (const uint8_t*)m;
    f->mapped_ = true;
    f->in_memory_ = in_memory;
    f->parse();
    return f;
}

std::shared_ptr<gguf_file> gguf_file::from_buffer(const void* data, size_t size) {
    std::shared_ptr<gguf_file> f(new gguf_file());
    f->owned_.reset(new uint64_t[size / 8 + 1]);
    if (size) std::memcpy(f->owned_.get(), data, size);
    f->base_ = (const uint8_t*)f->owned_.get();
    f->size_ = size;
    f->parse();
    return f;
}

// ---------------------------------------------------------------------------
// Split models (gguf.h): the first part opens the others by name and checks
// that they belong together, as llama.cpp's loader does.
// ---------------------------------------------------------------------------
namespace {

// "-00002-of-00003.gguf": how the name of part `no` (0-based) of n ends.
std::string split_suffix(int64_t no, int64_t n) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "-%05lld-of-%05lld.gguf", (long long)(no + 1), (long long)n);
    return buf;
}

// A split key as an integer in [0, hi]; -1 when absent. `where` names the file.
int64_t split_int(const gguf_file& f, const char* key, int64_t hi, const std::string& where) {
    const gguf_kv* kv = f.find_kv(key);
    if (!kv) return -1;
    const bool is_int = gguf_type_size(kv->type) != 0 && kv->type != gguf_type::BOOL && kv->type != gguf_type::F32 &&
                        kv->type != gguf_type::F64;
    if (!is_int)
        throw gguf_error("GGUF: " + where + ": " + key + " holds " + gguf_type_name(kv->type) + ", not an integer");
    const auto outside = [&](const std::string& v) {
        return gguf_error("GGUF: " + where + ": " + key + " = " + v + " is outside [0, " + std::to_string(hi) + "]");
    };
    if (kv->type == gguf_type::U64) {  // read here: get_int refuses values past 2^63
        const uint64_t u = f.scalar_at<uint64_t>(kv->value_pos);
        if (u > (uint64_t)hi) throw outside(std::to_string(u));
        return (int64_t)u;
    }
    const int64_t v = f.get_int(key, 0);
    if (v < 0 || v > hi) throw outside(std::to_string(v));
    return v;
}

std::string part_name(int64_t no, int64_t n) {
    return "part " + std::to_string(no + 1) + " of " + std::to_string(n);
}

}  // namespace

void gguf_file::open_parts(bool in_memory, bool huge_pages) {
    constexpr int64_t max_parts = 65535;  // split.count is a u16
    const int64_t n = split_int(*this, "split.count", max_parts, path_);
    if (n <= 1) return;  // a single file (split.count absent, 0 or 1)
    const int64_t no = split_int(*this, "split.no", n - 1, path_);
    if (no < 0)
        throw gguf_error("GGUF: " + path_ + ": split.count is " + std::to_string(n) + " but split.no is missing");
    const std::string suffix = split_suffix(no, n);
    const bool named = path_.size() > suffix.size() &&
                       path_.compare(path_.size() - suffix.size(), suffix.size(), suffix) == 0;
    const std::string prefix = named ? path_.substr(0, path_.size() - suffix.size()) : "";
    if (no != 0)
        throw gguf_error("GGUF: " + path_ + " is " + part_name(no, n) + " of a split model; load the model from its " +
                         "first part" + (named ? " " + prefix + split_suffix(0, n) : " (split.no 0)") +
                         ", as llama.cpp does");
    if (!named)
        throw gguf_error("GGUF: " + path_ + " is the first part of a model split into " + std::to_string(n) +
                         " files, but its name does not end in " + suffix +
                         ", so the other parts cannot be found (gguf-split names them <prefix>" + suffix +
                         ", <prefix>" + split_suffix(1, n) + ", ...)");
    const int64_t n_total = split_int(*this, "split.tensors.count", INT32_MAX, path_);
    if (n_total < 0) throw gguf_error("GGUF: " + path_ + ": split model without split.tensors.count");
    for (int64_t i = 1; i < n; ++i) {
        const std::string p = prefix + split_suffix(i, n);
        const std::string where = part_name(i, n) + " (" + p + ")";
        std::shared_ptr<gguf_file> next;
        try {
            next = open_one(p, in_memory, huge_pages);
        } catch (const gguf_os_error& e) {
            const std::string what = e.err == ENOENT
                ? "model is split into " + std::to_string(n) + " files; part " + std::to_string(i + 1) + " is missing"
                : "cannot read " + part_name(i, n) + ": " + (e.detail.empty() ? std::strerror(e.err) : e.detail);
            throw gguf_os_error(what + ": " + p, e.err, p, what);
        } catch (const gguf_error& e) {
            const std::string msg = e.what();
            throw gguf_error("GGUF: " + where + ": " + (msg.rfind("GGUF: ", 0) == 0 ? msg.substr(6) : msg));
        }
        const int64_t part_n = split_int(*next, "split.count", max_parts, where);
        const int64_t part_no = split_int(*next, "split.no", max_parts, where);
        if (part_n != n)
            throw gguf_error("GGUF: " + where + ": its split.count is " +
                             (part_n < 0 ? "missing" : std::to_string(part_n)) + ", the first part's is " +
                             std::to_string(n));
        if (part_no != i)
            throw gguf_error("GGUF: " + where + ": its split.no is " +
                             (part_no < 0 ? "missing"
                                          : std::to_string(part_no) + " (part " + std::to_string(part_no + 1) + ")") +
                             ", but its name makes it part " + std::to_string(i + 1));
        for (gguf_tensor_info t : next->tensors_) {
            auto seen = tensor_index_.find(t.name);
            if (seen != tensor_index_.end()) {
                const uint32_t first = tensors_[seen->second].part;
                throw gguf_error("GGUF: tensor " + quoted(t.name) + " is in both " + part_name(first, n) + " (" +
                                 part(first).path() + ") and " + where);
            }
            t.part = (uint32_t)i;
            tensor_index_.emplace(t.name, tensors_.size());
            tensors_.push_back(std::move(t));
        }
        parts_.push_back(std::move(next));
    }
    if ((int64_t)tensors_.size() != n_total)
        throw gguf_error("GGUF: " + path_ + ": split.tensors.count says the model has " + std::to_string(n_total) +
                         " tensors, its " + std::to_string(n) + " parts hold " + std::to_string(tensors_.size()));
}

uint64_t gguf_file::total_size() const {
    uint64_t n = 0;
    for (size_t i = 0; i < n_parts(); ++i) n += part(i).size();
    return n;
}

gguf_file::~gguf_file() {
    if (mapped_ && base_) ::munmap((void*)base_, (size_t)size_);
}

void gguf_file::parse() {
    gguf_parser(*this).parse();
}

const gguf_kv* gguf_file::find_kv(const std::string& key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const gguf_tensor_info* gguf_file::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

gguf_str gguf_file::string_at(uint64_t pos) const {
    return gguf_str{pos + 8, scalar_at<uint64_t>(pos)};
}

uint64_t gguf_file::value_end(gguf_type t, uint64_t pos) const {
    // validated by parse(): lengths and counts fit, nesting is bounded
    if (t == gguf_type::STRING) return pos + 8 + scalar_at<uint64_t>(pos);
    if (t != gguf_type::ARRAY) return pos + gguf_type_size(t);
    const gguf_type elem = (gguf_type)scalar_at<uint32_t>(pos);
    const uint64_t count = scalar_at<uint64_t>(pos + 4);
    uint64_t p = pos + 12;
    if (gguf_type_size(elem) != 0) return p + count * gguf_type_size(elem);
    for (uint64_t i = 0; i < count; ++i) p = value_end(elem, p);
    return p;
}

gguf_array gguf_file::array_at(uint64_t pos) const {
    gguf_array a;
    a.elem_type = (gguf_type)scalar_at<uint32_t>(pos);
    a.count = scalar_at<uint64_t>(pos + 4);
    a.data_pos = pos + 12;
    if (gguf_type_size(a.elem_type) != 0) return a;
    a.elem_pos.reserve(a.count);
    uint64_t p = a.data_pos;
    for (uint64_t i = 0; i < a.count; ++i) {
        a.elem_pos.push_back(p);
        p = value_end(a.elem_type, p);
    }
    return a;
}

uint64_t gguf_file::array_elem_pos(const gguf_array& a, uint64_t i) const {
    const size_t n = gguf_type_size(a.elem_type);
    return n ? a.data_pos + i * n : a.elem_pos[i];
}

// ---------------------------------------------------------------------------
// Convenience lookups
// ---------------------------------------------------------------------------
namespace {

[[noreturn]] void wrong_type(const gguf_kv& kv, const char* wanted) {
    throw gguf_error("GGUF: key " + quoted(kv.key) + " at byte " + std::to_string(kv.key_pos) + ": expected " +
                     wanted + ", found " + gguf_type_name(kv.type));
}

}  // namespace

namespace {

const char* override_kind_name(gguf_override::kind k) {
    switch (k) {
        case gguf_override::kind::integer: return "an int";
        case gguf_override::kind::floating: return "a float";
        case gguf_override::kind::boolean: return "a bool";
        default: return "a str";
    }
}

[[noreturn]] void bad_override(const gguf_override& o, const std::string& wanted) {
    throw gguf_error("kv_overrides[" + o.key + "] is " + override_kind_name(o.k) + ", but the key needs " + wanted);
}

}  // namespace

void gguf_file::set_overrides(std::vector<gguf_override> ov) {
    for (const gguf_override& o : ov) {
        const gguf_kv* kv = find_kv(o.key);
        if (!kv) continue;  // a new key: its reader decides what it needs
        using K = gguf_override::kind;
        const gguf_type t = kv->type;
        const bool is_int = gguf_type_size(t) != 0 && t != gguf_type::BOOL && t != gguf_type::F32 && t != gguf_type::F64;
        if (t == gguf_type::ARRAY || t == gguf_type::STRING) {
            if (o.k != K::string || t == gguf_type::ARRAY) bad_override(o, t == gguf_type::ARRAY ? "an array (arrays cannot be overridden)" : "a str");
        } else if (t == gguf_type::BOOL) {
            if (o.k != K::boolean) bad_override(o, "a bool");
        } else if (is_int) {
            if (o.k != K::integer) bad_override(o, "an int");
        } else if (o.k != K::integer && o.k != K::floating) {
            bad_override(o, "a float");
        }
    }
    overrides_ = std::move(ov);
    override_read_.assign(overrides_.size(), 0);
}

const gguf_override* gguf_file::find_override(const std::string& key) const {
    for (size_t i = 0; i < overrides_.size(); ++i)
        if (overrides_[i].key == key) {
            override_read_[i] = 1;
            return &overrides_[i];
        }
    return nullptr;
}

std::vector<std::string> gguf_file::unread_overrides() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < overrides_.size(); ++i)
        if (!override_read_[i]) out.push_back(overrides_[i].key);
    return out;
}

int64_t gguf_file::get_int(const std::string& key, int64_t def) const {
    if (const gguf_override* o = find_override(key)) {
        if (o->k != gguf_override::kind::integer) bad_override(*o, "an int");
        return o->i;
    }
    const gguf_kv* kv = find_kv(key);
    if (!kv) return def;
    const uint64_t p = kv->value_pos;
    switch (kv->type) {
        case gguf_type::U8: return scalar_at<uint8_t>(p);
        case gguf_type::I8: return scalar_at<int8_t>(p);
        case gguf_type::U16: return scalar_at<uint16_t>(p);
        case gguf_type::I16: return scalar_at<int16_t>(p);
        case gguf_type::U32: return scalar_at<uint32_t>(p);
        case gguf_type::I32: return scalar_at<int32_t>(p);
        case gguf_type::I64: return scalar_at<int64_t>(p);
        case gguf_type::U64: {
            const uint64_t v = scalar_at<uint64_t>(p);
            if (v > (uint64_t)INT64_MAX) wrong_type(*kv, "an integer below 2^63");
            return (int64_t)v;
        }
        default: wrong_type(*kv, "an integer");
    }
}

double gguf_file::get_float(const std::string& key, double def) const {
    if (const gguf_override* o = find_override(key)) {
        if (o->k == gguf_override::kind::integer) return (double)o->i;
        if (o->k != gguf_override::kind::floating) bad_override(*o, "a float");
        return o->f;
    }
    const gguf_kv* kv = find_kv(key);
    if (!kv) return def;
    if (kv->type == gguf_type::F32) return scalar_at<float>(kv->value_pos);
    if (kv->type == gguf_type::F64) return scalar_at<double>(kv->value_pos);
    if (gguf_type_size(kv->type) != 0 && kv->type != gguf_type::BOOL) return (double)get_int(key, 0);
    wrong_type(*kv, "a number");
}

bool gguf_file::get_bool(const std::string& key, bool def) const {
    if (const gguf_override* o = find_override(key)) {
        if (o->k != gguf_override::kind::boolean) bad_override(*o, "a bool");
        return o->b;
    }
    const gguf_kv* kv = find_kv(key);
    if (!kv) return def;
    if (kv->type != gguf_type::BOOL) wrong_type(*kv, "a bool");
    return scalar_at<uint8_t>(kv->value_pos) != 0;
}

std::string gguf_file::get_string(const std::string& key, const std::string& def) const {
    if (const gguf_override* o = find_override(key)) {
        if (o->k != gguf_override::kind::string) bad_override(*o, "a str");
        return o->s;
    }
    const gguf_kv* kv = find_kv(key);
    if (!kv) return def;
    if (kv->type != gguf_type::STRING) wrong_type(*kv, "a string");
    return string_value(string_at(kv->value_pos));
}

}  // namespace lp
