#!/bin/sh
# Installs the Python package as its README says (`pip install ./python`, a
# release build of the native module with the whole `carmi` linked in) in a
# fresh virtualenv, runs the tests there, then the README's example with no
# `carmi` installed anywhere and no pool configured, from outside the
# checkout: the package must bring its pool with it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip
# The package's Rust build reuses one target directory between runs.
# ipywidgets, ipykernel and jupyter_client: the notebook test runs an
# executor in a real Jupyter kernel and reads its progress bar.
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/python}" \
    "$work/venv/bin/pip" install -q "$here" pytest ipywidgets ipykernel jupyter_client
# Run from outside the checkout, so that `import wodi` finds the installed
# package and not the sources in python/wodi. The tests start their pools
# with the `carmi` the package carries ($CARMI_BIN, if set, instead).
cd "$work"
"$work/venv/bin/python" -m pytest -q "$here/tests"

# The README's lines, as a new user runs them: CARMI_BIN unset, no `carmi`
# on the PATH, a home of its own (no pool recorded, no config file).
mkdir "$work/user"
cp "$here/examples/squares.py" "$work/user/"
cat >>"$work/user/squares.py" <<'PY'
assert squares == [i * i for i in range(1000)], "results out of order or wrong"
print("1000 results in order")
PY
path=/usr/local/bin:/usr/bin:/bin
if PATH=$path command -v carmi >/dev/null; then
    echo "python/ci.sh: a carmi is installed in $path; the no-carmi check needs a machine without one" >&2
    exit 1
fi
cd "$work/user"
out=$(env -i PATH="$path" HOME="$work/user" LANG=C.UTF-8 "$work/venv/bin/python" squares.py)
echo "$out"
case $out in
    *"1000 results in order"*) ;;
    *) echo "python/ci.sh: the README's example did not return its 1000 results in order" >&2; exit 1 ;;
esac
