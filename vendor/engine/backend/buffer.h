// buffer.h — memory that knows where it lives. A device names a place
// (the host, or accelerator n); a device_buffer owns bytes there. The
// activations of a context (run_state) and its KV cache are device_buffers,
// so a backend that computes elsewhere finds them on its own device.
//
// GPU memory is allocated by the device's backend (registry.h): mapped,
// host-visible memory, so the host reads and writes it in place once the
// device's work on it has finished (backend::sync). Asking for a GPU device
// that does not exist (none in a CPU-only build) throws value_error.
// Not here: the operations (backend.h), what is placed where (placement.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lp {

struct device {
    enum class kind : uint8_t { host, gpu };
    kind k = kind::host;
    int id = 0;  // which accelerator (gpu); 0 for the host

    static device host() { return {}; }
    bool is_host() const { return k == kind::host; }
    std::string name() const { return is_host() ? "cpu" : "gpu" + std::to_string(id); }
    bool operator==(const device& o) const { return k == o.k && id == o.id; }
    bool operator!=(const device& o) const { return !(*this == o); }
};

// n bytes on one device, uninitialised when allocated (the first forward
// pass writes activations; the KV cache writes a cell before reading it).
// Host memory is 64-byte aligned. Movable, not copyable.
class device_buffer {
public:
    device_buffer() = default;
    device_buffer(device where, size_t n_bytes);
    ~device_buffer();
    device_buffer(device_buffer&& o) noexcept;
    device_buffer& operator=(device_buffer&& o) noexcept;
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;

    device where() const { return where_; }
    size_t bytes() const { return bytes_; }
    bool empty() const { return bytes_ == 0; }
    // The memory, as a host address (GPU buffers are mapped).
    void* data() { return data_; }
    const void* data() const { return data_; }
    uint8_t* u8() { return static_cast<uint8_t*>(data_); }
    const uint8_t* u8() const { return static_cast<const uint8_t*>(data_); }
    float* f32() { return static_cast<float*>(data_); }
    const float* f32() const { return static_cast<const float*>(data_); }

private:
    void release();
    device where_;
    void* data_ = nullptr;
    void* handle_ = nullptr;  // the GPU allocation, as its backend's allocate() made it (null for host memory)
    size_t bytes_ = 0;
};

// A buffer of n floats (activation rows).
inline device_buffer float_buffer(device where, size_t n) { return device_buffer(where, n * sizeof(float)); }

}  // namespace lp
