# options.cmake — parse the backend / ISA options (ours and the GGML_*
# aliases llama-cpp-python users know), reject what we do not have, and
# produce LLAMAPY_DEFINES / LLAMAPY_CXX_FLAGS.

set(LLAMAPY_VERSION "0.1.0")
set(_lp_have_backends "CPU (LLAMAPY_NATIVE, LLAMAPY_PORTABLE, LLAMAPY_AVX2, LLAMAPY_AVX512; GGML_NATIVE, GGML_AVX2, GGML_AVX512 as aliases) and Vulkan (LLAMAPY_VULKAN; GGML_VULKAN as alias)")

# Backends that exist in ggml / llama-cpp-python but not (yet) in llamapy.
# Asking for one is an error, never a silent CPU-only build.
set(_lp_missing_backends
  GGML_CUDA GGML_CUBLAS LLAMA_CUBLAS LLAMA_CUDA LLAMAPY_CUDA GGML_HIP GGML_HIPBLAS LLAMA_HIPBLAS
  GGML_METAL LLAMA_METAL GGML_SYCL GGML_OPENCL GGML_KOMPUTE GGML_MUSA
  GGML_CANN GGML_RPC GGML_BLAS LLAMA_BLAS GGML_OPENBLAS LLAMA_OPENBLAS GGML_CLBLAST LLAMA_CLBLAST
  GGML_WEBGPU GGML_ZDNN GGML_HEXAGON)
foreach(_opt IN LISTS _lp_missing_backends)
  if(DEFINED ${_opt} AND ${_opt})
    message(FATAL_ERROR
      "llamapy: ${_opt}=${${_opt}} asks for a backend llamapy does not have.\n"
      "Backends in this version: ${_lp_have_backends}.\n"
      "Remove ${_opt} from CMAKE_ARGS to build the CPU backend.")
  endif()
endforeach()

# Resolve one option from our name and its GGML_* alias. Sets
# LP_<name> (ON/OFF) and LP_<name>_EXPLICIT (whether the user gave it).
function(_lp_option name alias default)
  set(_ours "LLAMAPY_${name}")
  set(_set_ours OFF)
  set(_set_alias OFF)
  if(DEFINED ${_ours})
    set(_set_ours ON)
  endif()
  if(DEFINED ${alias})
    set(_set_alias ON)
  endif()
  if(_set_ours AND _set_alias)
    if((${_ours} AND NOT ${alias}) OR (NOT ${_ours} AND ${alias}))
      message(FATAL_ERROR "llamapy: contradictory options ${_ours}=${${_ours}} and ${alias}=${${alias}}.")
    endif()
  endif()
  if(_set_ours)
    set(_value ${${_ours}})
  elseif(_set_alias)
    set(_value ${${alias}})
  else()
    set(_value ${default})
  endif()
  if(_value)
    set(LP_${name} ON PARENT_SCOPE)
  else()
    set(LP_${name} OFF PARENT_SCOPE)
  endif()
  if(_set_ours OR _set_alias)
    set(LP_${name}_EXPLICIT ON PARENT_SCOPE)
  else()
    set(LP_${name}_EXPLICIT OFF PARENT_SCOPE)
  endif()
endfunction()

set(_lp_is_x86 OFF)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|i[3-6]86)$")
  set(_lp_is_x86 ON)
endif()
# aarch64: NEON is in the base architecture; the NEON kernels (neon level)
# and their dot-product twins (neon_dot, through target attributes) are
# compiled together, and the run-time check picks one (cpu/features.cpp).
set(_lp_is_arm64 OFF)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  set(_lp_is_arm64 ON)
endif()

# PORTABLE: every kernel level compiled through target attributes alone (no
# -march=native), the best one picked at run time: the build for wheels that
# are made on one machine and run on others. GGML_CPU_ALL_VARIANTS (ggml's
# spelling of the same idea) is its alias.
_lp_option(PORTABLE GGML_CPU_ALL_VARIANTS OFF)
_lp_option(AVX2 GGML_AVX2 OFF)
_lp_option(AVX512 GGML_AVX512 OFF)
if(LP_PORTABLE)
  if((LP_AVX2_EXPLICIT AND NOT LP_AVX2) OR (LP_AVX512_EXPLICIT AND NOT LP_AVX512))
    message(FATAL_ERROR
      "llamapy: contradictory options: PORTABLE=ON compiles every kernel level, but AVX2=OFF or AVX512=OFF was "
      "given. Use -DLLAMAPY_NATIVE=OFF -DLLAMAPY_AVX2=ON for a build with the AVX2 level only.")
  endif()
  if(_lp_is_x86)
    set(LP_AVX2 ON)
    set(LP_AVX512 ON)
  endif()
  set(LP_AVX2_EXPLICIT ON)
  set(LP_AVX512_EXPLICIT ON)
endif()
# NATIVE defaults to ON unless a portable build or ISA level was asked for.
if(LP_AVX2_EXPLICIT OR LP_AVX512_EXPLICIT)
  _lp_option(NATIVE GGML_NATIVE OFF)
else()
  _lp_option(NATIVE GGML_NATIVE ON)
endif()

# -march=native describes the building CPU, which a cross build does not run
# on: an explicit NATIVE=ON is an error there, the default becomes PORTABLE.
if(CMAKE_CROSSCOMPILING AND LP_NATIVE)
  if(LP_NATIVE_EXPLICIT)
    message(FATAL_ERROR
      "llamapy: NATIVE=ON tunes for the building CPU, but this is a cross build for ${CMAKE_SYSTEM_PROCESSOR}. "
      "Use -DLLAMAPY_PORTABLE=ON.")
  endif()
  set(LP_NATIVE OFF)
  set(LP_PORTABLE ON)
  if(_lp_is_x86)
    set(LP_AVX2 ON)
    set(LP_AVX512 ON)
  endif()
endif()

if(LP_NATIVE AND LP_NATIVE_EXPLICIT AND LP_PORTABLE)
  message(FATAL_ERROR
    "llamapy: contradictory options: NATIVE=ON tunes for the building CPU, while PORTABLE=ON asks for a build "
    "that runs anywhere. Use one of them.")
endif()
if(LP_NATIVE AND LP_NATIVE_EXPLICIT AND ((LP_AVX2 AND LP_AVX2_EXPLICIT) OR (LP_AVX512 AND LP_AVX512_EXPLICIT)))
  message(FATAL_ERROR
    "llamapy: contradictory options: NATIVE=ON tunes for the building CPU, while AVX2/AVX512=ON ask for a "
    "portable build. Use -DLLAMAPY_NATIVE=ON alone, or -DLLAMAPY_NATIVE=OFF with -DLLAMAPY_AVX2=ON / -DLLAMAPY_AVX512=ON.")
endif()
if(LP_AVX512 AND LP_AVX2_EXPLICIT AND NOT LP_AVX2)
  message(FATAL_ERROR "llamapy: contradictory options: AVX512=ON needs the AVX2 kernels, but AVX2=OFF was given.")
endif()

if(NOT _lp_is_x86 AND (LP_AVX2 OR LP_AVX512))
  message(FATAL_ERROR "llamapy: AVX2/AVX512 options were given but the target processor is ${CMAKE_SYSTEM_PROCESSOR}.")
endif()

set(LLAMAPY_DEFINES "")
set(LLAMAPY_CXX_FLAGS -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -fno-math-errno)
if(CMAKE_BUILD_TYPE STREQUAL "Release" OR CMAKE_BUILD_TYPE STREQUAL "RelWithDebInfo")
  list(APPEND LLAMAPY_CXX_FLAGS -O3)
endif()

if(_lp_is_arm64 AND (LP_NATIVE OR LP_PORTABLE))
  set(LP_NEON ON)
endif()
if(LP_NATIVE)
  list(APPEND LLAMAPY_CXX_FLAGS -march=native)
  if(_lp_is_x86)
    # All x86 kernel levels are compiled (through target attributes); the
    # run-time dispatch only picks those the CPU supports.
    set(LP_AVX2 ON)
    set(LP_AVX512 ON)
  endif()
  set(_lp_mode "native")
elseif(LP_PORTABLE)
  if(_lp_is_arm64)
    # the baseline, whatever the compiler's default: dotprod only by attribute
    list(APPEND LLAMAPY_CXX_FLAGS -march=armv8-a)
  endif()
  set(_lp_mode "portable (all kernel levels)")
elseif(LP_AVX512)
  set(LP_AVX2 ON)
  set(_lp_mode "portable (AVX2 + AVX-512 kernels)")
elseif(LP_AVX2)
  set(_lp_mode "portable (AVX2 kernels)")
else()
  set(_lp_mode "portable (scalar kernels only)")
endif()
if(LP_AVX2)
  list(APPEND LLAMAPY_DEFINES LP_ENABLE_AVX2=1)
endif()
if(LP_AVX512)
  list(APPEND LLAMAPY_DEFINES LP_ENABLE_AVX512=1)
endif()
if(LP_NEON)
  list(APPEND LLAMAPY_DEFINES LP_ENABLE_NEON=1)
endif()
if(LP_NATIVE)
  list(APPEND LLAMAPY_DEFINES LP_BUILD_NATIVE=1)
endif()
# Vulkan (GPU) backend beside the CPU one: LLAMAPY_VULKAN, GGML_VULKAN (and
# the older LLAMA_VULKAN) as aliases. cmake/vulkan.cmake finds what it needs
# or stops the build.
if(DEFINED LLAMA_VULKAN AND NOT DEFINED GGML_VULKAN)
  set(GGML_VULKAN ${LLAMA_VULKAN})
endif()
_lp_option(VULKAN GGML_VULKAN OFF)
if(LP_VULKAN)
  list(APPEND LLAMAPY_DEFINES LP_ENABLE_VULKAN=1)
endif()
message(STATUS "llamapy: CPU backend, ${_lp_mode}; defines: ${LLAMAPY_DEFINES}")
if(LP_VULKAN)
  include(${CMAKE_CURRENT_LIST_DIR}/vulkan.cmake)
endif()
