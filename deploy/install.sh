#!/usr/bin/env bash
# Installs CARMI as a tool.
#
#   deploy/install.sh [--root DIR]
#       Builds `carmi`, `carmi-global`, `carmi-local` and `carmi-relay` (one release build,
#       in the checkout's target/release) and installs them into DIR/bin
#       (default: cargo's, ~/.cargo/bin, or $CARGO_INSTALL_ROOT/bin).
#
#   sudo deploy/install.sh --systemd [--bin-dir DIR] [--destdir DIR]
#       As root, for a pool machine, a relay or the manager: copies the binaries
#       from DIR (default: where `carmi-global` is on the PATH) to
#       /usr/local/bin, makes the system user `carmi` (the global RM's), puts
#       the units of deploy/systemd/ in /etc/systemd/system and a skeleton of
#       /etc/carmi (local.toml, local.env; never overwritten). Keys, the pool
#       secret and tokens are the admin's to make, in /etc/carmi: `sudo carmi
#       pool init` on the manager, `sudo carmi join NAME.join --systemd` on
#       each machine (deploy/systemd/README.md).
#       --destdir installs under DIR instead of / (for packaging and tests;
#       no user is made, no systemctl is run).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bins=(carmi carmi-global carmi-local carmi-relay)

die() {
    echo "install.sh: $*" >&2
    exit 1
}

# The binaries, with cargo, as the user who builds: one release build of
# the three (three `cargo install`s would each resolve the dependencies'
# features alone and build them three times), then copied into place.
install_binaries() {
    local root=$1
    local bin=${root:-${CARGO_INSTALL_ROOT:-${CARGO_HOME:-$HOME/.cargo}}}/bin
    (cd "$repo" && cargo build --release --locked -p carmi-cli -p carmi-global -p carmi-local -p carmi-relay)
    local built=${CARGO_TARGET_DIR:-$repo/target}/release
    install -d -m 0755 "$bin"
    for b in "${bins[@]}"; do
        install -m 0755 "$built/$b" "$bin/$b"
    done
    echo "installed ${bins[*]} into $bin"
    case ":$PATH:" in
        *":$bin:"*) ;;
        *) echo "note: $bin is not on your PATH; add it (export PATH=\"$bin:\$PATH\")" ;;
    esac
}

# A file of the skeleton, unless the admin's is there already.
skeleton() {
    local from=$1 to=$2 mode=$3
    if [[ -e "$to" ]]; then
        echo "kept $to (already there)"
    else
        install -m "$mode" "$from" "$to"
        echo "wrote $to"
    fi
}

# The system part, as root, without cargo.
install_system() {
    local bin_dir=$1 dest=$2
    if [[ -z "$dest" && $(id -u) -ne 0 ]]; then
        die "--systemd installs into /usr/local/bin, /etc and /etc/systemd: run it as root (sudo)"
    fi
    if [[ -z "$bin_dir" ]]; then
        local found
        found=$(command -v carmi-global) ||
            die "no carmi-global on the PATH: name the directory of the binaries with --bin-dir (e.g. ~/.cargo/bin after deploy/install.sh)"
        bin_dir=$(dirname "$found")
    fi
    for b in "${bins[@]}"; do
        [[ -x "$bin_dir/$b" ]] || die "$bin_dir/$b is missing (run deploy/install.sh first, or give --bin-dir)"
    done
    install -d -m 0755 "$dest/usr/local/bin" "$dest/etc/systemd/system"
    for b in "${bins[@]}"; do
        if [[ ! "$bin_dir/$b" -ef "$dest/usr/local/bin/$b" ]]; then
            install -m 0755 "$bin_dir/$b" "$dest/usr/local/bin/$b"
        fi
    done
    echo "installed ${bins[*]} into $dest/usr/local/bin"
    if [[ -z "$dest" ]] && ! id carmi >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin carmi
        echo "made the system user carmi"
    fi
    # /etc/carmi: root's, its group carmi (the global RM reads the pool
    # secret through it); nobody else may list it.
    install -d -m 0750 "$dest/etc/carmi"
    if getent group carmi >/dev/null; then
        chgrp carmi "$dest/etc/carmi"
    fi
    skeleton "$repo/deploy/systemd/local.toml" "$dest/etc/carmi/local.toml" 0644
    skeleton "$repo/deploy/systemd/local.env" "$dest/etc/carmi/local.env" 0644
    skeleton "$repo/deploy/systemd/relay.env" "$dest/etc/carmi/relay.env" 0644
    for unit in carmi-global.service carmi-local.service carmi-relay.service; do
        install -m 0644 "$repo/deploy/systemd/$unit" "$dest/etc/systemd/system/$unit"
    done
    echo "installed carmi-global.service, carmi-local.service and carmi-relay.service into $dest/etc/systemd/system"
    if [[ -z "$dest" && -d /run/systemd/system ]]; then
        systemctl daemon-reload
    fi
    echo "next: on the manager \`sudo carmi pool init\` and \`systemctl enable --now carmi-global\`; on each machine \`sudo carmi join NAME.join --systemd\` (deploy/systemd/README.md)"
}

systemd=0 root='' bin_dir='' dest=''
while [[ $# -gt 0 ]]; do
    case $1 in
        --root) root=${2:?--root needs a directory}; shift 2 ;;
        --systemd) systemd=1; shift ;;
        --bin-dir) bin_dir=${2:?--bin-dir needs a directory}; shift 2 ;;
        --destdir) dest=${2:?--destdir needs a directory}; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
if [[ $systemd == 1 ]]; then
    [[ -z "$root" ]] || die "--root is for the binaries' install with cargo; --systemd takes --bin-dir"
    install_system "$bin_dir" "${dest%/}"
else
    [[ -z "$bin_dir$dest" ]] || die "--bin-dir and --destdir go with --systemd"
    install_binaries "$root"
fi
