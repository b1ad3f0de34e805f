#!/usr/bin/env bash
# A local MongoDB-compatible server for trying datakit, without Docker.
#
#   bash scripts/mongo-server.sh start [PORT]   # background server on 127.0.0.1:PORT (default 27017)
#   bash scripts/mongo-server.sh status         # exit 0 when running, 3 when not
#   bash scripts/mongo-server.sh stop
#
# The server is nx-27017 (from PyPI, in the test extra): MongoDB's wire protocol over SQLite, the
# server the test suite starts for itself. `start` waits until it answers a ping and prints one
# line on stdout, `DATAKIT_MONGO_URI=mongodb://127.0.0.1:PORT/datakit`, so that
#   export "$(bash scripts/mongo-server.sh start)"
# points datakit's examples and tests at it; everything else goes to stderr. Its data, log and
# pid file live in ./.mongo-data (or $DATAKIT_MONGO_DATA) and are kept by `stop`: delete that
# folder to drop them. DATAKIT_MONGO_PORT sets the default port. For a real mongod, use
# docker-compose.yml instead.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
data="${DATAKIT_MONGO_DATA:-$here/.mongo-data}"
pid_file="$data/nx-27017.pid"
port_file="$data/port"
venv="${DATAKIT_VENV:-$here/.venv}"

say() { echo "mongo-server: $*" >&2; }

# Whether process PID exists and is not a zombie (an exited server its parent has not reaped yet).
alive() {
    kill -0 "$1" 2>/dev/null || return 1
    [ ! -r "/proc/$1/stat" ] || [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f1)" != Z ]
}

# The pid of our running server, or nothing (a stale pid file, or a pid now used by another program).
running_pid() {
    local pid
    [ -f "$pid_file" ] || return 0
    pid="$(cat "$pid_file" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" || return 0
    if [ -r "/proc/$pid/cmdline" ] && ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q nx.27017; then
        return 0
    fi
    echo "$pid"
}

find_server() {
    if [ -x "$venv/bin/nx-27017" ]; then
        echo "$venv/bin/nx-27017"
    elif command -v nx-27017 >/dev/null 2>&1; then
        command -v nx-27017
    else
        say "nx-27017 is not installed: setting up $venv with the test extra (bash scripts/setup-env.sh test)"
        bash "$here/scripts/setup-env.sh" test >&2
        echo "$venv/bin/nx-27017"
    fi
}

# A Python that has pymongo: the one nx-27017 runs under (it depends on pymongo).
python_for() {
    local real
    real="$(readlink -f "$1")"
    if [ -x "$(dirname "$real")/python" ]; then echo "$(dirname "$real")/python"; else echo python3; fi
}

# Wait until the server at URI answers ping while process PID lives; exit 0 when it does.
wait_for_ping() {
    "$1" - "$2" "$3" "$4" <<'EOF'
import os, sys, time
from pymongo import MongoClient
from pymongo.errors import PyMongoError

uri, pid, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])


def exited(pid):
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(") ")[2].startswith("Z")
    except FileNotFoundError:
        return False  # no /proc here: kill() said it lives
    except OSError:
        return True


while time.monotonic() < deadline:
    if pid and exited(pid):
        sys.exit(1)
    client = MongoClient(uri, serverSelectionTimeoutMS=250, connectTimeoutMS=250)
    try:
        client.admin.command("ping")
        sys.exit(0)
    except PyMongoError:
        pass
    finally:
        client.close()
sys.exit(1)
EOF
}

start() {
    local port="${1:-${DATAKIT_MONGO_PORT:-27017}}" pid server python uri
    [[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] \
        || { say "PORT must be a number from 1 to 65535, not '$port'"; exit 2; }
    uri="mongodb://127.0.0.1:$port"
    pid="$(running_pid)"
    if [ -n "$pid" ]; then
        if [ "$(cat "$port_file" 2>/dev/null)" != "$port" ]; then
            say "already running on port $(cat "$port_file" 2>/dev/null) (pid $pid, data in $data);" \
                "stop it first, or set DATAKIT_MONGO_DATA to another folder"
            exit 1
        fi
        say "already running (pid $pid, data in $data)"
        echo "DATAKIT_MONGO_URI=$uri/datakit"
        return
    fi
    server="$(find_server)"
    python="$(python_for "$server")"
    if wait_for_ping "$python" "$uri" 0 0.5; then
        say "another server already answers on 127.0.0.1:$port: use it, stop it, or give another PORT"
        exit 1
    fi
    mkdir -p "$data/data"
    rm -f "$pid_file"
    # setsid: the server outlives this shell and its terminal; no file descriptor of ours stays open.
    local detach=()
    if command -v setsid >/dev/null 2>&1; then detach=(setsid); fi
    "${detach[@]}" "$server" --host 127.0.0.1 --port "$port" --data-dir "$data/data" \
        --log-file "$data/nx-27017.log" --pid-file "$pid_file" </dev/null >"$data/nx-27017.out" 2>&1 &
    pid=$!
    echo "$port" >"$port_file"
    if ! wait_for_ping "$python" "$uri" "$pid" 30; then
        if kill "$pid" 2>/dev/null; then
            say "nx-27017 did not answer ping on 127.0.0.1:$port within 30 s; the end of its output:"
        else
            say "nx-27017 exited before answering on 127.0.0.1:$port (is the port taken?); the end of its output:"
        fi
        tail -n 3 "$data/nx-27017.out" >&2 || true
        rm -f "$port_file"
        exit 1
    fi
    pid="$(cat "$pid_file" 2>/dev/null || echo "$pid")"  # the server's own word for its pid
    say "nx-27017 running on 127.0.0.1:$port (pid $pid, data in $data); stop it with: bash scripts/mongo-server.sh stop"
    echo "DATAKIT_MONGO_URI=$uri/datakit"
}

stop() {
    local pid
    pid="$(running_pid)"
    if [ -z "$pid" ]; then
        rm -f "$pid_file"
        say "not running"
        return
    fi
    kill -TERM "$pid"
    for _ in $(seq 100); do  # up to 10 s for a clean shutdown
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        say "pid $pid did not stop within 10 s: killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pid_file" "$port_file"
    say "stopped (pid $pid); its data stays in $data"
}

status() {
    local pid
    pid="$(running_pid)"
    if [ -z "$pid" ]; then
        say "not running"
        exit 3
    fi
    say "running (pid $pid, data in $data)"
    echo "DATAKIT_MONGO_URI=mongodb://127.0.0.1:$(cat "$port_file" 2>/dev/null || echo 27017)/datakit"
}

case "${1:-}" in
    start) start "${2:-}" ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: bash scripts/mongo-server.sh start [PORT] | stop | status" >&2; exit 2 ;;
esac
