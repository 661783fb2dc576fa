#!/usr/bin/env bash
# Installs every Debian 12 package crescent needs to build, test and benchmark.
# Idempotent: installs only what is missing; runs apt-get update at most once.
set -euo pipefail
PKGS=(build-essential cmake pkg-config git iproute2 procps psmisc
      libcurl4-openssl-dev libmicrohttpd-dev libjansson-dev liburing-dev libxxhash-dev
      libcmocka-dev libzmq3-dev libmsgpack-dev
      etcd-server redis-server redis-tools iperf3
      python3-dev python3-pytest python3-numpy python3-zmq python3-msgpack python3-xxhash
      clang libclang-rt-14-dev gnuplot-nox valgrind
      libssl-dev openssl etcd-client fio python3-torch libopenblas0-pthread python3-setuptools python3-wheel
      python3-pip python3-venv)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Debian starts these services on install; crescent's tests and benchmarks start
# their own instances on private ports, so stop the system-wide ones if running.
for svc in etcd redis-server; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    systemctl stop "$svc" 2>/dev/null || true
  fi
done
exit 0
