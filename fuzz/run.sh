#!/usr/bin/env bash
# Runs one cargo-fuzz target the way the nightly job does:
#
#   fuzz/run.sh TARGET SECONDS [libFuzzer args...]
#   SANITIZER=address RUSTC_BOOTSTRAP=1 fuzz/run.sh load_bytes 1800   # AddressSanitizer
#
# Corpora: new inputs go to work/corpus/TARGET (gitignored, cached by CI between nights);
# the committed seeds (corpus/TARGET) and the regression inputs (regressions/TARGET) are
# read as further corpus directories and never written. Crash inputs land in
# artifacts/TARGET/; copy them to regressions/TARGET/ and `cargo test` replays them.
#
# differential and roundtrip are built without -trace-compares: their inputs are decoded
# into cases, and tracing every comparison in the lowering, serializer and kernels took
# two thirds of their instructions (reports/fuzz-targets.md). load_bytes keeps it: its
# input is the raw payload, where compare tracing finds magic values and union ids.
set -euo pipefail
cd "$(dirname "$0")"
target=${1:?usage: fuzz/run.sh TARGET SECONDS [libFuzzer args...]}
seconds=${2:?usage: fuzz/run.sh TARGET SECONDS [libFuzzer args...]}
shift 2
sanitizer=${SANITIZER:-none}
flags=(--sanitizer "$sanitizer")
dir="target"
case "$target" in
  differential | roundtrip)
    flags+=(--no-trace-compares)
    dir="target/nocmp"
    ;;
  load_bytes) ;;
  *)
    echo "unknown target $target (differential, load_bytes, roundtrip)" >&2
    exit 2
    ;;
esac
# One target directory per build configuration, so switching targets does not rebuild.
if [ "$sanitizer" != none ]; then dir="$dir-$sanitizer"; fi
mkdir -p "work/corpus/$target" "corpus/$target" "regressions/$target"
exec cargo fuzz run "${flags[@]}" --target-dir "$dir" "$target" \
  "work/corpus/$target" "corpus/$target" "regressions/$target" -- \
  -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 "$@"
