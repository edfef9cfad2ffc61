#!/usr/bin/env bash
# Side by side on this machine: seatfence, PostgreSQL and a 3-member etcd
# under the same flash-sale hold workload (`seatfence bench compare`).
#
#   bench/compare.sh                       # 20,000 seats, 100,000 buyers, 256 in flight
#   bench/compare.sh --inflight 64 --grpc  # any `bench compare` flag passes through
#   bench/compare.sh --rate 5000           # open loop: 5,000 buyers/s offered
#
# Installs what is missing (Debian packages postgresql, etcd-server, etcd-client,
# protobuf-compiler), starts PostgreSQL and etcd on 127.0.0.1 with their own
# data dirs under a temporary directory, durability on for both (PostgreSQL
# fsync = on, synchronous_commit = on; etcd fsyncs its WAL, as always),
# builds seatfence with the etcd client, runs all three, prints the table,
# and stops what it started. COMPARE_KEEP=1 keeps the data dirs and logs;
# SEATFENCE_BIN=path compares an already built binary instead of this tree.
set -euo pipefail
cd "$(dirname "$0")/.."

PG_PORT=${PG_PORT:-55432}
ETCD_BASE=${ETCD_BASE:-23790}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
command -v protoc >/dev/null || need+=(protobuf-compiler)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
    echo "compare: installing ${need[*]}" >&2
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >/dev/null
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)

WORK=$(mktemp -d /tmp/seatfence-compare.XXXXXX)
chmod 755 "$WORK"
ETCD_PIDS=()
# PostgreSQL refuses to run as root: run it as `postgres` when we are root.
if [ "$(id -u)" = 0 ]; then PGUSER_RUN=(runuser -u postgres --); else PGUSER_RUN=(); fi

cleanup() {
    set +e
    [ -f "$WORK/pg/postmaster.pid" ] && "${PGUSER_RUN[@]}" "$PGBIN/pg_ctl" -D "$WORK/pg" -m fast stop >/dev/null
    for p in "${ETCD_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    if [ -n "${COMPARE_KEEP:-}" ]; then
        echo "compare: data and logs kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "compare: starting PostgreSQL on 127.0.0.1:$PG_PORT" >&2
mkdir -p "$WORK/pg"
[ "$(id -u)" = 0 ] && chown postgres "$WORK/pg"
"${PGUSER_RUN[@]}" "$PGBIN/initdb" -D "$WORK/pg" -U postgres --auth=trust >"$WORK/initdb.log"
"${PGUSER_RUN[@]}" "$PGBIN/pg_ctl" -D "$WORK/pg" -w -l "$WORK/pg/server.log" \
    -o "-c port=$PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=$WORK/pg -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c max_connections=600 -c shared_buffers=256MB" \
    start >/dev/null

echo "compare: starting etcd (3 members) on 127.0.0.1:$((ETCD_BASE + 1))-$((ETCD_BASE + 3))" >&2
cluster=""
for i in 1 2 3; do cluster+="${cluster:+,}m$i=http://127.0.0.1:$((ETCD_BASE + 10 + i))"; done
endpoints=""
for i in 1 2 3; do
    client="http://127.0.0.1:$((ETCD_BASE + i))"
    peer="http://127.0.0.1:$((ETCD_BASE + 10 + i))"
    endpoints+="${endpoints:+,}$client"
    etcd --name "m$i" --data-dir "$WORK/etcd/m$i" \
        --listen-client-urls "$client" --advertise-client-urls "$client" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --initial-cluster "$cluster" --initial-cluster-state new \
        --initial-cluster-token seatfence-compare \
        >"$WORK/etcd-m$i.log" 2>&1 &
    ETCD_PIDS+=($!)
done
healthy=""
for _ in $(seq 1 50); do
    for i in 0 1 2; do
        if ! kill -0 "${ETCD_PIDS[$i]}" 2>/dev/null; then
            echo "compare: etcd member m$((i + 1)) exited (port in use?):" >&2
            tail -5 "$WORK/etcd-m$((i + 1)).log" >&2
            exit 2
        fi
    done
    if ETCDCTL_API=3 etcdctl --endpoints "$endpoints" --command-timeout=1s endpoint health >/dev/null 2>&1; then
        healthy=yes
        break
    fi
    sleep 0.2
done
if [ -z "$healthy" ]; then
    echo "compare: etcd did not become healthy; logs in $WORK" >&2
    COMPARE_KEEP=1
    exit 2
fi

# SEATFENCE_BIN=path runs that binary (built with --features etcd) instead
# of building this tree: two builds side by side in one session.
if [ -z "${SEATFENCE_BIN:-}" ]; then
    cargo build --release --features etcd -q
fi
"${SEATFENCE_BIN:-${CARGO_TARGET_DIR:-target}/release/seatfence}" bench compare \
    --pg "host=127.0.0.1 port=$PG_PORT user=postgres dbname=postgres" \
    --etcd "$endpoints" "$@"
