#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60) from its seed corpus in
# fuzz/corpus/<target>; a crash stops the run, shows libFuzzer's report and
# keeps the input under fuzz/artifacts/<target>/ (turn it into a regression
# test in the crate that failed). Needs the nightly toolchain and cargo-fuzz
# (`cargo install cargo-fuzz`). CI runs `fuzz/run.sh 20`; a longer hunt:
# `fuzz/run.sh 3600`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
seconds=${1:-60}
cargo +nightly fuzz build -O
log=$(mktemp)
for t in $(cargo +nightly fuzz list); do
    # A scratch corpus: what the fuzzer finds is not committed by accident.
    work=$(mktemp -d)
    if ! cargo +nightly fuzz run -O "$t" "$work" "corpus/$t" -- \
        -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz: $t failed; the input is in fuzz/artifacts/$t/" >&2
        exit 1
    fi
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')
    echo "fuzz: $t ran ${seconds}s, $runs inputs, no crash"
    rm -rf "$work"
done
rm -f "$log"
