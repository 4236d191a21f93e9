// buffer.cpp — see buffer.h.
#include "buffer.h"

#include <new>
#include <utility>

#include "../model/model.h"
#if defined(LP_ENABLE_VULKAN)
#include "vulkan_backend.h"
#endif

namespace lp {

namespace {
constexpr std::align_val_t kHostAlign{64};
}

device_buffer::device_buffer(device where, size_t n_bytes) : where_(where) {
    if (!where.is_host()) {
#if defined(LP_ENABLE_VULKAN)
        if (n_bytes == 0) return;
        data_ = vulkan_alloc(where.id, n_bytes, &handle_);
        bytes_ = n_bytes;
        return;
#else
        throw not_implemented_error("device " + where.name() + ": this build has no backend that allocates there");
#endif
    }
    if (n_bytes == 0) return;
    data_ = ::operator new(n_bytes, kHostAlign);
    bytes_ = n_bytes;
}

device_buffer::~device_buffer() { release(); }

void device_buffer::release() {
#if defined(LP_ENABLE_VULKAN)
    if (handle_) {
        vulkan_free(handle_);
        handle_ = nullptr;
        data_ = nullptr;
    }
#endif
    if (data_) ::operator delete(data_, kHostAlign);
    data_ = nullptr;
    bytes_ = 0;
}

device_buffer::device_buffer(device_buffer&& o) noexcept
    : where_(o.where_), data_(std::exchange(o.data_, nullptr)), handle_(std::exchange(o.handle_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)) {}

device_buffer& device_buffer::operator=(device_buffer&& o) noexcept {
    if (this != &o) {
        release();
        where_ = o.where_;
        data_ = std::exchange(o.data_, nullptr);
        handle_ = std::exchange(o.handle_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

}  // namespace lp
