// gguf.h — a validating, zero-copy reader for GGUF model files (versions 2
// and 3, little-endian). The file is mapped read-only; metadata values and
// tensor data are read in place. Every count, length, offset and size is
// checked against the file before use, and any problem throws lp::gguf_error
// naming the field and its byte offset.
// Not here: what the metadata means for a model (see the model loaders), or
// writing GGUF files. Like any mmap reader, it cannot defend against another
// process truncating the file while it is mapped (reads would fault).
//
// Byte layout (all integers little-endian):
//
//   header
//     char[4]  magic         "GGUF"
//     u32      version       2 or 3 (1 used 32-bit counts and is rejected;
//                            a byte-swapped version means a big-endian file,
//                            also rejected)
//     u64      n_tensors
//     u64      n_kv
//   n_kv metadata pairs
//     string   key           string = u64 length, then that many bytes (UTF-8,
//                            not NUL-terminated)
//     u32      value type    see gguf_type below
//     ...      value         fixed-size scalar, string, or array:
//                              u32 element type, u64 count, count elements
//                              (elements may be strings or arrays themselves)
//   n_tensors tensor infos
//     string   name
//     u32      n_dims        at most 4
//     u64      ne[n_dims]    elements per dimension, fastest-varying first
//     u32      type          ggml_type (ggml_type.h)
//     u64      offset        of the tensor's bytes from the start of the data
//                            section; a multiple of the alignment
//   padding                  zeros up to a multiple of the alignment:
//                            `general.alignment` (u32, a power of two), 32 if
//                            absent
//   data section             tensor bytes, each tensor padded to the alignment
//
// Split models (llama.cpp's gguf-split, gguf-py's split writer): a model
// stored as n files named <prefix>-%05d-of-%05d.gguf (1-based). Each part is
// a complete GGUF file as above, with its own tensor infos and data section
// (offsets relative to that part's data section), and the keys
//   split.no             u16  this part's number, 0-based
//   split.count          u16  n
//   split.tensors.count  i32  tensors over all parts (checked on loading)
// The first part holds the model's metadata; later parts usually hold only
// the split keys. open() on the first part opens the others from the same
// folder, by name; open() on a later part refuses, naming the first part
// (llama.cpp's loader refuses too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "../common.h"
#include "../ggml_type.h"

namespace lp {

// Metadata value types, numbered as in the file.
enum class gguf_type : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
    COUNT = 13,
};

const char* gguf_type_name(gguf_type t);  // "u32", "string", "array", ...
// Bytes of a fixed-size value; 0 for STRING and ARRAY.
size_t gguf_type_size(gguf_type t);

// Opening failed for an operating-system reason (missing file, permissions),
// not because of the file's contents. The bindings raise OSError for it.
struct gguf_os_error : std::runtime_error {
    int err;             // errno
    std::string path;    // the file it concerns (a split model's missing part, say)
    std::string detail;  // what went wrong, without the path; "" means strerror(err)
    gguf_os_error(const std::string& msg, int err_, std::string path_, std::string detail_ = "")
        : std::runtime_error(msg), err(err_), path(std::move(path_)), detail(std::move(detail_)) {}
};

// A string inside the file: bytes [pos, pos + len).
struct gguf_str {
    uint64_t pos = 0;
    uint64_t len = 0;
};

// An array value. Elements of fixed size lie packed from data_pos; elements
// that are strings or arrays have their start offsets listed in elem_pos (a
// string element starts at its u64 length, an array element at its u32
// element type).
struct gguf_array {
    gguf_type elem_type = gguf_type::U8;
    uint64_t count = 0;
    uint64_t data_pos = 0;
    std::vector<uint64_t> elem_pos;  // (count) for STRING / ARRAY elements, else empty
};

struct gguf_kv {
    std::string key;
    uint64_t key_pos = 0;      // byte offset of the key's length field
    gguf_type type = gguf_type::U8;
    uint64_t value_pos = 0;    // first byte of the value (after the type field)
    uint64_t value_size = 0;   // bytes the value occupies
    gguf_array array;          // when type == ARRAY
};

struct gguf_tensor_info {
    std::string name;
    uint64_t info_pos = 0;     // byte offset of this tensor's info record
    uint32_t n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};  // ggml order: ne[0] is the row length
    ggml_type type = ggml_type::F32;
    uint64_t offset = 0;       // from the start of the data section (of its part's file)
    uint64_t nbytes = 0;
    uint32_t part = 0;         // the file of a split model holding it (gguf_file::part), 0 for the first
    // Product of ne; parse() checked that it fits in int64 (a zero in any
    // dimension makes the whole product zero, whatever comes after it).
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// A metadata value given by the user in place of the file's (llama.cpp's
// kv_overrides): it wins over the file's value of the same key in the typed
// getters below, and supplies keys the file lacks.
struct gguf_override {
    enum class kind { integer, floating, boolean, string };
    std::string key;
    kind k = kind::integer;
    int64_t i = 0;
    double f = 0.0;
    bool b = false;
    std::string s;
};

class gguf_file {
public:
    // Map and validate a file, and for the first part of a split model the
    // other parts too (see the top of this file). Throws gguf_os_error if a
    // file cannot be opened (a missing part included), gguf_error if its
    // contents are not a valid GGUF file or the parts do not fit together.
    // in_memory: read the whole file (every part) into private anonymous
    // memory instead of mapping it; see gguf.cpp read_into_memory.
    // huge_pages: map at a 2 MiB boundary advised for huge pages
    // (huge_pages.h); with in_memory, first map and read the file that way
    // and keep that mapping if the kernel gave it 2 MiB pages (huge_mapped),
    // else read it into memory.
    static std::shared_ptr<gguf_file> open(const std::string& path, bool in_memory = false, bool huge_pages = false);
    bool in_memory() const { return in_memory_; }
    bool huge_mapped() const { return huge_mapped_; }  // every part mapped in (mostly) 2 MiB pages, read in
    // Validate a copy of an in-memory image (tests, fuzzing): always one
    // file, its split keys (if any) unread.
    static std::shared_ptr<gguf_file> from_buffer(const void* data, size_t size);

    ~gguf_file();
    gguf_file(const gguf_file&) = delete;
    gguf_file& operator=(const gguf_file&) = delete;

    const std::string& path() const { return path_; }   // "" for a buffer
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // start of the data section
    uint64_t size() const { return size_; }
    const uint8_t* bytes() const { return base_; }

    const std::vector<gguf_kv>& kvs() const { return kvs_; }
    const gguf_kv* find_kv(const std::string& key) const;   // nullptr if absent
    // The tensors of every part of a split model (each names its part), in
    // part order and file order within a part.
    const std::vector<gguf_tensor_info>& tensors() const { return tensors_; }
    const gguf_tensor_info* find_tensor(const std::string& name) const;
    const void* tensor_data(const gguf_tensor_info& t) const {
        const gguf_file& p = part(t.part);
        return p.base_ + p.data_offset_ + t.offset;
    }

    // The files of a split model in order, this one (the first) as part 0;
    // just this one for a single file. Metadata (kvs, the getters, bytes())
    // is the first part's; a later part's own tensors() lists only its own.
    size_t n_parts() const { return 1 + parts_.size(); }
    const gguf_file& part(size_t i) const { return i == 0 ? *this : *parts_[i - 1]; }
    uint64_t total_size() const;  // bytes of all the parts' files

    // Typed reads of values already validated by open(). `pos` is a value
    // position from a gguf_kv, a gguf_array or array_elem_pos().
    template <class T> T scalar_at(uint64_t pos) const {
        T v;
        std::memcpy(&v, base_ + pos, sizeof(T));
        return v;
    }
    gguf_str string_at(uint64_t pos) const;   // pos: the string's length field
    gguf_array array_at(uint64_t pos) const;  // pos: the array's element type field
    // Position of element i of an array (fixed-size or listed).
    uint64_t array_elem_pos(const gguf_array& a, uint64_t i) const;
    std::string string_value(gguf_str s) const { return std::string((const char*)base_ + s.pos, s.len); }

    // Installs user overrides (replacing earlier ones). Call before the file
    // is shared. Throws gguf_error when an override cannot stand for the
    // file's value of that key (a string for a number, a float for an
    // integer, anything for an array).
    void set_overrides(std::vector<gguf_override> ov);
    const gguf_override* find_override(const std::string& key) const;
    // The key is in the file or overridden.
    bool has_key(const std::string& key) const { return find_override(key) || find_kv(key); }
    // Override keys no getter has asked for yet (after loading: the ones
    // that had no effect).
    std::vector<std::string> unread_overrides() const;

    // Convenience lookups for model loaders: integer / float / bool / string
    // scalars by key (an override first). Return `def` when the key is
    // absent; throw gguf_error when it holds another kind of value.
    int64_t get_int(const std::string& key, int64_t def) const;
    double get_float(const std::string& key, double def) const;
    bool get_bool(const std::string& key, bool def) const;
    std::string get_string(const std::string& key, const std::string& def) const;

private:
    gguf_file() = default;
    static std::shared_ptr<gguf_file> open_one(const std::string& path, bool in_memory, bool huge_pages);
    void parse();  // gguf.cpp: validates everything and fills the tables below
    void open_parts(bool in_memory, bool huge_pages);  // gguf.cpp: the other parts of a split model, checked
    uint64_t value_end(gguf_type t, uint64_t pos) const;  // first byte after a validated value

    std::string path_;
    const uint8_t* base_ = nullptr;
    uint64_t size_ = 0;
    bool mapped_ = false;                  // base_ came from mmap (else owned_)
    bool in_memory_ = false;               // that mmap is anonymous memory holding a copy of the file
    bool huge_mapped_ = false;             // that mmap is the file's, read in, mostly in 2 MiB pages
    std::unique_ptr<uint64_t[]> owned_;    // buffer copy, 8-byte aligned

    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<gguf_kv> kvs_;
    std::vector<gguf_override> overrides_;
    mutable std::vector<uint8_t> override_read_;  // per override: a getter asked for it
    std::vector<gguf_tensor_info> tensors_;
    std::unordered_map<std::string, size_t> kv_index_;
    std::unordered_map<std::string, size_t> tensor_index_;
    std::vector<std::shared_ptr<const gguf_file>> parts_;  // (n_parts - 1) a split model's later parts

    friend class gguf_parser;
};

}  // namespace lp
