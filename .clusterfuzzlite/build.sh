#!/bin/bash -eu
# Builds the cargo-fuzz targets with the service's sanitizer and ships each with its seed
# corpus (fuzz/corpus/<target>, built from corpora/).
cd "$SRC/meanfuzz/fuzz"
cargo fuzz build -O --debug-assertions
for target in differential load_bytes roundtrip; do
  cp "target/x86_64-unknown-linux-gnu/release/$target" "$OUT/"
  if [ -d "corpus/$target" ]; then
    (cd "corpus/$target" && zip -q -r "$OUT/${target}_seed_corpus.zip" .)
  fi
done
