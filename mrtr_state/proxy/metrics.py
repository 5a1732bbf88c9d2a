"""The proxy's Prometheus metrics, in a registry of its own (served on the admin listener).

Names follow Prometheus conventions: counters end in ``_total``, durations are ``_seconds``.
Labels take bounded values only (a format, an error code, an HTTP status and a refusal kind,
a key id of the keyset), never a principal, a token or a request's text.

    mrtr_state_proxy_states_total{event="sealed"|"opened"|"refused", format, reason}
    mrtr_state_proxy_refused_requests_total{status, reason}
    mrtr_state_proxy_work_seconds          the proxy's own work per request (parse, rewrite,
                                           seal, open)
    mrtr_state_proxy_upstream_seconds      from sending a request upstream to its response head
    mrtr_state_proxy_store_seconds         a request's waits on its state or replay store
    mrtr_state_proxy_state_store_failures_total   store operations that failed (--state-store,
                                                  or --once's replay store)
    mrtr_state_proxy_ready                 1 when /readyz would answer 200, else 0 (worked out
                                           at each scrape, by the same checks)
    mrtr_state_keyset_reloads_total        looks at the keyset file that left a good keyset in
                                           force after a change or a failure (keyset_reloaded)
    mrtr_state_keyset_reload_failures_total    failed re-reads of the keyset file
                                               (keyset_reload_failed)
    mrtr_state_keyset_reload_error             1 while the file cannot be used (the last good
                                               keyset stays in force), else 0
    mrtr_state_keyset_keys{kid, alg, status}   1 for each key of the keyset in force (the
                                               keyset metrics: with a keyset only)

The ``event`` label and the ``--json-log`` lines use the same words for the same events:
``sealed``, ``opened``, ``refused``; a keyset reload is ``keyset_reloaded`` or
``keyset_reload_failed`` in the log, counted by the two keyset counters.

Needs ``prometheus_client`` (the ``proxy`` extra); nothing else in mrtr-state imports this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..keys.keyset import Keyset

__all__ = ["ProxyMetrics"]

# Buckets for work measured in tens of microseconds, and for upstreams measured in milliseconds.
_WORK_BUCKETS = (5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 5e-2)
_UPSTREAM_BUCKETS = (1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class _KeysetCollector(Collector):
    """Reads the keyset's health and keys at each scrape (no bookkeeping between scrapes)."""

    def __init__(self, keyset: Keyset) -> None:
        self._keyset = keyset

    def collect(self) -> Iterator[Any]:
        keyset = self._keyset
        reloads = CounterMetricFamily(
            "mrtr_state_keyset_reloads",
            "Looks at the keyset file that left a good keyset in force after a change or a failure",
        )
        reloads.add_metric([], keyset.reloads)
        yield reloads
        failures = CounterMetricFamily(
            "mrtr_state_keyset_reload_failures",
            "Failed re-reads of the keyset file (the last good keyset stayed in force)",
        )
        failures.add_metric([], keyset.reload_failures)
        yield failures
        error = GaugeMetricFamily(
            "mrtr_state_keyset_reload_error",
            "1 while the keyset file cannot be used and an older keyset is in force, else 0",
        )
        error.add_metric([], 0 if keyset.reload_error is None else 1)
        yield error
        keys = GaugeMetricFamily(
            "mrtr_state_keyset_keys",
            "The keys of the keyset in force, by id, algorithm and status",
            labels=["kid", "alg", "status"],
        )
        for key in keyset:
            keys.add_metric([key.kid, key.alg, key.status], 1)
        yield keys


class ProxyMetrics:
    """Counters and histograms one proxy updates as it works, and their registry."""

    def __init__(self, keyset: Keyset | None) -> None:
        self.registry = CollectorRegistry()
        self._states = Counter(
            "mrtr_state_proxy_states",
            "requestStates sealed, opened or refused, by format and reason",
            ["event", "format", "reason"],
            registry=self.registry,
        )
        self._requests = Counter(
            "mrtr_state_proxy_refused_requests",
            "HTTP requests the proxy answered itself, by status and kind of refusal",
            ["status", "reason"],
            registry=self.registry,
        )
        self._work = Histogram(
            "mrtr_state_proxy_work_seconds",
            "The proxy's own work per request: parse, rewrite, seal, open",
            buckets=_WORK_BUCKETS,
            registry=self.registry,
        )
        self._upstream = Histogram(
            "mrtr_state_proxy_upstream_seconds",
            "From sending a request upstream to the head of its response",
            buckets=_UPSTREAM_BUCKETS,
            registry=self.registry,
        )
        self._store = Histogram(
            "mrtr_state_proxy_store_seconds",
            "A request's waits on its state or replay store (left out of the proxy's own work)",
            buckets=_UPSTREAM_BUCKETS,
            registry=self.registry,
        )
        self._store_failures = Counter(
            "mrtr_state_proxy_state_store_failures",
            "Operations on the state store that failed (each failed its round closed)",
            registry=self.registry,
        )
        self._ready = Gauge(
            "mrtr_state_proxy_ready",
            "1 when the proxy is ready for traffic (/readyz answers 200), else 0",
            registry=self.registry,
        )
        if keyset is not None:  # a proxy giving out handles needs no keyset
            self.registry.register(_KeysetCollector(keyset))
        self.observe_work = self._work.observe
        self.observe_upstream = self._upstream.observe
        self.observe_store = self._store.observe

    def state(self, event: str, format: str, reason: str) -> None:
        """One state sealed (``sealed``), opened (``opened``) or ``refused``."""
        self._states.labels(event, format, reason).inc()

    def ready(self, ready: bool) -> None:
        """Whether the proxy is ready now: set just before each scrape is answered, from the
        checks ``/readyz`` makes (so the gauge is never older than the scrape reading it)."""
        self._ready.set(1 if ready else 0)

    def store_failed(self) -> None:
        """An operation on the state store failed (the round it served failed closed)."""
        self._store_failures.inc()

    def refused_request(self, status: int, reason: str) -> None:
        self._requests.labels(str(status), reason).inc()

    def exposition(self) -> tuple[bytes, str]:
        """The text a scrape gets, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
