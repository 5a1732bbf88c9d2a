"""deploy/monitoring (issue 46): the Grafana dashboard and the Prometheus alert rules read only
metrics and labels the proxy serves, and every alert fires as its unit test says.

The expressions come from the files themselves (every rule's ``expr``, every panel's targets,
the dashboard's variable queries); the metric and label names in them are found by a small
PromQL reader (tested here too). A real proxy, driven through a seal, an open, a refusal and a
refused request, is scraped: a name that none of its metric families has fails the test, so a
renamed metric or a typo in a panel cannot ship. promtool (Debian's ``prometheus`` package;
``.ci/run`` installs it) checks the rules, the dashboard's expressions written as recording
rules, and runs ``alerts.test.yml``.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import mrtr_state as ms

from .helpers import ROOT, ProxyProcess, call, program, request, send_raw
from .servers import ScriptedUpstream, free_port, serving
from .test_proxy_ops import admin_get

MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "alerts.yml"
RULE_TESTS = MONITORING / "alerts.test.yml"
DASHBOARD = MONITORING / "dashboard.json"
#: Labels Prometheus adds to every series it scrapes (the target's), which /metrics never has.
TARGET_LABELS = {"job", "instance"}
#: What the dashboard's variables stand for, to read its expressions as PromQL.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}

# --- a small PromQL reader -----------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_NAME = re.compile(r"(?<![\w.:$])[A-Za-z_:][\w:]*")
_SELECTOR = re.compile(r"(?<![\w.:$])([A-Za-z_:][\w:]*)\s*\{([^{}]*)\}")
_MATCHER = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)\s*\"\"")
#: Words PromQL reserves: aggregations, set and comparison keywords, modifiers, constants.
_KEYWORDS = {
    *("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values"),
    *("bottomk", "topk", "quantile", "limitk", "limit_ratio"),
    *("and", "or", "unless", "atan2", "bool", "offset", "by", "without", "on", "ignoring"),
    *("group_left", "group_right", "inf", "nan"),
}


def _bare(expr: str) -> str:
    """``expr`` with Grafana's variables, strings and comments taken out (ranges and grouping
    clauses are dropped by the callers that must not read their words)."""
    expr = re.sub(r"\$\{(\w+)[^}]*\}|\$\w+", lambda m: GRAFANA_VARIABLES.get(m[0], "v"), expr)
    expr = re.sub(r"#[^\n]*", "", _STRING.sub('""', expr))
    return expr


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: the names left once strings, label matchers,
    ranges and grouping clauses are out, except function calls and PromQL's own words."""
    text = _GROUPING.sub(" ", _bare(expr))
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    names = set()
    for found in _NAME.finditer(text):
        called = text[found.end() :].lstrip().startswith("(")
        if not called and found[0].lower() not in _KEYWORDS:
            names.add(found[0])
    return names


def matched_labels(expr: str) -> set[tuple[str, str]]:
    """(metric, label) for each label matcher written on a metric name: ``m{a="x"}``."""
    return {
        (metric, label)
        for metric, inside in _SELECTOR.findall(_bare(expr))
        for label in _MATCHER.findall(inside)
    }


def grouped_labels(expr: str) -> set[str]:
    """The labels named in ``by``, ``without``, ``on``, ``ignoring`` and ``group_*`` lists."""
    lists = _GROUPING.findall(_bare(expr))
    return {label.strip() for _, names in lists for label in names.split(",") if label.strip()}


def test_the_promql_reader_finds_what_an_expression_reads() -> None:
    """The reader is what makes the existence test mean something: if it found nothing, no
    name could be missing."""
    expr = (
        'histogram_quantile(0.99, sum by (job, le) (rate(a_seconds_bucket{job=~"$job"}'
        "[$__rate_interval]))) > 2.5e-3 and on (job) group_left sum without (x) (b_total "
        'offset 5m) / count(c{kid!="by(x)", alg="A256GCM"}) or vector(1)'
    )
    assert metric_names(expr) == {"a_seconds_bucket", "b_total", "c"}
    assert matched_labels(expr) == {("a_seconds_bucket", "job"), ("c", "kid"), ("c", "alg")}
    assert grouped_labels(expr) == {"job", "le", "x"}
    assert metric_names("up == 0") == {"up"}
    assert metric_names('label_values(mrtr_state_proxy_ready{a="b"}, job)') == {
        "mrtr_state_proxy_ready",
        "job",  # label_values's second argument reads as a name: the callers take the first
    }


# --- what the files read -------------------------------------------------------------------


def rule_file() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return loaded


def alerts() -> list[dict[str, Any]]:
    return [rule for group in rule_file()["groups"] for rule in group["rules"] if "alert" in rule]


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # a row's folded panels


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def expressions() -> list[tuple[str, str]]:
    """(where, expression) for every rule, every panel target and every query variable."""
    found = [(f"alerts.yml {rule['alert']}", rule["expr"]) for rule in alerts()]
    board = dashboard()
    for panel in _panels(board["panels"]):
        for target in panel.get("targets", []):
            found.append((f"dashboard panel {panel['title']!r}", target["expr"]))
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            selector = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
            assert selector is not None, query
            found.append((f"dashboard variable ${variable['name']}", selector[1]))
    return found


# --- what the proxy serves -----------------------------------------------------------------

#: The sample names each metric type gives its family (prometheus_client's exposition).
_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("", "_count", "_sum"),
    "unknown": ("",),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Every metric name a proxy with a keyset serves on /metrics, with the labels its samples
    carry, after one state of each kind and a refused request (so labelled families have
    samples)."""
    keyset = tmp_path_factory.mktemp("monitoring") / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    admin = free_port()
    with serving(ScriptedUpstream()) as upstream_url:
        proxy = ProxyProcess(keyset, upstream_url, "--admin-listen", str(admin))
        try:
            first = send_raw(proxy.port, request(body=call("deploy", id_=1))).json()
            token = first["result"]["requestState"]
            send_raw(proxy.port, request(body=call("deploy", id_=2, requestState=token)))
            send_raw(proxy.port, request(body=call("deploy", id_=3, requestState=token[:-2])))
            send_raw(proxy.port, request(b"PUT", body=call("deploy")))
            status, text, _ = admin_get(admin, "/metrics")
        finally:
            proxy.stop()
    assert status == 200
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text.decode()):
        for suffix in _SUFFIXES[family.type]:
            names.setdefault(family.name + suffix, set())
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def test_every_metric_a_rule_or_a_panel_reads_is_served(served: dict[str, set[str]]) -> None:
    found = expressions()
    assert len(found) >= len(alerts()) + 10  # every rule, and the dashboard's panels
    missing = []
    for where, expr in found:
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr!r}"
        missing += [f"{where}: {name}" for name in sorted(names) if name not in served]
    assert missing == [], missing
    # and the other way: every metric the proxy serves is read somewhere (the dashboard)
    read = set().union(*(metric_names(expr) for _, expr in found))
    shown = {name for name in served if not name.endswith(("_count", "_sum", "_created"))}
    assert shown - read == set()


def test_every_label_a_rule_or_a_panel_names_is_one_of_its_metrics(
    served: dict[str, set[str]],
) -> None:
    """A matcher or a grouping on a label the metric does not have selects nothing, silently:
    ``reason`` where the label is ``kind``, ``format`` on a gauge without it."""
    wrong = []
    for where, expr in expressions():
        names = metric_names(expr)
        offered = TARGET_LABELS.union(*(served.get(name, set()) for name in names))
        for metric, label in sorted(matched_labels(expr)):
            if label not in served.get(metric, set()) | TARGET_LABELS:
                wrong.append(f"{where}: {metric} has no label {label!r}")
        wrong += [
            f"{where}: no metric of it has label {label!r}"
            for label in sorted(grouped_labels(expr) - offered)
        ]
    assert wrong == [], wrong


def test_the_dashboard_is_one_grafana_model_on_a_chosen_prometheus() -> None:
    board = dashboard()
    assert board["uid"] == "mrtr-state-proxy" and board["title"]
    panels = list(_panels(board["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)) >= 10
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["description"] and panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert 'job=~"$job"' in target["expr"], (panel["title"], target["expr"])
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]


def test_each_alert_the_issue_asks_for_is_there() -> None:
    """Refusal rate by reason, keyset reload failing, readiness down, store errors, p99
    latency: each an alert reading the metric that says it."""
    read = {rule["alert"]: metric_names(rule["expr"]) for rule in alerts()}
    wanted = {
        "MrtrStateRefusalsHigh": "mrtr_state_proxy_states_total",
        "MrtrStateKeysetReloadFailing": "mrtr_state_keyset_reload_error",
        "MrtrStateProxyNotReady": "mrtr_state_proxy_ready",
        "MrtrStateStateStoreErrors": "mrtr_state_proxy_state_store_failures_total",
        "MrtrStateProxyWorkSlow": "mrtr_state_proxy_work_seconds_bucket",
        "MrtrStateUpstreamSlow": "mrtr_state_proxy_upstream_seconds_bucket",
    }
    assert {alert: read.get(alert) for alert in wanted} == {a: {m} for a, m in wanted.items()}
    refusals = next(r for r in alerts() if r["alert"] == "MrtrStateRefusalsHigh")
    assert "reason" in grouped_labels(refusals["expr"])  # a rate per reason
    for rule in alerts():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


# --- promtool --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def promtool() -> str:
    return program("promtool", "prometheus")


def _promtool(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=120, check=False, cwd=MONITORING
    )


def test_promtool_checks_the_rules(promtool: str) -> None:
    done = _promtool(promtool, "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout


def test_promtool_unit_tests_fire_every_alert_and_keep_it_quiet(promtool: str) -> None:
    """alerts.test.yml has, for every alert, a time it must fire at (with its labels and
    annotations) and one it must not; promtool runs them."""
    cases = yaml.safe_load(RULE_TESTS.read_text())
    assert cases["rule_files"] == [RULES.name]
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in cases["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    every = {rule["alert"] for rule in alerts()}
    assert fired == every and quiet == every
    done = _promtool(promtool, "test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_reads_every_dashboard_expression(promtool: str, tmp_path: Path) -> None:
    """Grafana would show an empty panel for an expression Prometheus cannot parse: each is
    written as a recording rule (Grafana's variables given values) for promtool to check."""
    rules = []
    for number, (_, expr) in enumerate(expressions()):
        concrete = re.sub(r"\$__\w+", lambda m: GRAFANA_VARIABLES[m[0]], expr)
        rules.append({"record": f"dashboard:expression_{number}", "expr": concrete})
    checked = tmp_path / "dashboard-rules.yml"
    checked.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = _promtool(promtool, "check", "rules", str(checked))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_deploying_page_shows_the_rules_and_the_dashboard() -> None:
    page = (ROOT / "docs" / "deploying.md").read_text()
    assert '--8<-- "deploy/monitoring/alerts.yml"' in page
    assert "deploy/monitoring/dashboard.json" in page
    assert "promtool test rules deploy/monitoring/alerts.test.yml" in page
    for rule in alerts():
        assert rule["alert"] in page, rule["alert"]
