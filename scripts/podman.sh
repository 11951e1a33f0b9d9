# Sourced by the scripts that run containers (`. scripts/podman.sh`): makes
# podman usable on this project's machines and checks that it is.
#
# - Installs Debian's podman, runc, catatonit, netavark and aardvark-dns when
#   one is missing (`${SUDO:-} apt-get`, as scripts/test.sh does for
#   redis-server). Bridge networks would also need iptables; the project's
#   containers use host networking on loopback ports and do not.
# - Exports CONTAINERS_CONF=<repo>/scripts/containers.conf: runc, cgroupfs,
#   explicit ulimits, netavark. /etc is never written.
# - Checks that podman answers, with that runtime, within 30 s.
#
# Idempotent and quiet when all is there. Returns (or exits, when run as a
# script) non-zero with one `podman.sh: ...` line on stderr when podman
# cannot be used. Run it as `bash scripts/podman.sh` to check a machine.

_toolmesh_podman_setup() {
    local here conf missing=() runtime
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || return 1
    conf="$here/containers.conf"
    if [[ ! -f $conf ]]; then
        echo "podman.sh: $conf is missing" >&2
        return 1
    fi

    command -v podman >/dev/null || missing+=(podman)
    command -v runc >/dev/null || missing+=(runc)
    [[ -x /usr/bin/catatonit || -x /usr/libexec/podman/catatonit ]] || missing+=(catatonit)
    [[ -x /usr/lib/podman/netavark ]] || missing+=(netavark)
    [[ -x /usr/lib/podman/aardvark-dns ]] || missing+=(aardvark-dns)
    if ((${#missing[@]})); then
        echo "podman.sh: installing ${missing[*]} (Debian packages)" >&2
        # Subshell: DEBIAN_FRONTEND stays out of the caller's environment.
        (
            export DEBIAN_FRONTEND=noninteractive
            ${SUDO:-} apt-get update -qq &&
                ${SUDO:-} apt-get install -y -qq --no-install-recommends \
                    podman runc catatonit netavark aardvark-dns >/dev/null
        ) || {
            echo "podman.sh: cannot install ${missing[*]}" >&2
            return 1
        }
    fi

    export CONTAINERS_CONF="$conf"
    # `podman info` reads the config, the storage and the runtime: if it
    # answers with runc, containers start.
    if ! runtime=$(timeout 30 podman info --format '{{.Host.OCIRuntime.Name}}' 2>&1); then
        echo "podman.sh: podman does not work here: $runtime" >&2
        return 1
    fi
    if [[ $runtime != runc ]]; then
        echo "podman.sh: podman runs $runtime, not runc: is CONTAINERS_CONF ($conf) read?" >&2
        return 1
    fi
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    # Run as a script: check, and say so.
    _toolmesh_podman_setup || exit 1
    echo "podman $(podman --version | awk '{print $3}') works (CONTAINERS_CONF=$CONTAINERS_CONF)"
else
    _toolmesh_podman_setup
fi
