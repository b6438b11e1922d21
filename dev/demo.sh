#!/usr/bin/env bash
# The main job on the demo: MariaDB and Elasticsearch up, demo schema loaded, `indexer run`
# reading MariaDB's binlog and streaming it into Elasticsearch. Runs until Ctrl-C (the daemon
# then saves the position it wrote up to and exits).
#   dev/demo.sh                    # the direct source: MariaDB and Elasticsearch only
#   DEMO_SOURCE=kafka dev/demo.sh  # through Debezium and Kafka: the whole stack
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_DIR"
ES_URL="http://127.0.0.1:${ES_PORT:-9200}"
DEMO_SOURCE="${DEMO_SOURCE:-binlog}"
bin="$(dev/venv.sh)"
case "$DEMO_SOURCE" in
  binlog) dev/stack.sh up mariadb elasticsearch; path="read from MariaDB's binlog"; env="" ;;
  kafka) dev/stack.sh up; path="streamed from MariaDB through Debezium and Kafka"
         env="INDEXER_SOURCE__KIND=kafka " ;;
  *) echo "[demo] DEMO_SOURCE is binlog or kafka, not '$DEMO_SOURCE'" >&2; exit 1 ;;
esac
export INDEXER_SOURCE__KIND="$DEMO_SOURCE"
echo "[demo] loading examples/demo.sql into MariaDB (database demo)"
mariadb --no-defaults -h127.0.0.1 -P"${MYSQL_PORT:-3306}" -uindexer -pindexer < examples/demo.sql

"$bin/indexer" run --config examples/demo.toml &
daemon=$!
stop_daemon() { kill -INT $daemon 2>/dev/null || true; wait $daemon || true; }
trap stop_daemon EXIT INT TERM
count() { (curl -fsS "$ES_URL/$1/_count" 2>/dev/null || true) | sed -n 's/.*"count":\([0-9]*\).*/\1/p'; }
for _ in $(seq 1 120); do
  n=$(count products)
  orders=$(count orders)
  [[ "${n:-0}" -ge 8 && "${orders:-0}" -ge 3 ]] && break
  kill -0 $daemon 2>/dev/null || { echo "[demo] indexer run exited" >&2; exit 1; }
  sleep 0.5
done
cat <<MSG

[demo] ${n:-0} products are in Elasticsearch, $path,
       and ${orders:-0} orders, each joined with its customer and its lines' products.

  Search them:       curl '$ES_URL/products/_search?q=tea&pretty'
  An order, joined:  curl '$ES_URL/orders/_doc/100?pretty'
  Change a row:      mariadb -h127.0.0.1 -uindexer -pindexer demo \\
                       -e "UPDATE products SET price = 6.50, tags = 'sale' WHERE sku = 'TEA-001'"
                     (orders 100 and 102 hold that product: their documents change too)
  Delete a row:      mariadb -h127.0.0.1 -uindexer -pindexer demo -e "DELETE FROM products WHERE id = 2"
  Watch the metrics: curl -s localhost:9464/metrics | grep ^indexer_
  Health:            $env.venv/bin/indexer check --config examples/demo.toml
  Where it stands:   $env.venv/bin/indexer status --config examples/demo.toml
  One row, explained: $env.venv/bin/indexer explain products 1 --config examples/demo.toml

The change shows up in the search within a second. Ctrl-C stops the daemon; dev/stack.sh down
stops the servers.
MSG
wait $daemon || true
