#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each: `make fuzz-smoke` (20 s) and `make fuzz` (600 s).
#   rust/fuzz/run.sh SECONDS [TARGET...]
# libFuzzer mode needs the nightly toolchain; cargo-fuzz is installed when missing (into
# $CARGO_FUZZ_ROOT, default ~/.cargo). Without nightly, the stable replay harness runs the same
# checks (src/lib.rs) over the seed corpus plus FUZZ_REPLAY_INPUTS seeded random inputs.
# New corpus entries go to target/fuzz-corpus/<target> (the committed corpus/ is read only);
# crashes land in artifacts/<target>/.
set -uo pipefail
cd "$(dirname "$0")"
secs=${1:?usage: run.sh SECONDS [TARGET...]}
shift
cargo=${CARGO:-cargo}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(decode_trace compile_suite canonical_text grade json_trace expression matching)

if ! "$cargo" +nightly --version >/dev/null 2>&1; then
  echo "##############################################################################"
  echo "### FUZZ: nightly toolchain absent -> STABLE REPLAY MODE (no libFuzzer)      ###"
  echo "##############################################################################"
  exec "$cargo" run -q --release --no-default-features --bin replay -- \
    --inputs "${FUZZ_REPLAY_INPUTS:-200000}" "${targets[@]}"
fi

root=${CARGO_FUZZ_ROOT:-$HOME/.cargo}
export PATH="$root/bin:$PATH"
if ! "$cargo" fuzz --version >/dev/null 2>&1; then
  echo "=== installing cargo-fuzz into $root ==="
  "$cargo" install cargo-fuzz --locked --root "$root" || exit 1
fi
echo "##############################################################################"
echo "### FUZZ: LIBFUZZER MODE (cargo +nightly fuzz), ${secs}s per target          "
echo "##############################################################################"
"$cargo" +nightly fuzz build -O || exit 1
failed=()
for t in "${targets[@]}"; do
  work=target/fuzz-corpus/$t
  mkdir -p "$work" "artifacts/$t"
  log=target/fuzz-$t.log
  "$cargo" +nightly fuzz run -O "$t" "$work" "corpus/$t" -- \
    -max_total_time="$secs" -timeout=30 -print_final_stats=1 >"$log" 2>&1
  rc=$?
  runs=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    failed+=("$t")
    echo "!!! $t: CRASH (exit $rc); log $PWD/$log"
    grep -E 'panicked at|^Test unit written to|SUMMARY' "$log" | head -5
  else
    echo "fuzz $t: ok (${runs:-runs unknown})"
  fi
done
# The sanitizer-instrumented build is ~7 GB; a clean-clone CI run never reuses it, and the
# later steps need the disk. FUZZ_KEEP_BUILD=1 keeps it; locally it is kept unless CI is set.
if [ -n "${CI:-}" ] && [ -z "${FUZZ_KEEP_BUILD:-}" ]; then
  rm -rf target/x86_64-unknown-linux-gnu target/release target/debug
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "!!! FUZZ FAILED: ${failed[*]} (inputs under $PWD/artifacts/)"
  exit 1
fi
echo "=== FUZZ: all ${#targets[@]} targets clean ==="
