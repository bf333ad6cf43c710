#!/usr/bin/env bash
# The differential test of issue 32: every submit file of tests/submit-corpus/ is read by
# HTCondor's own submit language (its Python bindings, version 24, from PyPI) and by
# `carmi submit -dry-run`, and the two must agree on each (verdict, procs, and per proc the
# arguments, environment, requests, requirements and attributes; docs/submit.md lists the
# differences that are by design). Any disagreement fails CI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

carmi=target/release/carmi
if [[ ! -x $carmi ]]; then
    cargo build --release -p carmi-cli --bin carmi
fi
# The proxy file of the x509userproxy case is made with openssl.
if ! command -v openssl >/dev/null; then
    apt-get update -q && apt-get install -y -q openssl
fi
venv=${CARMI_HTCONDOR_VENV:-$(mktemp -d)/htc24}
if [[ ! -x $venv/bin/python ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q 'htcondor>=24,<25'
fi
python3 tests/submit-oracle/compare.py "$carmi" tests/submit-corpus "$venv/bin/python"
