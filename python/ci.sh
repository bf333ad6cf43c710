#!/bin/sh
# Builds the Python package's wheel with maturin (from PyPI, in a build
# virtualenv), installs that wheel in a fresh virtualenv, and runs the tests
# there on an embedded pool started with the workspace's `carmi`
# (`carmi pool up`): the tests run against the wheel a user would install.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/build"
"$work/build/bin/pip" install -q --upgrade pip 'maturin>=1.5,<2'
# The package's Rust build reuses one target directory between runs, and is
# a debug build (`pip install ./python` builds for release).
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/python}" "$work/build/bin/maturin" build -q \
    --profile dev --compatibility linux --interpreter "$work/build/bin/python" \
    --manifest-path "$here/Cargo.toml" --out "$work/wheels"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip
"$work/venv/bin/pip" install -q "$work"/wheels/wodi-*.whl pytest
(cd "$root" && cargo build -q -p carmi-cli)
# Run from outside the checkout, so that `import wodi` finds the installed
# wheel and not the sources in python/wodi.
cd "$work"
CARMI_BIN="$root/target/debug/carmi" "$work/venv/bin/python" -m pytest -q "$here/tests"
