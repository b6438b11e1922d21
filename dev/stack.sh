#!/usr/bin/env bash
# Dev stack for indexer: a private MariaDB, Kafka (KRaft), Kafka Connect with Debezium's MariaDB
# connector and Elasticsearch, installed from package registries and run as plain processes.
#
#   dev/stack.sh up [server...]     start (idempotent); fails fast with the failing server's log
#   dev/stack.sh down [server...]   stop what `up` started (reverse order)
#   dev/stack.sh status             one line per server
#   dev/stack.sh logs [server]      tail the logs
#   dev/stack.sh register           (re)register the Debezium connector through Connect's REST API
#
# Servers: mariadb elasticsearch kafka connect. Every setting below can be overridden from the
# environment; state (data, logs, pids) lives in $STACK_DIR, downloads in $STACK_CACHE.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STACK_DIR="${STACK_DIR:-$REPO_DIR/.stack}"
# Outside the clone and readable by the unprivileged Elasticsearch user (unlike /root/.cache).
STACK_CACHE="${STACK_CACHE:-/var/cache/indexer-stack}"

MYSQL_PORT="${MYSQL_PORT:-3306}"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
CONNECT_PORT="${CONNECT_PORT:-8083}"
ES_PORT="${ES_PORT:-9200}"

KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
DEBEZIUM_VERSION="${DEBEZIUM_VERSION:-3.5.0.Final}"
ES_VERSION="${ES_VERSION:-9.5.2}"

ES_HEAP="${ES_HEAP:-1g}"
KAFKA_HEAP="${KAFKA_HEAP:-512m}"
CONNECT_HEAP="${CONNECT_HEAP:-512m}"
# Optional CPU pinning for benchmarks (taskset lists, e.g. ES_CPUS=0 KAFKA_CPUS=1).
ES_CPUS="${ES_CPUS:-}"
KAFKA_CPUS="${KAFKA_CPUS:-}"
MYSQL_CPUS="${MYSQL_CPUS:-}"

ES_USER="${ES_USER:-indexer-es}"
MYSQL_USER="${MYSQL_USER:-indexer}"
MYSQL_PASSWORD="${MYSQL_PASSWORD:-indexer}"
DEBEZIUM_USER="${DEBEZIUM_USER:-debezium}"
DEBEZIUM_PASSWORD="${DEBEZIUM_PASSWORD:-debezium}"
TOPIC_PREFIX="${TOPIC_PREFIX:-mysql}"
CONNECTOR_NAME="${CONNECTOR_NAME:-indexer-mariadb}"
CAPTURED_DATABASES="${CAPTURED_DATABASES:-demo,indexer_test}"

SERVERS=(mariadb elasticsearch kafka connect)

log() { printf '[stack] %s\n' "$*" >&2; }
die() { printf '[stack] ERROR: %s\n' "$*" >&2; exit 1; }

pid_file() { echo "$STACK_DIR/$1/$1.pid"; }
log_file() {
  case "$1" in
    elasticsearch) echo "$STACK_DIR/elasticsearch/logs/indexer-dev.log" ;;
    *) echo "$STACK_DIR/$1/$1.log" ;;
  esac
}

is_running() {
  local pf pid
  pf="$(pid_file "$1")"
  [[ -s "$pf" ]] || return 1
  pid="$(cat "$pf")"
  kill -0 "$pid" 2>/dev/null
}

fail_with_log() {
  local server="$1" why="$2" lf
  lf="$(log_file "$server")"
  printf '[stack] ERROR: %s %s. Last lines of %s:\n' "$server" "$why" "$lf" >&2
  if [[ -f "$lf" ]]; then tail -n 40 "$lf" >&2; fi
  # What the JVM or the process printed before its log was set up (bad options, crashes).
  if [[ -s "$STACK_DIR/$server/stdout.log" ]]; then
    printf '[stack] and of %s:\n' "$STACK_DIR/$server/stdout.log" >&2
    tail -n 20 "$STACK_DIR/$server/stdout.log" >&2
  fi
  exit 1
}

# wait_until <server> <timeout-s> <command...>: polls the command; fails at once if the process died.
wait_until() {
  local server="$1" timeout="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    is_running "$server" || fail_with_log "$server" "exited during start-up"
    ((SECONDS < deadline)) || fail_with_log "$server" "did not answer within ${timeout}s"
    sleep 0.5
  done
}

pinned() { # pinned <cpus> <command...>
  local cpus="$1"; shift
  if [[ -n "$cpus" ]]; then taskset -c "$cpus" "$@"; else "$@"; fi
}

need_root() { [[ $EUID -eq 0 ]] || die "$1 needs root (apt-get / useradd); run as root once"; }

# ---------------------------------------------------------------- installs (cached) ---------

apt_install() { # apt_install <command> <package>...
  local cmd="$1"; shift
  command -v "$cmd" >/dev/null 2>&1 && return 0
  need_root "installing $*"
  log "installing $* from apt"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null \
      || die "apt-get install $* failed"
  fi
  # The package may start a system service; our instance is private, so stop it.
  if command -v service >/dev/null 2>&1; then service mariadb stop >/dev/null 2>&1 || true; fi
}

java17() { command -v java; }

java21() { # a JDK >= 21 for Elasticsearch
  local candidate
  for candidate in "${ES_JAVA_HOME:-}" /usr/lib/jvm/temurin-25-jdk-amd64 /usr/lib/jvm/temurin-*-jdk-amd64 \
                   /usr/lib/jvm/java-2[1-9]-openjdk-amd64; do
    if [[ -n "$candidate" && -x "$candidate/bin/java" ]]; then
      local major
      major="$("$candidate/bin/java" -XshowSettings:properties -version 2>&1 \
                | awk -F'= ' '/java.specification.version/ {print $2}')"
      if [[ "${major%%.*}" -ge 21 ]]; then echo "$candidate"; return 0; fi
    fi
  done
  die "Elasticsearch $ES_VERSION needs a Java 21+ runtime; set ES_JAVA_HOME"
}

maven_resolve() { # maven_resolve <pom> <outdir> <-Dprop=value...>
  local pom="$1" out="$2"; shift 2
  local tmp="$out.tmp.$$"
  rm -rf "$tmp"
  mvn -B -q -f "$pom" "$@" dependency:copy-dependencies -DoutputDirectory="$tmp" \
    >"$STACK_CACHE/maven.log" 2>&1 || { tail -n 30 "$STACK_CACHE/maven.log" >&2; die "maven could not resolve $pom"; }
  mv "$tmp" "$out"
}

install_kafka() {
  local lib="$STACK_CACHE/kafka-$KAFKA_VERSION/lib"
  [[ -d "$lib" ]] && return 0
  log "resolving Kafka $KAFKA_VERSION jars from Maven Central"
  mkdir -p "$(dirname "$lib")"
  maven_resolve "$REPO_DIR/dev/stack/kafka-pom.xml" "$lib" -Dkafka.version="$KAFKA_VERSION"
}

install_debezium() {
  local plugins="$STACK_CACHE/debezium-$DEBEZIUM_VERSION/plugins"
  [[ -d "$plugins" ]] && return 0
  log "resolving Debezium MariaDB connector $DEBEZIUM_VERSION from Maven Central"
  mkdir -p "$(dirname "$plugins")"
  local dir="$plugins.tmp/debezium-connector-mariadb"
  rm -rf "$plugins.tmp"; mkdir -p "$plugins.tmp"
  maven_resolve "$REPO_DIR/dev/stack/debezium-pom.xml" "$dir" -Ddebezium.version="$DEBEZIUM_VERSION"
  # Connect provides these; duplicates in the plugin folder break class loading.
  rm -f "$dir"/kafka-clients-*.jar "$dir"/connect-api-*.jar "$dir"/slf4j-api-*.jar
  mv "$plugins.tmp" "$plugins"
}

install_elasticsearch() {
  local home="$STACK_CACHE/elasticsearch-$ES_VERSION"
  [[ -x "$home/bin/elasticsearch" ]] && return 0
  apt_install unzip unzip
  log "downloading Elasticsearch $ES_VERSION (integration-test distribution) from Maven Central"
  local dl="$STACK_CACHE/downloads"
  mkdir -p "$dl"
  mvn -B -q dependency:copy \
    -Dartifact="org.elasticsearch.distribution.integ-test-zip:elasticsearch:$ES_VERSION:zip" \
    -DoutputDirectory="$dl" >"$STACK_CACHE/maven.log" 2>&1 \
    || { tail -n 30 "$STACK_CACHE/maven.log" >&2; die "maven could not fetch Elasticsearch $ES_VERSION"; }
  rm -rf "$home.tmp"; mkdir -p "$home.tmp"
  unzip -q "$dl/elasticsearch-$ES_VERSION.zip" -d "$home.tmp"
  mv "$home.tmp/elasticsearch-$ES_VERSION" "$home"
  rm -rf "$home.tmp"
}

ensure_es_user() {
  id "$ES_USER" >/dev/null 2>&1 && return 0
  need_root "creating the user $ES_USER"
  useradd --system --no-create-home --shell /usr/sbin/nologin "$ES_USER"
}

# ---------------------------------------------------------------- servers -------------------

mysql_cli() { mariadb --no-defaults --socket="$STACK_DIR/mariadb/mysqld.sock" -uroot "$@"; }

start_mariadb() {
  apt_install mariadbd mariadb-server
  local dir="$STACK_DIR/mariadb"
  mkdir -p "$dir"
  if [[ ! -d "$dir/data/mysql" ]]; then
    log "initialising MariaDB datadir"
    mariadb-install-db --no-defaults --datadir="$dir/data" --user=root \
      --auth-root-authentication-method=normal >"$dir/install.log" 2>&1 \
      || { tail -n 30 "$dir/install.log" >&2; die "mariadb-install-db failed"; }
  fi
  pinned "$MYSQL_CPUS" nohup mariadbd --no-defaults --datadir="$dir/data" --port="$MYSQL_PORT" \
    --bind-address=127.0.0.1 --socket="$dir/mysqld.sock" --pid-file="$dir/mariadbd.pid" \
    --user=root --server-id=1 --log-bin="$dir/data/mysql-bin" --binlog-format=ROW \
    --binlog-row-image=FULL --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
    --skip-name-resolve --max-connections=500 --innodb-buffer-pool-size=512M \
    --innodb-flush-log-at-trx-commit=2 --sync-binlog=0 \
    --log-error="$(log_file mariadb)" >/dev/null 2>&1 &
  echo $! >"$(pid_file mariadb)"
  wait_until mariadb 60 mariadb-admin --no-defaults --socket="$dir/mysqld.sock" -uroot ping
  mysql_cli <<SQL
CREATE USER IF NOT EXISTS '$MYSQL_USER'@'%' IDENTIFIED BY '$MYSQL_PASSWORD';
GRANT ALL PRIVILEGES ON *.* TO '$MYSQL_USER'@'%';
CREATE USER IF NOT EXISTS '$DEBEZIUM_USER'@'%' IDENTIFIED BY '$DEBEZIUM_PASSWORD';
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '$DEBEZIUM_USER'@'%';
CREATE DATABASE IF NOT EXISTS demo CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS indexer_test CHARACTER SET utf8mb4;
SQL
}

start_elasticsearch() {
  install_elasticsearch
  ensure_es_user
  local java_home dir="$STACK_DIR/elasticsearch"
  java_home="$(java21)"
  mkdir -p "$dir/data" "$dir/logs"
  # A private copy of the config folder: the cached distribution stays read-only and shared.
  if [[ ! -f "$dir/config/elasticsearch.yml" ]]; then
    rm -rf "$dir/config"
    cp -r "$STACK_CACHE/elasticsearch-$ES_VERSION/config" "$dir/config"
  fi
  chown -R "$ES_USER" "$dir"
  runuser -u "$ES_USER" -- test -w "$dir/data" \
    || die "$ES_USER cannot reach $dir (a parent folder is not traversable); set STACK_DIR elsewhere"
  rm -f "$(pid_file elasticsearch)"
  (
    cd "$dir"
    pinned "$ES_CPUS" runuser -u "$ES_USER" -- env ES_JAVA_HOME="$java_home" ES_PATH_CONF="$dir/config" \
      ES_JAVA_OPTS="-Xms$ES_HEAP -Xmx$ES_HEAP" \
      "$STACK_CACHE/elasticsearch-$ES_VERSION/bin/elasticsearch" -d -p "$(pid_file elasticsearch)" \
      -E cluster.name=indexer-dev -E node.name=indexer-dev \
      -E discovery.type=single-node -E http.host=127.0.0.1 -E http.port="$ES_PORT" \
      -E transport.host=127.0.0.1 -E path.data="$dir/data" -E path.logs="$dir/logs" \
      -E xpack.security.enabled=false -E cluster.routing.allocation.disk.threshold_enabled=false \
      -E action.destructive_requires_name=false >"$dir/stdout.log" 2>&1
  ) || fail_with_log elasticsearch "failed to start"
}

wait_elasticsearch() {
  local deadline=$((SECONDS + 180))
  until [[ -s "$(pid_file elasticsearch)" ]]; do
    ((SECONDS < deadline)) || fail_with_log elasticsearch "wrote no pid file"
    sleep 0.5
  done
  wait_until elasticsearch 180 curl -fsS \
    "http://127.0.0.1:$ES_PORT/_cluster/health?wait_for_status=yellow&timeout=1s"
}

kafka_java() { # kafka_java <heap> <cpus> <log4j-file> <args...>
  local heap="$1" cpus="$2" log4j="$3"; shift 3
  pinned "$cpus" "$(java17)" "-Xms$heap" "-Xmx$heap" -XX:+UseG1GC \
    -Dlog4j2.configurationFile="$log4j" -cp "$STACK_CACHE/kafka-$KAFKA_VERSION/lib/*" "$@"
}

write_log4j() { # write_log4j <file> <logfile>
  cat >"$1" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $2
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
EOF
}

start_kafka() {
  install_kafka
  local dir="$STACK_DIR/kafka"
  mkdir -p "$dir"
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=-1
log.segment.bytes=268435456
EOF
  write_log4j "$dir/log4j2.properties" "$(log_file kafka)"
  if [[ ! -f "$dir/data/meta.properties" ]]; then
    local cluster_id
    cluster_id="$(kafka_java 256m "" "$dir/log4j2.properties" kafka.tools.StorageTool random-uuid | tail -n 1)"
    kafka_java 256m "" "$dir/log4j2.properties" kafka.tools.StorageTool format -t "$cluster_id" \
      -c "$dir/server.properties" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; die "formatting Kafka storage failed"; }
  fi
  nohup bash -c "$(declare -f pinned kafka_java java17); STACK_CACHE='$STACK_CACHE' KAFKA_VERSION='$KAFKA_VERSION' \
    kafka_java '$KAFKA_HEAP' '$KAFKA_CPUS' '$dir/log4j2.properties' kafka.Kafka '$dir/server.properties'" \
    >"$dir/stdout.log" 2>&1 &
  echo $! >"$(pid_file kafka)"
  wait_until kafka 90 grep -q "Kafka Server started" "$(log_file kafka)"
}

start_connect() {
  install_kafka
  install_debezium
  local dir="$STACK_DIR/connect"
  mkdir -p "$dir"
  cat >"$dir/connect.properties" <<EOF
bootstrap.servers=127.0.0.1:$KAFKA_PORT
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=true
value.converter.schemas.enable=true
offset.storage.file.filename=$dir/offsets.dat
offset.flush.interval.ms=1000
plugin.path=$STACK_CACHE/debezium-$DEBEZIUM_VERSION/plugins
plugin.discovery=only_scan
listeners=http://127.0.0.1:$CONNECT_PORT
EOF
  write_log4j "$dir/log4j2.properties" "$(log_file connect)"
  nohup bash -c "$(declare -f pinned kafka_java java17); STACK_CACHE='$STACK_CACHE' KAFKA_VERSION='$KAFKA_VERSION' \
    kafka_java '$CONNECT_HEAP' '$KAFKA_CPUS' '$dir/log4j2.properties' \
    org.apache.kafka.connect.cli.ConnectStandalone '$dir/connect.properties'" >"$dir/stdout.log" 2>&1 &
  echo $! >"$(pid_file connect)"
  wait_until connect 120 bash -c \
    "curl -fsS http://127.0.0.1:$CONNECT_PORT/connector-plugins | grep -q MariaDbConnector"
  register_connector
}

connector_config() {
  sed -e "s/@MYSQL_PORT@/$MYSQL_PORT/g" -e "s/@KAFKA_PORT@/$KAFKA_PORT/g" \
      -e "s/@DEBEZIUM_USER@/$DEBEZIUM_USER/g" -e "s/@DEBEZIUM_PASSWORD@/$DEBEZIUM_PASSWORD/g" \
      -e "s/@TOPIC_PREFIX@/$TOPIC_PREFIX/g" -e "s/@CAPTURED_DATABASES@/$CAPTURED_DATABASES/g" \
      "$REPO_DIR/dev/stack/connector.json"
}

register_connector() {
  # PUT .../config creates or updates, so a second `up` is a no-op.
  local url="http://127.0.0.1:$CONNECT_PORT/connectors/$CONNECTOR_NAME"
  connector_config | curl -fsS -X PUT -H 'Content-Type: application/json' --data-binary @- \
    "$url/config" >"$STACK_DIR/connect/register.json" \
    || fail_with_log connect "refused the connector configuration"
  wait_until connect 60 bash -c "curl -fsS $url/status | grep -q '\"tasks\":\[{\"id\":0,\"state\":\"RUNNING\"'"
}

stop_server() {
  local server="$1" pf pid
  pf="$(pid_file "$server")"
  if ! is_running "$server"; then rm -f "$pf"; return 0; fi
  pid="$(cat "$pf")"
  log "stopping $server (pid $pid)"
  # Kafka and Connect run under a bash wrapper: signal the whole process group's children too.
  pkill -TERM -P "$pid" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 40))
  while kill -0 "$pid" 2>/dev/null || pgrep -P "$pid" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "$server did not stop in 40s; killing it"
      pkill -KILL -P "$pid" 2>/dev/null || true
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.3
  done
  rm -f "$pf"
}

server_port() {
  case "$1" in
    mariadb) echo "$MYSQL_PORT" ;; elasticsearch) echo "$ES_PORT" ;;
    kafka) echo "$KAFKA_PORT" ;; connect) echo "$CONNECT_PORT" ;;
  esac
}

check_port_free() {
  local server="$1" port
  port="$(server_port "$server")"
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "port $port for $server is taken by another process (set the port variable, see dev/stack.sh)"
  fi
}

cmd_up() {
  local wanted=("$@")
  ((${#wanted[@]})) || wanted=("${SERVERS[@]}")
  mkdir -p "$STACK_DIR" "$STACK_CACHE"
  local s es_started=0
  for s in "${wanted[@]}"; do
    [[ " ${SERVERS[*]} " == *" $s "* ]] || die "unknown server '$s' (one of: ${SERVERS[*]})"
  done
  # Elasticsearch is the slowest to boot: start it first and wait for it last.
  for s in "${wanted[@]}"; do
    if [[ "$s" == elasticsearch ]] && ! is_running elasticsearch; then
      check_port_free elasticsearch
      log "starting elasticsearch on 127.0.0.1:$ES_PORT"
      start_elasticsearch
      es_started=1
    fi
  done
  for s in mariadb kafka connect; do
    [[ " ${wanted[*]} " == *" $s "* ]] || continue
    if is_running "$s"; then continue; fi
    check_port_free "$s"
    log "starting $s on 127.0.0.1:$(server_port "$s")"
    "start_$s"
  done
  if ((es_started)) || [[ " ${wanted[*]} " == *" elasticsearch "* ]]; then wait_elasticsearch; fi
  cmd_status
}

cmd_down() {
  local wanted=("$@") i
  ((${#wanted[@]})) || wanted=("${SERVERS[@]}")
  for ((i = ${#SERVERS[@]} - 1; i >= 0; i--)); do
    [[ " ${wanted[*]} " == *" ${SERVERS[i]} "* ]] && stop_server "${SERVERS[i]}"
  done
  return 0
}

cmd_status() {
  local s
  for s in "${SERVERS[@]}"; do
    if is_running "$s"; then
      printf '%-14s running  pid %-8s 127.0.0.1:%s\n' "$s" "$(cat "$(pid_file "$s")")" "$(server_port "$s")"
    else
      printf '%-14s stopped\n' "$s"
    fi
  done
}

cmd_logs() {
  local s files=()
  for s in "${@:-${SERVERS[@]}}"; do files+=("$(log_file "$s")"); done
  tail -n 50 "${files[@]}"
}

main() {
  local cmd="${1:-}"
  shift || true
  case "$cmd" in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status ;;
    logs) cmd_logs "$@" ;;
    register) register_connector ;;
    *) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
}

main "$@"
