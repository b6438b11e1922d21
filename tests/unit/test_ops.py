"""ops/: the Grafana dashboard and the alert rules parse, and name only metrics the daemon
exports."""

import json
import re
from pathlib import Path
from typing import Any

import promql_parser
import yaml

from indexer.metrics import Metrics

OPS = Path(__file__).parents[2] / "ops"
METRIC = re.compile(r"\b(indexer_[a-z_]+)\b")
PROMETHEUS_OWN = {"up"}  # set by Prometheus for every scrape target


# Grafana's variables, as Grafana substitutes them before the query reaches Prometheus.
GRAFANA = {"$__rate_interval": "1m", '"$job"': '".*"', '"$table"': '".*"'}


def parses(expr: str) -> bool:
    for variable, value in GRAFANA.items():
        expr = expr.replace(variable, value)
    promql_parser.parse(expr)  # raises ValueError naming what is wrong
    return True


def exported() -> set[str]:
    """Every sample name the daemon's registry can expose."""
    suffixes = {"counter": ("_total", "_created"), "gauge": ("",),
                "histogram": ("_bucket", "_sum", "_count", "_created")}
    return {family.name + s for family in Metrics().registry.collect()
            for s in suffixes[family.type]}


def expressions(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "expr" and isinstance(v, str)] + [
            e for v in node.values() for e in expressions(v)]
    if isinstance(node, list):
        return [e for v in node for e in expressions(v)]
    return []


def test_dashboard_parses_and_names_exported_metrics() -> None:
    dashboard = json.loads((OPS / "grafana-dashboard.json").read_text())
    exprs = expressions(dashboard["panels"])
    assert len(exprs) >= 10 and all(parses(e) for e in exprs)
    names = {m for e in exprs for m in METRIC.findall(e)}
    assert names <= exported(), names - exported()
    wanted = {"indexer_events_total", "indexer_consumer_lag", "indexer_freshness_seconds",
              "indexer_bulk_seconds_bucket", "indexer_retries_total", "indexer_stale_total",
              "indexer_dead_lettered_total"}
    assert wanted <= names
    assert {p["id"] for p in dashboard["panels"]} == set(range(1, len(dashboard["panels"]) + 1))


def test_alerts_parse_and_name_exported_metrics() -> None:
    rules = yaml.safe_load((OPS / "alerts.yml").read_text())
    (group,) = rules["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert {"IndexerLagGrowing", "IndexerFreshnessHigh", "IndexerDeadLetters", "IndexerStalled",
            "IndexerSourceSwitch"} <= set(alerts)
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and "README" in rule["annotations"]["runbook"]
        assert parses(rule["expr"])
        names = set(METRIC.findall(rule["expr"]))
        bare = set(re.findall(r"\b([a-z_]+)\{", rule["expr"])) - names
        assert names <= exported(), (name, names - exported())
        assert bare <= PROMETHEUS_OWN, (name, bare)
