#!/usr/bin/env bash
# What `#[rankwise::program]` costs a user's build: a crate holding a ring all-reduce checked for
# `world in 2..=64` (and one for `world = 4`, for comparison) is built with its dependencies
# already compiled, after touching its source — the rebuild a user waits for after editing the
# program. Debug profile, as `cargo build` does by default. Run from the repository root:
#
#     bash benches/compile_time.sh
set -euo pipefail
root=$(pwd)
dir="$root/target/compile-time"
mkdir -p "$dir/src"
cp "$root/Cargo.lock" "$dir/Cargo.lock"
cat > "$dir/Cargo.toml" <<EOF
[package]
name = "compile-time"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
rankwise = { path = "$root" }

[workspace]
EOF
program() {
    cat <<EOF
use rankwise::prelude::*;

#[rankwise::program($1)]
fn ring_all_reduce(ctx: &mut Ctx) -> Result<Vec<f32>> {
    let rank = ctx.rank();
    let world = ctx.world();
    let next = (rank + 1) % world;
    let prev = (rank + world - 1) % world;
    let mut data: Vec<f32> = vec![rank as f32; world * 4];
    let mut outgoing = ctx.zeros::<f32>([4])?;
    let mut incoming = ctx.zeros::<f32>([4])?;
    for step in 0..2 * (world - 1) {
        let reducing = step < world - 1;
        let s = step % (world - 1);
        let send_chunk = if reducing { (rank + world - s) % world } else { (rank + 1 + world - s) % world };
        let recv_chunk = (send_chunk + world - 1) % world;
        outgoing.as_mut_slice()?.copy_from_slice(&data[send_chunk * 4..][..4]);
        let mut b = ctx.batch();
        b.send(&outgoing, next);
        b.recv(&mut incoming, prev);
        b.run()?;
        for (d, x) in data[recv_chunk * 4..][..4].iter_mut().zip(incoming.to_vec()) {
            *d = if reducing { *d + x } else { x };
        }
    }
    Ok(data)
}

fn main() -> Result<()> {
    let sums = spawn(4, ring_all_reduce)?;
    assert!(sums.iter().all(|v| v.iter().all(|&x| x == 6.0)));
    Ok(())
}
EOF
}
build() {
    CARGO_TARGET_DIR="$root/target" cargo build -q --offline --manifest-path "$dir/Cargo.toml"
}
echo "| program | worlds | rebuild (median of 3) |"
echo "|---|---|---:|"
for worlds in "world = 4" "world in 2..=64"; do
    program "$worlds" > "$dir/src/main.rs"
    build # dependencies, and the first build of the crate
    times=()
    for _ in 1 2 3; do
        touch "$dir/src/main.rs"
        start=$(date +%s.%N)
        build
        times+=("$(echo "$(date +%s.%N) - $start" | bc)")
    done
    median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 2p)
    printf '| ring all-reduce | %s | %.2f s |\n' "$worlds" "$median"
done
CARGO_TARGET_DIR="$root/target" cargo run -q --offline --manifest-path "$dir/Cargo.toml"
