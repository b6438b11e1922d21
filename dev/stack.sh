#!/usr/bin/env bash
# Dev stack for indexer: a private MariaDB, Kafka (KRaft), Kafka Connect with Debezium's MariaDB
# connector and a search server, installed from package registries and run as plain processes.
#
#   dev/stack.sh up [server...]     start (idempotent); fails fast with the failing server's log
#   dev/stack.sh down [server...]   stop what `up` started (reverse order)
#   dev/stack.sh status             one line per server
#   dev/stack.sh logs [server]      tail the logs
#   dev/stack.sh register           (re)register the Debezium connector through Connect's REST API
#   dev/stack.sh profile            print the [kafka], [elasticsearch] and [mysql] settings that
#                                   reach this stack (paste them into a config file)
#
# Servers: mariadb elasticsearch kafka connect ("elasticsearch" is whichever search server
# SEARCH names); failover-primary and failover-replica (a fresh MariaDB pair with GTID
# replication, for fail-over tests) start only when named. Variants, each with its own state and ports, so several can run side by side:
#   SEARCH=es9 (default) | es8 | opensearch2 | opensearch3    the search server
#   SECURE=1   TLS and authentication everywhere: Elasticsearch with HTTPS and users, Kafka with
#              a SASL_SSL (SCRAM) listener, Connect and Debezium configured for it, MariaDB with
#              TLS required for the application user; certificates and random passwords are
#              made at first start under $STACK_DIR/tls and $STACK_DIR/secrets.
# Every setting below can be overridden from the environment; state (data, logs, pids) lives in
# $STACK_DIR, downloads in $STACK_CACHE.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SEARCH="${SEARCH:-es9}"
SECURE="${SECURE:-0}"
[[ "$SECURE" == 1 || "$SECURE" == 0 ]] || { echo "[stack] ERROR: SECURE is 0 or 1" >&2; exit 1; }
# The secured stack is a second one beside the plain one: its own state and ports.
# (+100 for Kafka, Connect and MariaDB; +10 for the search server, below its transport ports.)
if [[ "$SECURE" == 1 ]]; then port_offset=100; search_offset=10; default_dir="$REPO_DIR/.stack/secure"
else port_offset=0; search_offset=0; default_dir="$REPO_DIR/.stack"; fi
STACK_DIR="${STACK_DIR:-$default_dir}"
# Outside the clone and readable by the unprivileged search-server user (unlike /root/.cache).
STACK_CACHE="${STACK_CACHE:-/var/cache/indexer-stack}"

case "$SEARCH" in
  es9) SEARCH_DIST=elasticsearch; SEARCH_VERSION="${SEARCH_VERSION:-${ES_VERSION:-9.5.2}}"; search_port=9200 ;;
  es8) SEARCH_DIST=elasticsearch; SEARCH_VERSION="${SEARCH_VERSION:-8.19.8}"; search_port=9201 ;;
  opensearch2) SEARCH_DIST=opensearch; SEARCH_VERSION="${SEARCH_VERSION:-2.19.6}"; search_port=9202 ;;
  opensearch3) SEARCH_DIST=opensearch; SEARCH_VERSION="${SEARCH_VERSION:-3.3.2}"; search_port=9203 ;;
  *) echo "[stack] ERROR: SEARCH is es9, es8, opensearch2 or opensearch3, not '$SEARCH'" >&2; exit 1 ;;
esac
if [[ "$SECURE" == 1 && "$SEARCH_DIST" == opensearch ]]; then
  # Their integration-test distributions carry no security plugin.
  echo "[stack] ERROR: SECURE=1 needs an Elasticsearch (SEARCH=es9 or es8)" >&2; exit 1
fi

MYSQL_PORT="${MYSQL_PORT:-$((3306 + port_offset))}"
KAFKA_PORT="${KAFKA_PORT:-$((9092 + port_offset))}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((9093 + port_offset))}"
CONNECT_PORT="${CONNECT_PORT:-$((8083 + port_offset))}"
ES_PORT="${ES_PORT:-$((search_port + search_offset))}"

KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
DEBEZIUM_VERSION="${DEBEZIUM_VERSION:-3.5.0.Final}"

ES_HEAP="${ES_HEAP:-1g}"
KAFKA_HEAP="${KAFKA_HEAP:-512m}"
CONNECT_HEAP="${CONNECT_HEAP:-512m}"
# Optional CPU pinning for benchmarks (taskset lists, e.g. ES_CPUS=0 KAFKA_CPUS=1).
ES_CPUS="${ES_CPUS:-}"
KAFKA_CPUS="${KAFKA_CPUS:-}"
MYSQL_CPUS="${MYSQL_CPUS:-}"

ES_USER="${ES_USER:-indexer-es}"
MYSQL_USER="${MYSQL_USER:-indexer}"
DEBEZIUM_USER="${DEBEZIUM_USER:-debezium}"
DEBEZIUM_PASSWORD="${DEBEZIUM_PASSWORD:-debezium}"
TLS_DIR="$STACK_DIR/tls"
SECRETS_DIR="$STACK_DIR/secrets"
# The plain stack keeps the well-known development password; the secured one makes its own.
if [[ "$SECURE" == 1 ]]; then MYSQL_PASSWORD="${MYSQL_PASSWORD:-}"; else MYSQL_PASSWORD="${MYSQL_PASSWORD:-indexer}"; fi
TOPIC_PREFIX="${TOPIC_PREFIX:-mysql}"
CONNECTOR_NAME="${CONNECTOR_NAME:-indexer-mariadb}"
CAPTURED_DATABASES="${CAPTURED_DATABASES:-demo,indexer_test}"

SERVERS=(mariadb elasticsearch kafka connect)
# A MariaDB primary and its GTID replica, for fail-over tests; started only when named, and
# made from nothing at each start (a test promotes the replica, which ends the pair).
PAIR=(failover-primary failover-replica)
FAILOVER_PRIMARY_PORT="${FAILOVER_PRIMARY_PORT:-$((3307 + port_offset))}"
FAILOVER_REPLICA_PORT="${FAILOVER_REPLICA_PORT:-$((3308 + port_offset))}"

log() { printf '[stack] %s\n' "$*" >&2; }
die() { printf '[stack] ERROR: %s\n' "$*" >&2; exit 1; }

# The default search server keeps the folder name it always had (benchmarks read its pid).
if [[ "$SEARCH" == es9 ]]; then SEARCH_DIR="$STACK_DIR/elasticsearch"; else SEARCH_DIR="$STACK_DIR/search-$SEARCH"; fi
server_dir() { if [[ "$1" == elasticsearch ]]; then echo "$SEARCH_DIR"; else echo "$STACK_DIR/$1"; fi; }
pid_file() { echo "$(server_dir "$1")/$1.pid"; }
log_file() {
  case "$1" in
    elasticsearch) echo "$SEARCH_DIR/logs/indexer-dev.log" ;;
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
  local out
  out="$(server_dir "$server")/stdout.log"
  if [[ -s "$out" ]]; then
    printf '[stack] and of %s:\n' "$out" >&2
    tail -n 20 "$out" >&2
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

java_major() { "$1/bin/java" -XshowSettings:properties -version 2>&1 \
                 | awk -F'= ' '/java.specification.version/ {print $2}'; }

search_java_home() { # the JDK the search server runs on
  local candidate major
  # OpenSearch 2 relies on the security manager, which Java 24 removed; Elasticsearch 8 is
  # verified on 17. Elasticsearch 9 and OpenSearch 3 need 21 or newer.
  if [[ "$SEARCH" == es8 || "$SEARCH" == opensearch2 ]]; then
    for candidate in "${SEARCH_JAVA_HOME:-}" "$(dirname "$(dirname "$(readlink -f "$(java17)")")")"; do
      if [[ -n "$candidate" && -x "$candidate/bin/java" ]]; then
        major="$(java_major "$candidate")"
        if [[ "${major%%.*}" -ge 17 && "${major%%.*}" -le 23 ]]; then echo "$candidate"; return 0; fi
      fi
    done
    die "$SEARCH needs a Java 17-23 runtime; set SEARCH_JAVA_HOME"
  fi
  for candidate in "${SEARCH_JAVA_HOME:-${ES_JAVA_HOME:-}}" /usr/lib/jvm/temurin-25-jdk-amd64 \
                   /usr/lib/jvm/temurin-*-jdk-amd64 /usr/lib/jvm/java-2[1-9]-openjdk-amd64; do
    if [[ -n "$candidate" && -x "$candidate/bin/java" ]]; then
      major="$(java_major "$candidate")"
      if [[ "${major%%.*}" -ge 21 ]]; then echo "$candidate"; return 0; fi
    fi
  done
  die "$SEARCH_DIST $SEARCH_VERSION needs a Java 21+ runtime; set SEARCH_JAVA_HOME"
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

SEARCH_HOME="$STACK_CACHE/$SEARCH_DIST-$SEARCH_VERSION"

install_search() {
  [[ -x "$SEARCH_HOME/bin/$SEARCH_DIST" ]] && return 0
  apt_install unzip unzip
  local group="org.$SEARCH_DIST.distribution.integ-test-zip"
  log "downloading $SEARCH_DIST $SEARCH_VERSION (integration-test distribution) from Maven Central"
  local dl="$STACK_CACHE/downloads"
  mkdir -p "$dl"
  mvn -B -q dependency:copy -Dartifact="$group:$SEARCH_DIST:$SEARCH_VERSION:zip" \
    -DoutputDirectory="$dl" >"$STACK_CACHE/maven.log" 2>&1 \
    || { tail -n 30 "$STACK_CACHE/maven.log" >&2; die "maven could not fetch $SEARCH_DIST $SEARCH_VERSION"; }
  rm -rf "$SEARCH_HOME.tmp"; mkdir -p "$SEARCH_HOME.tmp"
  unzip -q "$dl/$SEARCH_DIST-$SEARCH_VERSION.zip" -d "$SEARCH_HOME.tmp"
  mv "$SEARCH_HOME.tmp/$SEARCH_DIST-$SEARCH_VERSION" "$SEARCH_HOME"
  rm -rf "$SEARCH_HOME.tmp"
}

# ---------------------------------------------------------------- secrets and TLS (SECURE=1) --

secret() { # secret <name>: a random password made once, kept in $SECRETS_DIR/<name>
  local file="$SECRETS_DIR/$1"
  if [[ ! -s "$file" ]]; then
    mkdir -p "$SECRETS_DIR"; chmod 700 "$SECRETS_DIR"
    (umask 077; openssl rand -hex 16 >"$file")
  fi
  cat "$file"
}

ensure_tls() { # a CA and one certificate per server, for localhost and 127.0.0.1
  [[ -s "$TLS_DIR/ca.crt" ]] && return 0
  log "making a CA and server certificates in $TLS_DIR"
  rm -rf "$TLS_DIR.tmp"; mkdir -p "$TLS_DIR.tmp"
  (
    cd "$TLS_DIR.tmp"
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out ca.key 2>/dev/null
    openssl req -x509 -new -key ca.key -days 3650 -subj "/CN=indexer dev CA" -out ca.crt
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext
    local name
    for name in search kafka mariadb; do
      openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$name.key" 2>/dev/null
      openssl req -new -key "$name.key" -subj "/CN=localhost" -out "$name.csr"
      openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile server.ext -out "$name.crt" 2>/dev/null
      cat "$name.key" "$name.crt" >"$name.pem"  # Kafka's PEM keystore: key, then chain
    done
    rm -f ./*.csr ca.srl server.ext
  ) || die "openssl could not make the certificates"
  mv "$TLS_DIR.tmp" "$TLS_DIR"
}

ensure_search_user() {
  id "$ES_USER" >/dev/null 2>&1 && return 0
  need_root "creating the user $ES_USER"
  useradd --system --no-create-home --shell /usr/sbin/nologin "$ES_USER"
}

# ---------------------------------------------------------------- servers -------------------

mysql_cli() { mariadb --no-defaults --socket="$STACK_DIR/mariadb/mysqld.sock" -uroot "$@"; }

start_pair_server() { # start_pair_server <server> <port> <server id>: a fresh GTID-strict MariaDB
  apt_install mariadbd mariadb-server
  local server="$1" port="$2" id="$3" dir="$STACK_DIR/$1"
  rm -rf "$dir"; mkdir -p "$dir"
  mariadb-install-db --no-defaults --datadir="$dir/data" --user=root \
    --auth-root-authentication-method=normal >"$dir/install.log" 2>&1 \
    || { tail -n 30 "$dir/install.log" >&2; die "mariadb-install-db failed for $server"; }
  nohup mariadbd --no-defaults --datadir="$dir/data" --port="$port" --bind-address=127.0.0.1 \
    --socket="$dir/mysqld.sock" --pid-file="$dir/mariadbd.pid" --user=root --server-id="$id" \
    --log-bin="$dir/data/$server-bin" --binlog-format=ROW --binlog-row-image=FULL \
    --binlog-row-metadata=FULL \
    --log-slave-updates --gtid-strict-mode=1 --character-set-server=utf8mb4 \
    --collation-server=utf8mb4_unicode_ci --skip-name-resolve --innodb-buffer-pool-size=64M \
    --log-error="$(log_file "$server")" >/dev/null 2>&1 &
  echo $! >"$(pid_file "$server")"
  wait_until "$server" 60 mariadb-admin --no-defaults --socket="$dir/mysqld.sock" -uroot ping
  # Local accounts, kept out of the binlog: each server has its own.
  mariadb --no-defaults --socket="$dir/mysqld.sock" -uroot <<SQL
SET SESSION sql_log_bin = 0;
CREATE USER '$MYSQL_USER'@'%' IDENTIFIED BY 'indexer';
GRANT ALL PRIVILEGES ON *.* TO '$MYSQL_USER'@'%';
CREATE USER '$DEBEZIUM_USER'@'%' IDENTIFIED BY '$DEBEZIUM_PASSWORD';
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '$DEBEZIUM_USER'@'%';
CREATE USER 'repl'@'%' IDENTIFIED BY 'repl';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';
SQL
}

start_failover-primary() { start_pair_server failover-primary "$FAILOVER_PRIMARY_PORT" 11; }

start_failover-replica() {
  is_running failover-primary || die "failover-replica replicates failover-primary: start it first"
  start_pair_server failover-replica "$FAILOVER_REPLICA_PORT" 12
  mariadb --no-defaults --socket="$STACK_DIR/failover-replica/mysqld.sock" -uroot <<SQL
CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$FAILOVER_PRIMARY_PORT,
  MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_USE_GTID=current_pos;
START SLAVE;
SQL
}

start_mariadb() {
  apt_install mariadbd mariadb-server
  local dir="$STACK_DIR/mariadb" tls_options=() require=""
  mkdir -p "$dir"
  if [[ "$SECURE" == 1 ]]; then
    ensure_tls
    tls_options=(--ssl-ca="$TLS_DIR/ca.crt" --ssl-cert="$TLS_DIR/mariadb.crt" --ssl-key="$TLS_DIR/mariadb.key")
    MYSQL_PASSWORD="${MYSQL_PASSWORD:-$(secret mysql-indexer.password)}"
    require=" REQUIRE SSL"
  fi
  if [[ ! -d "$dir/data/mysql" ]]; then
    log "initialising MariaDB datadir"
    mariadb-install-db --no-defaults --datadir="$dir/data" --user=root \
      --auth-root-authentication-method=normal >"$dir/install.log" 2>&1 \
      || { tail -n 30 "$dir/install.log" >&2; die "mariadb-install-db failed"; }
  fi
  pinned "$MYSQL_CPUS" nohup mariadbd --no-defaults --datadir="$dir/data" --port="$MYSQL_PORT" \
    --bind-address=127.0.0.1 --socket="$dir/mysqld.sock" --pid-file="$dir/mariadbd.pid" \
    --user=root --server-id=1 --log-bin="$dir/data/mysql-bin" --binlog-format=ROW \
    --binlog-row-image=FULL --binlog-row-metadata=FULL --character-set-server=utf8mb4 \
    --collation-server=utf8mb4_unicode_ci \
    --skip-name-resolve --max-connections=500 --innodb-buffer-pool-size=512M \
    --innodb-flush-log-at-trx-commit=2 --sync-binlog=0 "${tls_options[@]}" \
    --log-error="$(log_file mariadb)" >/dev/null 2>&1 &
  echo $! >"$(pid_file mariadb)"
  wait_until mariadb 60 mariadb-admin --no-defaults --socket="$dir/mysqld.sock" -uroot ping
  mysql_cli <<SQL
CREATE USER IF NOT EXISTS '$MYSQL_USER'@'%' IDENTIFIED BY '$MYSQL_PASSWORD'$require;
ALTER USER '$MYSQL_USER'@'%' IDENTIFIED BY '$MYSQL_PASSWORD'$require;
GRANT ALL PRIVILEGES ON *.* TO '$MYSQL_USER'@'%';
CREATE USER IF NOT EXISTS '$DEBEZIUM_USER'@'%' IDENTIFIED BY '$DEBEZIUM_PASSWORD';
GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '$DEBEZIUM_USER'@'%';
CREATE DATABASE IF NOT EXISTS demo CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS indexer_test CHARACTER SET utf8mb4;
SQL
}

start_elasticsearch() {
  install_search
  ensure_search_user
  local java_home dir="$SEARCH_DIR" security=()
  java_home="$(search_java_home)"
  mkdir -p "$dir/data" "$dir/logs"
  # A private copy of the config folder: the cached distribution stays read-only and shared.
  if [[ ! -f "$dir/config/$SEARCH_DIST.yml" ]]; then
    rm -rf "$dir/config"
    cp -r "$SEARCH_HOME/config" "$dir/config"
    # OpenSearch's JVM options name log and dump files relative to its (shared, read-only) home.
    sed -i -e "s|logs/|$dir/logs/|g" -e "s|HeapDumpPath=data|HeapDumpPath=$dir/data|" \
      "$dir/config/jvm.options"
    [[ "$SECURE" == 1 ]] && secure_search_config "$dir" "$java_home"
  fi
  chown -R "$ES_USER" "$dir"
  runuser -u "$ES_USER" -- test -w "$dir/data" \
    || die "$ES_USER cannot reach $dir (a parent folder is not traversable); set STACK_DIR elsewhere"
  rm -f "$(pid_file elasticsearch)"
  local common=(-E cluster.name=indexer-dev -E node.name=indexer-dev -E discovery.type=single-node
                -E http.port="$ES_PORT" -E path.data="$dir/data" -E path.logs="$dir/logs"
                -E cluster.routing.allocation.disk.threshold_enabled=false)
  local env=() flags=()
  if [[ "$SEARCH_DIST" == elasticsearch ]]; then
    if [[ "$SECURE" == 1 ]]; then
      local ssl
      for ssl in http transport; do
        security+=(-E "xpack.security.$ssl.ssl.enabled=true" -E "xpack.security.$ssl.ssl.key=certs/search.key"
                   -E "xpack.security.$ssl.ssl.certificate=certs/search.crt"
                   -E "xpack.security.$ssl.ssl.certificate_authorities=certs/ca.crt")
      done
      security+=(-E xpack.security.enabled=true -E xpack.security.transport.ssl.verification_mode=certificate)
    else
      # Off from the very first start: otherwise it makes certificates that later starts trip on.
      security=(-E xpack.security.enabled=false)
    fi
    env=(ES_JAVA_HOME="$java_home" ES_PATH_CONF="$dir/config" ES_JAVA_OPTS="-Xms$ES_HEAP -Xmx$ES_HEAP")
    flags=(-E http.host=127.0.0.1 -E transport.host=127.0.0.1 -E action.destructive_requires_name=false
           "${security[@]}")
  else
    env=(OPENSEARCH_JAVA_HOME="$java_home" OPENSEARCH_PATH_CONF="$dir/config"
         OPENSEARCH_JAVA_OPTS="-Xms$ES_HEAP -Xmx$ES_HEAP")
    flags=(-E network.host=127.0.0.1)
  fi
  (
    cd "$dir"
    pinned "$ES_CPUS" runuser -u "$ES_USER" -- env "${env[@]}" \
      "$SEARCH_HOME/bin/$SEARCH_DIST" -d -p "$(pid_file elasticsearch)" "${common[@]}" "${flags[@]}" \
      >"$dir/stdout.log" 2>&1
  ) || fail_with_log elasticsearch "failed to start"
}

secure_search_config() { # secure_search_config <dir> <java home>: certificates, users, keystore
  local dir="$1" java_home="$2"
  ensure_tls
  mkdir -p "$dir/config/certs"
  cp "$TLS_DIR/ca.crt" "$TLS_DIR/search.crt" "$TLS_DIR/search.key" "$dir/config/certs/"
  # What indexer needs: cluster monitor (version, health) and everything on its indices.
  cat >>"$dir/config/roles.yml" <<'YML'
indexer:
  cluster: [monitor]
  indices:
    - names: ["*"]
      privileges: [all]
YML
  chown -R "$ES_USER" "$dir"
  local tool=(runuser -u "$ES_USER" -- env ES_JAVA_HOME="$java_home" ES_PATH_CONF="$dir/config")
  "${tool[@]}" "$SEARCH_HOME/bin/elasticsearch-keystore" create >/dev/null
  secret es-elastic.password | "${tool[@]}" "$SEARCH_HOME/bin/elasticsearch-keystore" add -x -f bootstrap.password >/dev/null
  "${tool[@]}" "$SEARCH_HOME/bin/elasticsearch-users" useradd indexer -p "$(secret es-indexer.password)" \
    -r indexer >/dev/null 2>&1 || die "elasticsearch-users could not add the user indexer"
  # A file-based service token: bearer authentication without the .security index (which this
  # minimal build cannot create, so API keys cannot be issued here).
  "${tool[@]}" "$SEARCH_HOME/bin/elasticsearch-service-tokens" create elastic/fleet-server indexer-dev \
    | sed -n 's/^SERVICE_TOKEN .* = //p' >"$SECRETS_DIR/es-bearer.token"
  [[ -s "$SECRETS_DIR/es-bearer.token" ]] || die "elasticsearch-service-tokens made no token"
}

search_url() {
  if [[ "$SECURE" == 1 ]]; then echo "https://127.0.0.1:$ES_PORT"; else echo "http://127.0.0.1:$ES_PORT"; fi
}

search_curl() { # curl against the search server with the stack's CA and admin user
  if [[ "$SECURE" == 1 ]]; then
    curl --cacert "$TLS_DIR/ca.crt" -u "elastic:$(secret es-elastic.password)" "$@"
  else
    curl "$@"
  fi
}

wait_elasticsearch() {
  local deadline=$((SECONDS + 180))
  until [[ -s "$(pid_file elasticsearch)" ]]; do
    ((SECONDS < deadline)) || fail_with_log elasticsearch "wrote no pid file"
    sleep 0.5
  done
  wait_until elasticsearch 180 search_curl -fsS \
    "$(search_url)/_cluster/health?wait_for_status=yellow&timeout=1s"
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

# Kafka users of the secured stack: SCRAM credentials are written when the storage is formatted.
KAFKA_USERS=(admin indexer connect)

kafka_listener() {
  if [[ "$SECURE" == 1 ]]; then echo SASL_SSL; else echo PLAINTEXT; fi
}

kafka_client_properties() { # kafka_client_properties <user> [prefix]: a client's security settings
  [[ "$SECURE" == 1 ]] || return 0
  local user="$1" prefix="${2:-}"
  cat <<EOF
${prefix}security.protocol=SASL_SSL
${prefix}sasl.mechanism=SCRAM-SHA-512
${prefix}sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$user" password="$(secret "kafka-$user.password")";
${prefix}ssl.truststore.type=PEM
${prefix}ssl.truststore.location=$TLS_DIR/ca.crt
EOF
}

start_kafka() {
  install_kafka
  local dir="$STACK_DIR/kafka" listener
  listener="$(kafka_listener)"
  mkdir -p "$dir"
  [[ "$SECURE" == 1 ]] && ensure_tls
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=$listener://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=$listener://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=$listener:$listener,CONTROLLER:PLAINTEXT
inter.broker.listener.name=$listener
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
# Rows up to 16 MB (a LONGTEXT, a JSON document) fit in one message; see README "Large rows".
message.max.bytes=16777216
replica.fetch.max.bytes=16777216
EOF
  local scram=() user
  if [[ "$SECURE" == 1 ]]; then
    # SCRAM (256 and 512) for every user, PLAIN for indexer too, so each mechanism can be tried.
    cat >>"$dir/server.properties" <<EOF
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(secret kafka-admin.password)";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_indexer="$(secret kafka-indexer.password)";
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/kafka.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.crt
EOF
    for user in "${KAFKA_USERS[@]}"; do
      scram+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$(secret "kafka-$user.password")]"
              --add-scram "SCRAM-SHA-256=[name=$user,password=$(secret "kafka-$user.password")]")
    done
  fi
  write_log4j "$dir/log4j2.properties" "$(log_file kafka)"
  if [[ ! -f "$dir/data/meta.properties" ]]; then
    local cluster_id
    cluster_id="$(kafka_java 256m "" "$dir/log4j2.properties" kafka.tools.StorageTool random-uuid | tail -n 1)"
    kafka_java 256m "" "$dir/log4j2.properties" kafka.tools.StorageTool format -t "$cluster_id" \
      -c "$dir/server.properties" "${scram[@]}" >"$dir/format.log" 2>&1 \
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
# Lets the connector's own settings raise its producer's limits (producer.override.*).
connector.client.config.override.policy=All
EOF
  # The worker's own clients and those it gives the connector (its producer) alike.
  { kafka_client_properties connect; kafka_client_properties connect producer.
    kafka_client_properties connect consumer.; } >>"$dir/connect.properties"
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
  # Debezium's schema-history clients need the broker's security settings as well.
  local extra
  extra="$( { kafka_client_properties connect schema.history.internal.producer.
              kafka_client_properties connect schema.history.internal.consumer.; } \
            | python3 -c 'import json, sys; print(json.dumps(dict(l.rstrip("\n").split("=", 1) for l in sys.stdin if l.strip())))')"
  sed -e "s/@MYSQL_PORT@/$MYSQL_PORT/g" -e "s/@KAFKA_PORT@/$KAFKA_PORT/g" \
      -e "s/@DEBEZIUM_USER@/$DEBEZIUM_USER/g" -e "s/@DEBEZIUM_PASSWORD@/$DEBEZIUM_PASSWORD/g" \
      -e "s/@TOPIC_PREFIX@/$TOPIC_PREFIX/g" -e "s/@CAPTURED_DATABASES@/$CAPTURED_DATABASES/g" \
      "$REPO_DIR/dev/stack/connector.json" \
    | python3 -c 'import json, sys; c = json.load(sys.stdin); c.update(json.loads(sys.argv[1])); print(json.dumps(c, indent=2))' "$extra"
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
    failover-primary) echo "$FAILOVER_PRIMARY_PORT" ;; failover-replica) echo "$FAILOVER_REPLICA_PORT" ;;
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
    [[ " ${SERVERS[*]} ${PAIR[*]} " == *" $s "* ]] \
      || die "unknown server '$s' (one of: ${SERVERS[*]} ${PAIR[*]})"
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
  for s in mariadb kafka connect "${PAIR[@]}"; do
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
  local wanted=("$@") i all=("${SERVERS[@]}" "${PAIR[@]}")
  ((${#wanted[@]})) || wanted=("${all[@]}")
  for ((i = ${#all[@]} - 1; i >= 0; i--)); do
    [[ " ${wanted[*]} " == *" ${all[i]} "* ]] && stop_server "${all[i]}"
  done
  return 0
}

cmd_status() {
  local s what
  for s in "${SERVERS[@]}"; do
    what=""
    [[ "$s" == elasticsearch ]] && what=" ($SEARCH_DIST $SEARCH_VERSION)"
    if is_running "$s"; then
      printf '%-14s running  pid %-8s 127.0.0.1:%s%s\n' "$s" "$(cat "$(pid_file "$s")")" "$(server_port "$s")" "$what"
    else
      printf '%-14s stopped%s\n' "$s" "$what"
    fi
  done
  for s in "${PAIR[@]}"; do
    if is_running "$s"; then
      printf '%-16s running  pid %-8s 127.0.0.1:%s\n' "$s" "$(cat "$(pid_file "$s")")" "$(server_port "$s")"
    fi
  done
}

cmd_profile() { # the connection settings of this stack, as indexer's config file wants them
  local scheme=http
  [[ "$SECURE" == 1 ]] && scheme=https
  printf '[kafka]\nbootstrap_servers = "127.0.0.1:%s"\n' "$KAFKA_PORT"
  if [[ "$SECURE" == 1 ]]; then
    printf 'security_protocol = "SASL_SSL"\nsasl_mechanism = "SCRAM-SHA-512"\nsasl_username = "indexer"\n'
    printf 'sasl_password_file = "%s"\nca_file = "%s"\n' "$SECRETS_DIR/kafka-indexer.password" "$TLS_DIR/ca.crt"
  fi
  printf '\n[elasticsearch]\nhosts = ["%s://127.0.0.1:%s"]\n' "$scheme" "$ES_PORT"
  if [[ "$SECURE" == 1 ]]; then
    printf 'username = "indexer"\npassword_file = "%s"\nca_file = "%s"\n' \
      "$SECRETS_DIR/es-indexer.password" "$TLS_DIR/ca.crt"
  fi
  printf '\n[mysql]\nhost = "127.0.0.1"\nport = %s\nuser = "%s"\n' "$MYSQL_PORT" "$MYSQL_USER"
  if [[ "$SECURE" == 1 ]]; then
    printf 'password_file = "%s"\nca_file = "%s"\n' "$SECRETS_DIR/mysql-indexer.password" "$TLS_DIR/ca.crt"
  else
    printf 'password = "%s"\n' "$MYSQL_PASSWORD"
  fi
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
    profile) cmd_profile ;;
    *) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
}

main "$@"
