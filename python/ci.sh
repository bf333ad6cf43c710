#!/bin/sh
# Builds the Python package in a fresh virtualenv (maturin from PyPI, as
# `pip install ./python` does for a user) and runs its tests on an embedded
# pool started with the workspace's `carmi` (`carmi pool up`).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip
# The package's Rust build reuses one target directory between runs, and is
# a debug build (a user's `pip install ./python` builds for release).
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/python}" "$work/venv/bin/pip" install -q \
    --config-settings=build-args="--profile dev" "$here" pytest
(cd "$root" && cargo build -q -p carmi-cli)
CARMI_BIN="$root/target/debug/carmi" "$work/venv/bin/python" -m pytest -q "$here/tests"
