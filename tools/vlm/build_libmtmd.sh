#!/usr/bin/env bash
# Builds libmtmd.so (llama.cpp's multimodal library) from the llama-cpp-python sdist and
# links it against the libllama/libggml that the installed llama_cpp package already ships.
# Why: the installed llama-cpp-python was built without mtmd, and its chat handlers
# (Llava15ChatHandler, MTMDChatHandler, ...) need it. This is a recording tool only;
# llamapy never links it.
#
# Usage: tools/vlm/build_libmtmd.sh SDIST_DIR OUT_DIR
#   SDIST_DIR: unpacked llama_cpp_python-0.3.36 (has vendor/llama.cpp)
#   OUT_DIR:   where libmtmd.so goes (then export MTMD_CPP_LIB=OUT_DIR)
set -euo pipefail
sdist=$1
out=$2
lc=$sdist/vendor/llama.cpp
pkg=$(python3 -c 'import os, llama_cpp; print(os.path.dirname(llama_cpp.__file__))')
mkdir -p "$out/obj"
flags="-O2 -fPIC -std=c++17 -DLLAMA_SHARED -DLLAMA_BUILD -w -I$lc/tools/mtmd -I$lc/include -I$lc/ggml/include -I$lc/vendor -I$lc/vendor/hash"
srcs=$(cd "$lc/tools/mtmd" && ls mtmd.cpp mtmd-audio.cpp mtmd-image.cpp mtmd-helper.cpp \
  mtmd-helper-gen.cpp clip.cpp models/*.cpp)
hash_srcs="hash/hash.cpp hash/xxhash/xxhash.c hash/sha1/sha1.c hash/sha256/sha256.c"
jobs=()
for s in $srcs; do jobs+=("$lc/tools/mtmd/$s"); done
for s in $hash_srcs; do jobs+=("$lc/vendor/$s"); done
printf '%s\n' "${jobs[@]}" | xargs -P "${NJOBS:-2}" -I{} sh -c '
  src={}; o='"$out"'/obj/$(echo "$src" | md5sum | cut -c1-12).o
  [ -f "$o" ] && exit 0
  # as upstream: sha1.c is built as C++, the other .c files as C
  case "$src" in */sha1.c) cc="g++ -x c++";; *.c) cc="gcc";; *) cc="g++";; esac
  fl='"'$flags'"'; [ "$cc" = gcc ] && fl=$(echo "$fl" | sed "s/-std=c++17//")
  nice -n 5 $cc $fl -c "$src" -o "$o.tmp" && mv "$o.tmp" "$o"'
g++ -shared -o "$out/libmtmd.so" "$out"/obj/*.o -L"$pkg/lib" -lllama -lggml -lggml-base \
  -Wl,-rpath,"$pkg/lib" -lpthread
echo "built $out/libmtmd.so"
