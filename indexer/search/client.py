"""One small HTTP client for the search APIs indexer uses, on every server it supports.

Elasticsearch 8 and 9 and OpenSearch 2 and 3 answer the same requests for what indexer does
(bulk with external versions, indices, aliases, settings, search with aggregations, scroll,
refresh, health) as long as the client sends plain ``application/json``. The official
clients do not: elasticsearch-py 9 always asks for ``compatible-with=9`` (refused by 8), and
both Elastic clients and opensearch-py refuse the other product. So indexer speaks HTTP
itself through Elastic's own transport (node pool, TLS, fingerprint pinning, aiohttp),
detects the server once when it connects, and leaves the few real differences to
:mod:`indexer.search.servers`.
"""

from __future__ import annotations

import base64
import logging
import ssl
from collections.abc import AsyncIterator, Collection, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import orjson
from elastic_transport import (
    AsyncTransport,
    ConnectionError,
    NodeConfig,
    TlsError,
    TransportError,
)
from elastic_transport import OrjsonSerializer as _JsonSerializer

from indexer.errors import ConfigError, SearchUnavailable
from indexer.outages import Outage
from indexer.search.servers import Server, identify
from indexer.security import redact_url, tls_context, tls_reason
from indexer.settings import ElasticsearchSettings

log = logging.getLogger(__name__)

__all__ = ["SearchClient", "SearchError", "SearchUnavailable", "TransportError", "quote"]

JSON = "application/json"
NDJSON = "application/x-ndjson"
# Statuses of a server that is there but cannot serve now (overloaded, restarting).
UNAVAILABLE = frozenset({429, 502, 503, 504})
# Search contexts of a scan live this long between pages.
SCROLL_KEEPALIVE = "5m"
SCAN_PAGE = 1000


class SearchError(Exception):
    """The server answered with an error status."""

    def __init__(self, status: int, method: str, path: str, body: Any) -> None:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            self.kind = str(error.get("type", status))
            self.reason = str(error.get("reason", ""))
        else:
            self.kind, self.reason = str(status), str(error or body or "")[:500]
        self.status = status
        super().__init__(f"{method} {path.partition('?')[0]} answered {status} {self.kind}: "
                         f"{self.reason}")


class SearchClient:
    """An async context manager owning the connections; ``server`` says what answered."""

    def __init__(self, settings: ElasticsearchSettings, outage: Outage | None = None) -> None:
        self._settings = settings
        self._transport: AsyncTransport | None = None
        self._headers: dict[str, str] = {"accept": JSON}
        self.server: Server | None = None
        # Where unreachability is told (once per outage, shared by a process's clients).
        self.outage = outage or Outage("the search server", "its requests")

    async def __aenter__(self) -> SearchClient:
        self._transport = AsyncTransport(
            [_node(host, self._settings) for host in self._settings.hosts],
            serializers={JSON: _JsonSerializer(), NDJSON: _JsonSerializer()},
            max_retries=0,  # retries are the callers', with backoff, never past a failure
            retry_on_timeout=False,
            meta_header=False,
        )
        self._headers.update(auth_header(self._settings))
        if not self._settings.verify_certs and self._settings.tls:
            log.warning("TLS certificates of the search server are NOT verified "
                        "(elasticsearch.verify_certs = false)")
        try:
            self.server = await self._detect()
        except BaseException:
            await self.close()
            raise
        log.info("search server: %s", self.server)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._transport is not None:
            await self._transport.close()
            self._transport = None

    async def request(self, method: str, path: str, body: Any = None, *,
                      params: Mapping[str, Any] | None = None, ok: Collection[int] = (),
                      timeout: float | None = None) -> Any:
        """The parsed answer; an error status not in ``ok`` raises :class:`SearchError`.
        ``body`` is bytes as they are, anything else as JSON; bytes for ``/_bulk`` as
        NDJSON."""
        transport = self._transport
        assert transport is not None, "use the client as an async context manager"
        target = path + ("?" + urlencode({k: _param(v) for k, v in params.items()})
                         if params else "")
        headers = self._headers
        if body is not None:
            ndjson = path.endswith("/_bulk")
            headers = {**headers, "content-type": NDJSON if ndjson else JSON}
            if not isinstance(body, bytes):
                body = orjson.dumps(body)
        try:
            response = await transport.perform_request(
                method, target, body=body, headers=headers,
                request_timeout=timeout if timeout is not None
                else self._settings.request_timeout_s)
        except TransportError as exc:
            self.outage.failed(exc)
            raise
        status = response.meta.status
        if status in UNAVAILABLE and status not in ok:
            self.outage.failed(f"{method} {path} answered {status}", "not answering")
        else:
            self.outage.ok()
        if status >= 300 and status not in ok:
            raise SearchError(status, method, target, response.body)
        return response.body

    # The calls the commands make, named as the REST API names them.

    async def bulk(self, body: bytes, *, filter_path: str | None = None, refresh: bool = False,
                   index: str | None = None) -> dict[str, Any]:
        """``index`` is the default for actions without ``_index``."""
        params: dict[str, Any] = {"filter_path": filter_path} if filter_path else {}
        if refresh:
            params["refresh"] = True
        path = f"/{quote(index)}/_bulk" if index else "/_bulk"
        result: dict[str, Any] = await self.request("POST", path, body, params=params)
        return result

    async def health(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", "/_cluster/health")
        return result

    async def create_index(self, index: str, body: Mapping[str, Any]) -> None:
        await self.request("PUT", f"/{quote(index)}", body)

    async def own_index(self, index: str, mappings: Mapping[str, Any]) -> None:
        """Creates one of indexer's own indices (state, dead letters) unless it exists: one
        shard, a replica wherever there is a second node."""
        try:
            await self.create_index(index, {
                "settings": {"index": {"number_of_shards": 1, "auto_expand_replicas": "0-1"}},
                "mappings": mappings})
        except SearchError as exc:
            if exc.kind != "resource_already_exists_exception":
                raise

    async def index_exists(self, name: str) -> bool:
        """Whether an index (or an alias) of this name exists."""
        return bool(await self.indices(name))

    async def indices(self, pattern: str) -> list[str]:
        """Concrete indices matching a name or wildcard pattern (hidden and closed too)."""
        found = await self.request("GET", f"/{quote(pattern, safe='*,')}", params={
            "expand_wildcards": "all", "filter_path": "*.settings.index.uuid"}, ok=(404,))
        return sorted(name for name in (found or {}) if name not in ("error", "status"))

    async def delete_index(self, index: str) -> None:
        await self.request("DELETE", f"/{quote(index)}")

    async def delete_matching(self, pattern: str) -> list[str]:
        """Deletes the indices a wildcard pattern matches, by name: servers refuse wildcard
        deletes by default (``action.destructive_requires_name``)."""
        found = await self.indices(pattern)
        if found:
            await self.request("DELETE", f"/{quote(','.join(found), safe=',')}")
        return found

    async def aliases(self, names: Collection[str]) -> dict[str, list[str]]:
        """index -> the given aliases it carries (indices without any are left out)."""
        found = await self.request("GET", f"/_alias/{quote(','.join(sorted(names)), safe=',')}",
                                   ok=(404,))
        wanted = set(names)
        result: dict[str, list[str]] = {}
        for index, entry in (found or {}).items():
            if isinstance(entry, dict):  # not the "error"/"status" members of a partial 404
                carried = sorted(set(entry.get("aliases", {})) & wanted)
                if carried:
                    result[index] = carried
        return result

    async def update_aliases(self, actions: list[dict[str, Any]]) -> None:
        await self.request("POST", "/_aliases", {"actions": actions})

    async def put_settings(self, index: str, settings: Mapping[str, Any]) -> None:
        await self.request("PUT", f"/{quote(index)}/_settings", settings)

    async def put_mapping(self, index: str, properties: Mapping[str, Any]) -> None:
        await self.request("PUT", f"/{quote(index)}/_mapping", {"properties": properties})

    async def refresh(self, index: str) -> None:
        await self.request("POST", f"/{quote(index, safe='*,')}/_refresh")

    async def count(self, index: str, query: Mapping[str, Any] | None = None) -> int:
        found = await self.request("POST", f"/{quote(index, safe='*,')}/_count",
                                   {"query": query} if query else None)
        return int(found["count"])

    async def search(self, index: str, body: Mapping[str, Any], *,
                     timeout: float | None = None, **params: Any) -> dict[str, Any]:
        result: dict[str, Any] = await self.request(
            "POST", f"/{quote(index, safe='*,')}/_search", body, params=params, timeout=timeout)
        return result

    async def scan(self, index: str, body: Mapping[str, Any], *, size: int = SCAN_PAGE,
                   **params: Any) -> AsyncIterator[dict[str, Any]]:
        """Every hit of a query, page by page through a scroll (which every supported server
        has in the same shape; point-in-time APIs differ between Elasticsearch and
        OpenSearch and buy nothing for a one-pass read)."""
        found = await self.search(index, {"sort": ["_doc"], **body, "size": size},
                                  scroll=SCROLL_KEEPALIVE, **params)
        scroll_id = found.get("_scroll_id")
        try:
            while hits := found["hits"]["hits"]:
                for hit in hits:
                    yield hit
                if scroll_id is None:
                    break
                found = await self.request("POST", "/_search/scroll", {
                    "scroll": SCROLL_KEEPALIVE, "scroll_id": scroll_id})
                scroll_id = found.get("_scroll_id", scroll_id)
        finally:
            if scroll_id is not None and self._transport is not None:
                try:
                    await self.request("DELETE", "/_search/scroll",
                                       {"scroll_id": [scroll_id]}, ok=(404,))
                except (TransportError, SearchError) as exc:
                    log.debug("could not clear a scroll: %s", exc)

    async def _detect(self) -> Server:
        """What is answering, asked once. Elasticsearch names itself in a header on every
        answer, and its nodes API gives the version (minimal builds refuse ``GET /``);
        OpenSearch names its distribution in ``GET /``."""
        try:
            transport = self._transport
            assert transport is not None
            nodes = await transport.perform_request(
                "GET", "/_nodes/_local?filter_path=nodes.*.version", headers=self._headers,
                request_timeout=self._settings.request_timeout_s)
            product = nodes.meta.headers.get("x-elastic-product")
            if nodes.meta.status >= 300:
                raise SearchError(nodes.meta.status, "GET", "/_nodes/_local", nodes.body)
            if product:
                versions = [n.get("version") for n in (nodes.body.get("nodes") or {}).values()]
                root: Any = {"version": {"number": versions[0] if versions else None}}
            else:
                root = await self.request("GET", "/")
        except TlsError as exc:
            raise ConfigError(self._tls_problem(exc)) from exc
        except ConnectionError as exc:
            problem = self._connection_problem(exc)
            raise (SearchUnavailable(problem) if "not reachable" in problem
                   else ConfigError(problem)) from exc
        except SearchError as exc:
            raise ConfigError(self._answer_problem(exc)) from exc
        return identify(root if isinstance(root, dict) else {}, product)

    def _hosts(self) -> str:
        return ", ".join(redact_url(h) for h in self._settings.hosts)

    def _tls_problem(self, exc: TlsError) -> str:
        cause = root_cause(exc)
        text = str(cause)
        if "WRONG_VERSION_NUMBER" in text:
            return (f"search server {self._hosts()} does not speak TLS: use http:// in "
                    "elasticsearch.hosts")
        if isinstance(cause, ssl.SSLCertVerificationError) and "match" in text:
            return (f"search server {self._hosts()}: its TLS certificate does not name this "
                    f"host ({tls_reason(text)}); use a host name the certificate has in "
                    "elasticsearch.hosts")
        if isinstance(cause, ssl.SSLCertVerificationError):
            return (f"search server {self._hosts()}: TLS certificate not trusted "
                    f"({tls_reason(text)}); set elasticsearch.ca_file to the CA that signed "
                    "it, or elasticsearch.fingerprint to its SHA-256")
        return f"search server {self._hosts()}: TLS failed ({tls_reason(text)})"

    def _connection_problem(self, exc: ConnectionError) -> str:
        cause = root_cause(exc)
        if type(cause).__name__ == "ServerFingerprintMismatch":
            return (f"search server {self._hosts()}: its certificate's SHA-256 does not match "
                    "elasticsearch.fingerprint")
        if type(cause).__name__ == "ServerDisconnectedError" and not self._settings.tls:
            return (f"search server {self._hosts()} closed the connection: if it serves "
                    "https, use https:// in elasticsearch.hosts")
        return (f"search server {self._hosts()} is not reachable ({cause}); check "
                "elasticsearch.hosts")

    def _answer_problem(self, exc: SearchError) -> str:
        s = self._settings
        if exc.status == 401:
            who = (f"user {s.username!r}" if s.username else "the api_key" if s.api_key
                   else "the bearer_token" if s.bearer_token else "no credentials")
            setting = ("elasticsearch.username and elasticsearch.password" if s.username
                       else "elasticsearch.api_key" if s.api_key
                       else "elasticsearch.bearer_token" if s.bearer_token
                       else "elasticsearch.username and password (or api_key, bearer_token)")
            return (f"search server {self._hosts()} refused {who} (401 Unauthorized): "
                    f"check {setting}")
        if exc.status == 403:
            return (f"search server {self._hosts()}: {exc.reason or 'forbidden'} (403); the "
                    "user needs the cluster privilege 'monitor' and index privileges on the "
                    "tables' aliases")
        return f"search server {self._hosts()}: {exc}"


def auth_header(settings: ElasticsearchSettings) -> dict[str, str]:
    """The Authorization header for the configured credentials (none without them)."""
    if settings.username and settings.password:
        pair = f"{settings.username}:{settings.password.reveal()}".encode()
        return {"authorization": "Basic " + base64.b64encode(pair).decode()}
    if settings.api_key:
        key = settings.api_key.reveal()
        if ":" in key:  # "id:key", as the create-API-key answer lists them
            key = base64.b64encode(key.encode()).decode()
        return {"authorization": "ApiKey " + key}
    if settings.bearer_token:
        return {"authorization": "Bearer " + settings.bearer_token.reveal()}
    return {}


def _node(host: str, settings: ElasticsearchSettings) -> NodeConfig:
    parts = urlsplit(host)
    https = parts.scheme == "https"
    options: dict[str, Any] = {}
    if https:
        if settings.fingerprint:
            options["ssl_assert_fingerprint"] = settings.fingerprint.replace(":", "")
        try:
            options["ssl_context"] = tls_context(
                ca_file=settings.ca_file, cert_file=settings.cert_file,
                key_file=settings.key_file, verify=settings.verify_certs)
        except OSError as exc:
            raise ConfigError(f"elasticsearch: cannot load the TLS files "
                              f"(ca_file, cert_file, key_file): {exc}") from exc
        options["verify_certs"] = settings.verify_certs
        options["ssl_show_warn"] = False  # logged once, by the client, in our own words
    return NodeConfig(
        scheme=parts.scheme, host=parts.hostname or "", port=parts.port or (443 if https else 80),
        path_prefix=parts.path.rstrip("/"), request_timeout=settings.request_timeout_s,
        http_compress=False, **options)


def _param(value: Any) -> str:
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value)


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception behind a transport error (what the TLS layer or the socket
    said); elastic-transport's own message is generic."""
    while (inner := exc.__cause__ or exc.__context__) is not None:
        exc = inner
    return exc


