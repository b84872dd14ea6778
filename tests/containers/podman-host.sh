#!/usr/bin/env bash
# Prepares this machine to run the bundle's image and compose stack without a Docker engine:
# rootful podman + runc from Debian, and local stand-ins for the Dockerfile's two base images
# under their own names. Idempotent; the image store is kept in $CONTAINERS_STATE between runs.
#
#   bash tests/containers/podman-host.sh     → prints the environment to use podman with
#
# Machine facts this handles (Debian 12 VMs without systemd, cgroup v1/v2 hybrid):
# - crun refuses hybrid cgroups → runc; netavark needs iptables, which a minimal Debian lacks;
# - podman's default nofile limit is above the VM's hard limit → the hard limit;
# - no Docker Hub or ghcr.io → python:3.11.11-slim-bookworm is debootstrap'd bookworm with
#   Debian's python3, ghcr.io/astral-sh/uv:<v> holds uv from its PyPI wheel, and the
#   Prometheus image holds Debian's prometheus (Grafana has no such source: the tier leaves
#   it out with its own compose override);
# - HTTPS may go through a proxy whose CA the host trusts → the base image trusts it too.
set -euo pipefail

STATE=${CONTAINERS_STATE:-/var/tmp/leave-copilot-containers}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DOCKERFILE=$REPO/docker/Dockerfile
PY_IMAGE=$(sed -n 's/^ARG PYTHON_IMAGE=//p' "$DOCKERFILE")
UV_IMAGE=$(sed -n 's/^COPY --from=\(ghcr.io\/astral-sh\/uv:[^ ]*\) .*/\1/p' "$DOCKERFILE")
UV_VERSION=${UV_IMAGE##*:}
fail() { echo "podman-host: $*" >&2; exit 1; }
[[ -n $PY_IMAGE && -n $UV_IMAGE ]] || fail "cannot read the base images from $DOCKERFILE"
[[ $(id -u) == 0 ]] || fail "needs root (rootful podman)"

need=()
for package in podman runc debootstrap catatonit netavark aardvark-dns iptables; do
  dpkg -s "$package" >/dev/null 2>&1 || need+=("$package")
done
if ((${#need[@]})); then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"; } \
    >&2 || fail "apt-get could not install ${need[*]}"
fi

mkdir -p "$STATE"/{conf,storage,run,tmp,networks}
nofile=$(ulimit -Hn); [[ $nofile == unlimited ]] && nofile=1048576
cgroup_manager=cgroupfs; [[ -d /run/systemd/system ]] && cgroup_manager=systemd
cat > "$STATE/conf/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=4096:4096"]

[network]
network_backend = "netavark"
network_config_dir = "$STATE/networks"
default_subnet_pools = [{"base" = "10.205.0.0/16", "size" = 24}]

[engine]
runtime = "runc"
cgroup_manager = "$cgroup_manager"
events_logger = "file"
events_logfile_path = "$STATE/run/events.log"
tmp_dir = "$STATE/run/libpod"
static_dir = "$STATE/storage/libpod"
volume_path = "$STATE/storage/volumes"
image_copy_tmp_dir = "$STATE/tmp"
CONF
cat > "$STATE/conf/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$STATE/storage"
runroot = "$STATE/run/storage"
CONF
export CONTAINERS_CONF=$STATE/conf/containers.conf
export CONTAINERS_STORAGE_CONF=$STATE/conf/storage.conf
export TMPDIR=$STATE/tmp

if ! podman image exists "docker.io/library/$PY_IMAGE"; then
  mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/{print $2; exit}')
  mirror=${mirror:-$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null)}
  rootfs=$STATE/rootfs
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include=python3,python-is-python3,ca-certificates \
    bookworm "$rootfs" "$mirror" > "$STATE/debootstrap.log" 2>&1 \
    || fail "debootstrap of the stand-in for $PY_IMAGE failed (see $STATE/debootstrap.log)"
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
    env -u TMPDIR chroot "$rootfs" update-ca-certificates >/dev/null
  fi
  env -u TMPDIR chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman import \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
    - "docker.io/library/$PY_IMAGE" >/dev/null || fail "podman import of $PY_IMAGE failed"
  rm -rf "$rootfs"
fi

if ! podman image exists "$UV_IMAGE"; then
  wheel=$STATE/uv-wheel
  rm -rf "$wheel" && mkdir -p "$wheel/root"
  python3 -m pip download -q --no-deps --only-binary=:all: --platform musllinux_1_1_x86_64 \
    --python-version 3.11 -d "$wheel" "uv==$UV_VERSION" >&2 || fail "no uv $UV_VERSION wheel"
  python3 - "$wheel" <<'PY'
import glob, os, sys, zipfile
folder = sys.argv[1]
with zipfile.ZipFile(glob.glob(f"{folder}/uv-*.whl")[0]) as wheel:
    for name in wheel.namelist():
        if ".data/scripts/" in name:
            target = f"{folder}/root/{os.path.basename(name)}"
            with open(target, "wb") as out:
                out.write(wheel.read(name))
            os.chmod(target, 0o755)
PY
  tar -C "$wheel/root" -c uv uvx | podman import - "$UV_IMAGE" >/dev/null \
    || fail "podman import of $UV_IMAGE failed"
  rm -rf "$wheel"
fi

# Prometheus: compose's image name, holding Debian's prometheus (the flags compose passes are
# the same) and busybox's wget for the healthcheck.
PROM_IMAGE=$(sed -n 's/^PROMETHEUS_IMAGE=//p' "$REPO/deploy/.env.example")
if ! podman image exists "docker.io/$PROM_IMAGE"; then
  build=$STATE/prometheus-build
  mkdir -p "$build"
  cat > "$build/Containerfile" <<CONTAINERFILE
FROM docker.io/library/$PY_IMAGE
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus busybox \
    && ln -s /bin/busybox /usr/local/bin/wget && rm -rf /var/lib/apt/lists/*
ENTRYPOINT ["/usr/bin/prometheus"]
CONTAINERFILE
  podman build -q --format docker -t "docker.io/$PROM_IMAGE" "$build" >/dev/null \
    || fail "the stand-in for $PROM_IMAGE did not build"
fi

# Alertmanager: compose's image name, holding Debian's (the flags compose passes are the same).
AM_IMAGE=$(sed -n 's/^ALERTMANAGER_IMAGE=//p' "$REPO/deploy/.env.example")
if ! podman image exists "docker.io/$AM_IMAGE"; then
  build=$STATE/alertmanager-build
  mkdir -p "$build"
  cat > "$build/Containerfile" <<CONTAINERFILE
FROM docker.io/library/$PY_IMAGE
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus-alertmanager busybox \
    && ln -s /bin/busybox /usr/local/bin/wget && rm -rf /var/lib/apt/lists/*
ENTRYPOINT ["/usr/bin/prometheus-alertmanager"]
CONTAINERFILE
  podman build -q --format docker -t "docker.io/$AM_IMAGE" "$build" >/dev/null \
    || fail "the stand-in for $AM_IMAGE did not build"
fi

echo "CONTAINERS_CONF=$CONTAINERS_CONF"
echo "CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF"
echo "TMPDIR=$TMPDIR"
