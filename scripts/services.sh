#!/usr/bin/env bash
# Makes PostgreSQL and RabbitMQ available for agentenkit, then creates its databases.
#
#   bash scripts/services.sh            (or: make services)
#
# - Local URLs (127.0.0.1 / localhost / ::1, the defaults): starts the servers where they are
#   installed and not running; on a Debian-family machine, as root, installs them first with
#   apt-get (packages postgresql, rabbitmq-server). Works without systemd.
# - URLs pointing at another host: starts nothing, only checks that the servers answer.
# - Otherwise prints exactly what is missing and how to provide it, and exits 1.
# - Then creates the databases `agentenkit`, `agentenkit_test` and the ones named in
#   DATABASE_URL / TEST_DATABASE_URL, where missing.
# Idempotent; quick (well under a second) when everything already runs.
#
# Environment:
#   DATABASE_URL       default postgres://postgres@127.0.0.1:5432/agentenkit
#   TEST_DATABASE_URL  default: the same server, database agentenkit_test
#   AMQP_URL           default amqp://guest:guest@127.0.0.1:5672/%2f
#   AGENTENKIT_NO_INSTALL=1   never install packages, only report what is missing
#   SERVICES_TIMEOUT   seconds to wait for a server to become ready (default 120)
set -euo pipefail

DEFAULT_DATABASE_URL="postgres://postgres@127.0.0.1:5432/agentenkit"
DEFAULT_AMQP_URL="amqp://guest:guest@127.0.0.1:5672/%2f"
DATABASE_URL=${DATABASE_URL:-$DEFAULT_DATABASE_URL}
AMQP_URL=${AMQP_URL:-$DEFAULT_AMQP_URL}
TEST_DATABASE_URL=${TEST_DATABASE_URL:-}
TIMEOUT=${SERVICES_TIMEOUT:-120}
export PGCONNECT_TIMEOUT=${PGCONNECT_TIMEOUT:-5}
# Debian keeps daemons' tools in /usr/sbin, which is not on every user's PATH.
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH="$PATH:/usr/sbin:/sbin" ;; esac

T0=$SECONDS
say() { echo "services: $*" >&2; }
die() { echo "services: error: $*" >&2; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }
have() { command -v "$1" >/dev/null 2>&1; }
run_timeout() { # seconds, command...  (timeout(1) where available)
  local s=$1; shift
  if have timeout; then timeout "$s" "$@"; else "$@"; fi
}

# ------------------------------------------------------------------ URL parsing
# parse_url URL -> sets U_SCHEME U_USER U_PASS U_HOST U_PORT U_PATH U_QUERY
parse_url() {
  local url=$1 re='^([a-zA-Z][a-zA-Z0-9+.-]*)://([^/?#]*)(/([^?#]*))?(\?([^#]*))?'
  [[ $url =~ $re ]] || die "cannot parse URL '$url' (expected scheme://[user[:password]@]host[:port]/path)"
  U_SCHEME=${BASH_REMATCH[1]}
  local authority=${BASH_REMATCH[2]}
  U_PATH=${BASH_REMATCH[4]}
  U_QUERY=${BASH_REMATCH[6]}
  local userinfo="" hostport=$authority
  if [[ $authority == *@* ]]; then userinfo=${authority%@*}; hostport=${authority##*@}; fi
  U_USER=${userinfo%%:*}
  U_PASS=""
  [[ $userinfo == *:* ]] && U_PASS=${userinfo#*:}
  if [[ $hostport == \[* ]]; then          # [ipv6]:port
    U_HOST=${hostport%%]*}; U_HOST=${U_HOST#[}
    U_PORT=${hostport#*]}; U_PORT=${U_PORT#:}
  elif [[ $hostport == *:* ]]; then
    U_HOST=${hostport%%:*}; U_PORT=${hostport##*:}
  else
    U_HOST=$hostport; U_PORT=""
  fi
}
is_local_host() {
  case "$1" in "" | 127.0.0.1 | localhost | ::1 | 0.0.0.0 | 127.*) return 0 ;; *) return 1 ;; esac
}

parse_url "$DATABASE_URL"
case "$U_SCHEME" in postgres | postgresql) ;; *) die "DATABASE_URL must start with postgres:// (got '$DATABASE_URL')" ;; esac
PG_HOST=${U_HOST:-127.0.0.1}
PG_PORT=${U_PORT:-5432}
PG_USER=${U_USER:-postgres}
PG_PASS=$U_PASS
PG_DB=${U_PATH:-agentenkit}
PG_QUERY=${U_QUERY:+?$U_QUERY}
PG_SERVER_URL="$U_SCHEME://${U_USER:+$U_USER${U_PASS:+:$U_PASS}@}${U_HOST:+$U_HOST}${U_PORT:+:$U_PORT}"
[[ $U_HOST == *:* ]] && PG_SERVER_URL="$U_SCHEME://${U_USER:+$U_USER${U_PASS:+:$U_PASS}@}[$U_HOST]${U_PORT:+:$U_PORT}"
PG_ADMIN_URL="$PG_SERVER_URL/postgres$PG_QUERY"
PG_LOCAL=false; is_local_host "$U_HOST" && PG_LOCAL=true
[ -n "$U_HOST" ] || PG_HOST=localhost

DATABASES="agentenkit agentenkit_test $PG_DB"
EXTRA_PG_CHECK=""
if [ -n "$TEST_DATABASE_URL" ]; then
  parse_url "$TEST_DATABASE_URL"
  same_server=false
  if [ "${U_PORT:-5432}" = "$PG_PORT" ]; then
    if [ "$U_HOST" = "${PG_HOST}" ] || { is_local_host "$U_HOST" && $PG_LOCAL; }; then same_server=true; fi
  fi
  if $same_server; then
    DATABASES="$DATABASES ${U_PATH}"
  else
    say "note: TEST_DATABASE_URL is on another server than DATABASE_URL; only checking that it answers"
    EXTRA_PG_CHECK=$TEST_DATABASE_URL
  fi
fi

parse_url "$AMQP_URL"
case "$U_SCHEME" in amqp | amqps) ;; *) die "AMQP_URL must start with amqp:// (got '$AMQP_URL')" ;; esac
MQ_HOST=${U_HOST:-127.0.0.1}
MQ_PORT=${U_PORT:-5672}
[ "$U_SCHEME" = amqps ] && MQ_PORT=${U_PORT:-5671}
MQ_LOCAL=false; is_local_host "$U_HOST" && MQ_LOCAL=true

# ------------------------------------------------------------------ probes
psql_q() { # url, psql args...   (quiet, no psqlrc, stop on error)
  local url=$1; shift
  PGOPTIONS='-c client_min_messages=warning' psql "$url" -X -q -A -t -v ON_ERROR_STOP=1 "$@" </dev/null
}
pg_ok() { have psql && psql_q "$PG_ADMIN_URL" -c 'select 1' >/dev/null 2>&1; }
pg_answers() { # the server accepts connections (whatever the authentication)
  if have pg_isready; then pg_isready -q -h "$PG_HOST" -p "$PG_PORT" -t 2; else tcp_open "$PG_HOST" "$PG_PORT"; fi
}
tcp_open() { run_timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null; }
# An AMQP 0-9-1 server answers the protocol header with a Connection.Start method frame (type 1).
amqp_ok() {
  if [ "$MQ_PORT" = 5671 ]; then tcp_open "$MQ_HOST" "$MQ_PORT"; return; fi
  run_timeout 4 bash -c '
    exec 3<>"/dev/tcp/$0/$1" || exit 1
    printf "AMQP\x00\x00\x09\x01" >&3
    IFS= read -r -n 1 -t 3 b <&3 || exit 1
    [ "$b" = $'"'"'\x01'"'"' ]' "$MQ_HOST" "$MQ_PORT" 2>/dev/null
}
wait_for() { # description, seconds, command...
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 1
  done
  say "$what ready after $((SECONDS - T0)) s"
}

# ------------------------------------------------------------------ what is there, what is missing
PG_READY=false; MQ_READY=false
pg_ok && PG_READY=true
amqp_ok && MQ_READY=true

MISSING=()       # lines of the report
PACKAGES=()      # what apt-get can install
BLOCKED=false    # something is missing that installing packages does not fix
pg_server_installed() { have pg_ctlcluster || have postgres || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; }
mq_server_installed() { have rabbitmq-server; }
may_start() { is_root || [ "$(id -un)" = "$1" ]; }
pg_cluster_line() { pg_lsclusters -h 2>/dev/null | awk -v p="$PG_PORT" '$3 == p { print; exit }'; }

if ! $PG_READY; then
  pg_up=false; pg_answers && pg_up=true
  if $PG_LOCAL && ! $pg_up && ! pg_server_installed; then
    MISSING+=("PostgreSQL: not installed, and nothing answers at $PG_HOST:$PG_PORT (Debian package: postgresql)")
    PACKAGES+=(postgresql)
  elif ! have psql; then
    MISSING+=("psql (the PostgreSQL client, used to create the databases): not installed (Debian package: postgresql-client)")
    PACKAGES+=(postgresql-client)
  elif $PG_LOCAL && ! $pg_up; then
    if ! have pg_lsclusters; then
      MISSING+=("PostgreSQL is installed but not running at $PG_HOST:$PG_PORT, and this script starts only Debian clusters (pg_ctlcluster): start it yourself (e.g. 'pg_ctl -D DATADIR start' or 'brew services start postgresql@16')")
      BLOCKED=true
    elif ! may_start postgres; then
      cl=$(pg_cluster_line | awk '{ print $1 " " $2 }')
      MISSING+=("PostgreSQL is installed but not running at $PG_HOST:$PG_PORT, and only root or postgres can start it: run 'sudo pg_ctlcluster ${cl:-VERSION CLUSTER} start'")
      BLOCKED=true
    fi
  fi
fi
if ! $MQ_READY && $MQ_LOCAL; then
  if ! mq_server_installed; then
    MISSING+=("RabbitMQ: not installed, and nothing answers at $MQ_HOST:$MQ_PORT (Debian package: rabbitmq-server)")
    PACKAGES+=(rabbitmq-server)
  elif ! may_start rabbitmq; then
    MISSING+=("RabbitMQ is installed but not running at $MQ_HOST:$MQ_PORT, and only root or rabbitmq can start it: run 'sudo rabbitmq-server -detached' (or 'sudo service rabbitmq-server start')")
    BLOCKED=true
  fi
fi

report_missing() {
  {
    echo "services: cannot make PostgreSQL and RabbitMQ available. Missing:"
    printf '  - %s\n' "${MISSING[@]}"
    echo "Provide them in one of these ways:"
    echo "  - on Debian/Ubuntu, as root: 'make services' installs them with apt-get and starts them"
    echo "      (or by hand: apt-get install -y postgresql rabbitmq-server)"
    echo "  - install and start them yourself (PostgreSQL >= 14 with user postgres trusted on 127.0.0.1,"
    echo "      RabbitMQ >= 3.10 with guest/guest), e.g. on macOS: brew install postgresql@16 rabbitmq"
    echo "  - point at servers that already run:"
    echo "      DATABASE_URL=postgres://USER:PASSWORD@HOST:5432/agentenkit \\"
    echo "      AMQP_URL=amqp://USER:PASSWORD@HOST:5672/%2f make services"
  } >&2
  exit 1
}

if [ ${#MISSING[@]} -gt 0 ]; then
  if ! $BLOCKED && is_root && have apt-get && [ "${AGENTENKIT_NO_INSTALL:-0}" != 1 ]; then
    say "installing ${PACKAGES[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq "${PACKAGES[@]}" </dev/null >/dev/null
    hash -r
  else
    if [ ${#PACKAGES[@]} -gt 0 ]; then
      why="not root"
      is_root && why="no apt-get on this machine"
      [ "${AGENTENKIT_NO_INSTALL:-0}" = 1 ] && why="AGENTENKIT_NO_INSTALL=1"
      $BLOCKED && why="see above"
      MISSING+=("(no packages were installed: $why)")
    fi
    report_missing
  fi
fi

# ------------------------------------------------------------------ start RabbitMQ (first, in the background: it boots slowest)
MQ_STARTED=false
if ! $MQ_READY; then
  $MQ_LOCAL || die "nothing answers AMQP at $MQ_HOST:$MQ_PORT (AMQP_URL=$AMQP_URL); start that server or fix AMQP_URL"
  if run_timeout 20 rabbitmqctl -q ping </dev/null >/dev/null 2>&1; then
    # the node runs: it is still booting (the listener opens last) or listens elsewhere
    wait_for "RabbitMQ" 60 amqp_ok ||
      die "a RabbitMQ node runs here but nothing answers AMQP at $MQ_HOST:$MQ_PORT; check its listeners ('rabbitmqctl status') or fix AMQP_URL"
    MQ_READY=true
  fi
fi
if ! $MQ_READY; then
  say "starting RabbitMQ"
  mkdir -p /var/log/rabbitmq 2>/dev/null || true
  # -detached daemonizes; stdio goes to a log so that no pipe of the caller stays open.
  rabbitmq-server -detached </dev/null >>/tmp/agentenkit-rabbitmq-start.log 2>&1 ||
    die "rabbitmq-server -detached failed; see /tmp/agentenkit-rabbitmq-start.log and /var/log/rabbitmq/"
  MQ_STARTED=true
fi

# ------------------------------------------------------------------ start PostgreSQL
trust_local_tcp() { # version cluster: let user postgres in over TCP from loopback without a password
  local ver=$1 name=$2 hba="/etc/postgresql/$1/$2/pg_hba.conf"
  [ -f "$hba" ] || hba=$(su postgres -c "psql -X -Atc 'show hba_file'" </dev/null)
  say "enabling trust auth for 127.0.0.1 and ::1 in $hba (local development server)"
  sed -i -E 's/^(host[[:space:]]+all[[:space:]]+all[[:space:]]+(127\.0\.0\.1\/32|::1\/128)[[:space:]]+)[a-z0-9-]+/\1trust/' "$hba"
  grep -Eq '^host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$hba" ||
    sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  grep -Eq '^host[[:space:]]+all[[:space:]]+all[[:space:]]+::1/128[[:space:]]+trust' "$hba" ||
    sed -i '1i host all all ::1/128 trust' "$hba"
  pg_ctlcluster "$ver" "$name" reload </dev/null
}

if ! $PG_READY; then
  if ! $PG_LOCAL; then
    pg_answers || die "nothing answers at $PG_HOST:$PG_PORT (DATABASE_URL=$DATABASE_URL); start that server or fix DATABASE_URL"
    pg_ok || die "PostgreSQL at $PG_HOST:$PG_PORT answers but refuses '$PG_ADMIN_URL': $(psql_q "$PG_ADMIN_URL" -c 'select 1' 2>&1 | head -1)"
  else
    if ! pg_answers; then
      line=$(pg_cluster_line)
      if [ -z "$line" ]; then
        if pg_lsclusters -h 2>/dev/null | grep -q .; then
          die "no PostgreSQL cluster listens on port $PG_PORT (clusters: $(pg_lsclusters -h | awk '{printf "%s/%s port %s; ", $1, $2, $3}')); set DATABASE_URL to one of them"
        fi
        is_root || die "PostgreSQL is installed but has no cluster; as root: pg_createcluster --start $(ls /usr/lib/postgresql | sort -V | tail -1) main"
        ver=$(ls /usr/lib/postgresql | sort -V | tail -1)
        say "creating PostgreSQL $ver cluster 'main' on port $PG_PORT"
        pg_createcluster "$ver" main -p "$PG_PORT" </dev/null >/dev/null
        line=$(pg_cluster_line)
      fi
      read -r ver name _ status _ <<<"$line"
      if [ "$status" != online ] || ! pg_answers; then
        say "starting PostgreSQL $ver/$name"
        log=/tmp/agentenkit-postgres-start.log
        pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start </dev/null >>"$log" 2>&1 ||
          pg_ctlcluster "$ver" "$name" start </dev/null >>"$log" 2>&1 ||
          die "could not start PostgreSQL $ver/$name; see $log and /var/log/postgresql/postgresql-$ver-$name.log"
      fi
      wait_for "PostgreSQL" "$TIMEOUT" pg_answers ||
        die "PostgreSQL did not accept connections at $PG_HOST:$PG_PORT within $TIMEOUT s; see /var/log/postgresql/"
    fi
    if ! pg_ok; then
      err=$(psql_q "$PG_ADMIN_URL" -c 'select 1' 2>&1 | head -1 || true)
      if is_root && [ "$PG_USER" = postgres ] && [ -z "$PG_PASS" ] && have pg_lsclusters && [ -n "$(pg_cluster_line)" ]; then
        read -r ver name _ <<<"$(pg_cluster_line)"
        trust_local_tcp "$ver" "$name"
        wait_for "PostgreSQL (trust auth)" 15 pg_ok ||
          die "still cannot connect with '$PG_ADMIN_URL' after enabling trust auth: $(psql_q "$PG_ADMIN_URL" -c 'select 1' 2>&1 | head -1)"
      else
        die "PostgreSQL at $PG_HOST:$PG_PORT refuses '$PG_ADMIN_URL': $err
  either allow user $PG_USER from 127.0.0.1 in pg_hba.conf (e.g. 'host all all 127.0.0.1/32 trust'; run this script as root to have it done),
  or set DATABASE_URL with a user and password that work"
      fi
    fi
  fi
fi
if [ -n "${EXTRA_PG_CHECK:-}" ]; then
  psql_q "$EXTRA_PG_CHECK" -c 'select 1' >/dev/null 2>&1 ||
    die "TEST_DATABASE_URL=$EXTRA_PG_CHECK does not answer: $(psql_q "$EXTRA_PG_CHECK" -c 'select 1' 2>&1 | head -1)"
fi

# ------------------------------------------------------------------ databases
CREATED=""
for db in $DATABASES; do
  case " $CREATED " in *" $db "*) continue ;; esac
  CREATED="${CREATED:+$CREATED }$db"
  lit=${db//\'/\'\'}
  ident=${db//\"/\"\"}
  exists=$(psql_q "$PG_ADMIN_URL" -c "select 1 from pg_database where datname = '$lit'")
  if [ "$exists" != 1 ]; then
    say "creating database $db"
    # a concurrent creator may win the race: that is fine
    psql_q "$PG_ADMIN_URL" -c "create database \"$ident\"" 2>/dev/null ||
      [ "$(psql_q "$PG_ADMIN_URL" -c "select 1 from pg_database where datname = '$lit'")" = 1 ] ||
      die "could not create database $db: $(psql_q "$PG_ADMIN_URL" -c "create database \"$ident\"" 2>&1 | head -1)"
  fi
done

# ------------------------------------------------------------------ wait for RabbitMQ
if $MQ_STARTED; then
  wait_for "RabbitMQ" "$TIMEOUT" amqp_ok ||
    die "RabbitMQ did not answer at $MQ_HOST:$MQ_PORT within $TIMEOUT s; see /tmp/agentenkit-rabbitmq-start.log and /var/log/rabbitmq/"
  # the listener opens late in the boot; make sure the application is fully up
  run_timeout 60 rabbitmqctl -q await_startup </dev/null >/dev/null 2>&1 || true
fi

say "ok in $((SECONDS - T0)) s: postgres $PG_HOST:$PG_PORT (databases: $CREATED), rabbitmq $MQ_HOST:$MQ_PORT"
