#!/usr/bin/env bash
# The Vulkan backend: builds the engine with -DLLAMAPY_VULKAN=ON into a side
# folder and runs its tests on Mesa's lavapipe (a CPU Vulkan driver, so no
# GPU is needed): the device listing, every op of the seam it implements
# against the CPU backend (tests/test_vulkan.py, tests/test_backend_ops.py,
# the mixture-of-experts routing and expert products: tests/test_moe_ops.py),
# experts kept in host memory inside GPU layers (tests/test_moe_placement.py),
# llama.cpp's mixture-of-experts recordings with every layer on the device
# (tests/test_moe_llama_cpp.py) and llama.cpp's recordings of the small dense
# families (tests/test_dense_llama_cpp.py), of Gemma 4 (tests/test_gemma4_llama_cpp.py,
# its mixture of experts too) and of the hybrids (Qwen3.5, LFM2, Granite 4.0-H) with every
# layer and with the last two on the device (tests/test_hybrid_llama_cpp.py; their
# recurrent ops: tests/test_delta_net_ops.py, Mamba-2's scan: tests/test_ssm_scan_ops.py;
# their recurrent state, held in device memory, under suffix removal, prefix
# reuse, save / load and speculative rollback: tests/test_recurrent_state.py;
# under the prompt caches and the server's batched slots: tests/test_recurrent_reuse.py),
# attention over every KV cache type against numpy (tests/test_attention_ops.py),
# and the forward pass on it: every architecture, every n_gpu_layers split,
# encoders, the placement plan and its errors, layer splits over two logical
# devices, offload_kqv=False, LoRA, Gemma 3 270M offloaded
# (tests/test_vulkan_models.py); the vision encoder (tests/test_vulkan_vision.py,
# tests/test_vision_feature_layers.py); the grid i-quant files (IQ1/IQ2/IQ3, their own shaders:
# the file's bytes on the device) against llama.cpp (tests/test_iq_lattice_llama_cpp.py), and the
# IQ4_NL / IQ4_XS files likewise (tests/test_iq4_llama_cpp.py).
# Installs Debian's libvulkan-dev, glslc and mesa-vulkan-drivers when they
# are missing and this runs as root; otherwise says what to install.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
need=()
[ -f /usr/include/vulkan/vulkan.h ] || need+=(libvulkan-dev)
command -v glslc >/dev/null 2>&1 || need+=(glslc)
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "vulkan_check: missing ${need[*]}; install them (Debian: apt-get install ${need[*]})" >&2
    exit 2
  fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg=$("$root/tools/variant_build.sh" "$work" -DLLAMAPY_VULKAN=ON 2>"$work/build.log" | tail -1) ||
  { tail -50 "$work/build.log"; exit 1; }
cd "$work"
# lavapipe only: the tests then see the same device on every machine
export VK_ICD_FILENAMES
VK_ICD_FILENAMES=$(ls /usr/share/vulkan/icd.d/lvp_icd*.json | head -1)
PYTHONPATH="$pkg" python -c "import llamapy; i = llamapy.system_info(); print('vulkan build:', i['backends'], [d['name'] for d in i['devices']])"
PYTHONPATH="$pkg" python -m pytest -q -p no:cacheprovider "$root/tests/test_vulkan.py" "$root/tests/test_backend_ops.py" \
  "$root/tests/test_attention_ops.py" "$root/tests/test_moe_ops.py" "$root/tests/test_moe_placement.py" \
  "$root/tests/test_moe_llama_cpp.py" "$root/tests/test_dense_llama_cpp.py" "$root/tests/test_vulkan_models.py" "$root/tests/test_vulkan_vision.py" \
  "$root/tests/test_vision_feature_layers.py" "$root/tests/test_gemma4_llama_cpp.py" "$root/tests/test_hybrid_llama_cpp.py" \
  "$root/tests/test_delta_net_ops.py" "$root/tests/test_ssm_scan_ops.py" "$root/tests/test_recurrent_state.py" \
  "$root/tests/test_recurrent_reuse.py" "$root/tests/test_iq_lattice_llama_cpp.py" "$root/tests/test_iq4_llama_cpp.py"
# The portable shaders (shared-memory reductions), which devices without
# subgroup shuffles run: the op tests again with the subgroup variants off.
LLAMAPY_VULKAN_SUBGROUPS=0 PYTHONPATH="$pkg" python -m pytest -q -p no:cacheprovider "$root/tests/test_backend_ops.py" \
  "$root/tests/test_attention_ops.py" "$root/tests/test_moe_ops.py"
