#!/usr/bin/env bash
# Fetches real XNNPACK for the harness's third engine: the executorch==1.5.1 wheel from PyPI
# (pip download, so pip's cache and its configured index apply), unpacked to its shared
# objects only: target/xnnpack/executorch-1.5.1/executorch/lib/*.so. Idempotent: with the
# libraries already there it downloads nothing. Prints the library folder on its last line.
#
#   scripts/fetch-xnnpack.sh            # or: just xnnpack
#   XNNPACK_LIB_DIR=$(scripts/fetch-xnnpack.sh | tail -1) cargo test --workspace
#
# Needs python3 with pip (any version: the wheel is chosen by tag, not by the interpreter).
set -euo pipefail

version=1.5.1
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/target/xnnpack/executorch-$version"
lib="$dest/executorch/lib"
needed=(libexecutorch_backend_xnnpack.so libexecutorch_threadpool.so libexecutorch.so)

have_all() {
    for f in "${needed[@]}"; do
        [ -s "$lib/$f" ] || return 1
    done
}

if have_all; then
    echo "xnnpack: libraries already in place" >&2
    echo "$lib"
    exit 0
fi

python="${PYTHON:-python3}"
command -v "$python" >/dev/null || { echo "xnnpack: $python not found (needs python3 with pip)" >&2; exit 1; }
mkdir -p "$dest"
# The wheel for CPython 3.11 on manylinux_2_28 x86_64 whatever the local interpreter is: the
# libraries are plain C/C++ shared objects and need no Python at run time.
"$python" -m pip download --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 --platform manylinux_2_28_x86_64 \
    "executorch==$version" -d "$dest" >&2
wheel=$(ls "$dest"/executorch-"$version"-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "xnnpack: pip did not leave a wheel in $dest" >&2; exit 1; }

# Only executorch/lib/*.so, through Python's zipfile (no unzip binary needed); written to a
# temporary folder first so an interrupted run never leaves a half-written library behind.
tmp="$dest/.unpack.$$"
rm -rf "$tmp"
"$python" - "$wheel" "$tmp" <<'EOF'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("executorch/lib/") and n.endswith(".so")
             and "/" not in n[len("executorch/lib/"):]]
    if not names:
        sys.exit(f"xnnpack: no executorch/lib/*.so in {wheel}")
    for n in names:
        z.extract(n, out)
EOF
mkdir -p "$lib"
for f in "$tmp"/executorch/lib/*.so; do
    mv -f "$f" "$lib/"
done
rm -rf "$tmp"
have_all || { echo "xnnpack: the wheel lacks one of ${needed[*]}" >&2; exit 1; }
echo "xnnpack: unpacked $(ls "$lib" | wc -l) libraries from $(basename "$wheel")" >&2
echo "$lib"
