"""Nobody else's index: a configuration pointed at an alias another table's documents live
under is refused before it writes, maps, compares or repairs a byte; two deployments' canaries
never share an index; an index made before owners were recorded is adopted when its documents
are the table's, and only then."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from indexer.core.ownership import OWNER_META
from indexer.errors import OwnershipError
from indexer.jobs.reconcile import reconcile
from indexer.search.client import SearchClient
from tests.integration.conftest import (
    COLUMNS,
    caught_up,
    documents,
    insert_rows,
    live_index,
    mysql_connect,
    running,
    sql,
    unique,
    wait_for_topic,
    wait_until,
)
from tests.integration.test_cli import indexer


async def _owner(es: SearchClient, alias: str) -> dict[str, Any]:
    index = await live_index(es, alias)
    found = await es.request("GET", f"/{index}/_mapping")
    owner: dict[str, Any] = found[index]["mappings"]["_meta"][OWNER_META]
    return owner


@pytest.mark.servers
async def test_a_second_table_on_the_same_alias_is_refused_and_touches_nothing(
        db: Any, es: SearchClient, make_table: Any, make_config: Any,
        tmp_path: Path) -> None:
    first = make_table(COLUMNS)
    insert_rows(db, first.name, 1, 40)
    config = make_config(first.entry())
    async with caught_up(db, es, first, config):
        pass
    before = await documents(es, first.alias)
    index = await live_index(es, first.alias)
    assert (await _owner(es, first.alias))["table"] == f"indexer_test.{first.name}"

    # Another table given the same alias, by mistake, with repair on: rows of its own that
    # share ids with the first table's documents, and a column those lack.
    other = make_table("id INT PRIMARY KEY, name VARCHAR(40), note VARCHAR(20)")
    sql(db, f"INSERT INTO `{other.name}` VALUES (1, 'x', 'n'), (2, 'y', 'n'), (999, 'z', 'n')")
    await wait_for_topic(other.topic)
    second_file = tmp_path / "second.toml"
    (tmp_path / f"{first.alias}.json").write_text('{"settings": {}}')
    make_config(other.entry(alias=first.alias, mapping=f"{first.alias}.json"),
                file=second_file, verify={"repair": True, "period_s": 5, "settle_s": 0})

    for command in (["run"], ["reindex", other.name], ["reconcile", other.name, "--repair"],
                    ["mappings", "apply"], ["tombstones", "purge"]):
        done = await indexer(*command, "-c", str(second_file))
        assert done.returncode == 2, (command, done.stderr)
        line = done.stderr.strip().splitlines()[-1]
        assert f"indexer_test.{first.name}" in line and f"indexer_test.{other.name}" in line
        assert index in line and "nothing was written" in line, line
    checked = await indexer("check", "-c", str(second_file))
    assert checked.returncode == 1 and f"belongs to indexer_test.{first.name}" in checked.stderr

    # The first table's index is as it was: same documents, same mapping, one index.
    assert await documents(es, first.alias) == before
    assert await live_index(es, first.alias) == index
    mapping = await es.request("GET", f"/{index}/_mapping")
    assert "note" not in mapping[index]["mappings"].get("properties", {})
    assert set(await es.aliases([f"{first.alias}-sync"])) == {index}
    # ... and the first table's own daemon goes on with it.
    insert_rows(db, first.name, 41, 45)
    async with caught_up(db, es, first, config):
        pass


async def test_the_daemon_refuses_at_its_start_in_process(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    first = make_table(COLUMNS)
    insert_rows(db, first.name, 1, 3)
    async with caught_up(db, es, first, make_config(first.entry())):
        pass
    other = make_table(COLUMNS)
    insert_rows(db, other.name, 1, 3)
    await wait_for_topic(other.topic)
    second = make_config(other.entry(alias=first.alias, mapping=f"{first.alias}.json"))
    with pytest.raises(OwnershipError, match="nothing was written"):
        async with running(second):
            pass
    with pytest.raises(OwnershipError):
        await reconcile(second, second.tables[0], repair=True)
    assert len(await documents(es, first.alias)) == 3


@contextlib.contextmanager
def table_in(database: str, columns: str) -> Iterator[str]:
    name = unique("t")
    db = mysql_connect()
    try:
        sql(db, f"CREATE TABLE `{database}`.`{name}` ({columns})")
        yield name
    finally:
        with contextlib.suppress(pymysql.err.MySQLError):
            sql(db, f"DROP TABLE IF EXISTS `{database}`.`{name}`")
        db.close()


async def test_two_deployments_in_other_databases_never_share_a_canary(
        db: Any, es: SearchClient, make_table: Any, make_config: Any,
        tmp_path: Path, spawn: Any) -> None:
    here = make_table(COLUMNS)
    insert_rows(db, here.name, 1, 3)
    await wait_for_topic(here.topic)
    with table_in("demo", COLUMNS) as there:
        sql(db, f"INSERT INTO demo.`{there}` VALUES (1, 'a', 1.00, 1)")
        await wait_for_topic(f"mysql.demo.{there}")
        (tmp_path / f"{there}.json").write_text('{"settings": {}}')
        files = [tmp_path / "here.toml", tmp_path / "there.toml"]
        canary = {"interval_s": 1, "max_age_s": 10}
        make_config(here.entry(), file=files[0], canary=canary)
        make_config({"name": f"demo.{there}", "alias": there.replace("_", "-"),
                     "mapping": f"{there}.json"}, file=files[1], canary=canary)
        daemons = [spawn(f) for f in files]
        aliases = ("indexer-canary-mysql-indexer_test", "indexer-canary-mysql-demo")

        async def beats() -> bool:
            for alias in aliases:
                if not await es.index_exists(alias) or not await documents(es, alias):
                    return False
            return all(d.proc.poll() is None for d in daemons)

        try:
            await wait_until(beats, 90, "both canaries' beats indexed")
            for alias, database in zip(aliases, ("indexer_test", "demo"), strict=True):
                assert (await _owner(es, alias))["table"] == f"{database}.indexer_canary"
            for file in files:
                healthy = await indexer("check", "-c", str(file))
                assert "canary" not in healthy.stderr.lower() or healthy.returncode == 0, \
                    healthy.stderr
        finally:
            for daemon in daemons:
                daemon.close()
        assert all("OwnershipError" not in d.tail() and "belongs to" not in d.tail()
                   for d in daemons)
        with contextlib.suppress(Exception):
            await es.delete_matching(f"{there.replace('_', '-')}-v*")


async def _forget_owner(es: SearchClient, index: str) -> None:
    """As an index made by the release before owners were recorded."""
    found = await es.request("GET", f"/{index}/_mapping")
    meta = dict(found[index]["mappings"]["_meta"])
    meta.pop(OWNER_META)
    await es.request("PUT", f"/{index}/_mapping", {"_meta": meta})
    assert OWNER_META not in (await es.request("GET", f"/{index}/_mapping"))[index][
        "mappings"]["_meta"]


@pytest.mark.servers
async def test_an_index_of_the_previous_release_is_adopted_when_it_is_the_tables(
        db: Any, es: SearchClient, make_table: Any, make_config: Any,
        tmp_path: Path) -> None:
    table = make_table(COLUMNS)
    insert_rows(db, table.name, 1, 20)
    config = make_config(table.entry())
    async with caught_up(db, es, table, config):
        pass
    index = await live_index(es, table.alias)
    await _forget_owner(es, index)
    insert_rows(db, table.name, 21, 25)
    async with caught_up(db, es, table, config):  # adopted at the start, then streams
        pass
    assert (await _owner(es, table.alias))["table"] == f"indexer_test.{table.name}"
    assert (await reconcile(config, config.tables[0], settle_s=0)).clean

    # Another table's unrecorded index is not: its documents hold fields the table lacks.
    other = make_table("id INT PRIMARY KEY, title VARCHAR(20)")
    sql(db, f"INSERT INTO `{other.name}` VALUES (1, 'a')")
    await wait_for_topic(other.topic)
    await _forget_owner(es, index)
    file = tmp_path / "other.toml"
    make_config(other.entry(alias=table.alias, mapping=f"{table.alias}.json"), file=file)
    refused = await indexer("reconcile", other.name, "-c", str(file))
    assert refused.returncode == 2 and "records no owner" in refused.stderr, refused.stderr
    assert "fields the table's document does not" in refused.stderr
    # The explicit command takes it over (as for a table renamed in MySQL).
    adopted = await indexer("mappings", "adopt", other.name, "-c", str(file))
    assert adopted.returncode == 0 and "no owner recorded" in adopted.stderr, adopted.stderr
    assert (await _owner(es, table.alias))["table"] == f"indexer_test.{other.name}"
    back = tmp_path / "back.toml"
    make_config(table.entry(), file=back)
    assert (await indexer("reconcile", table.name, "-c", str(back))).returncode == 2
    forced = await indexer("mappings", "adopt", table.name, "--force", "-c", str(back))
    assert forced.returncode == 0 and f"was indexer_test.{other.name}" in forced.stderr


async def test_repair_counts_say_what_the_server_refused(
        db: Any, es: SearchClient, make_table: Any, make_config: Any) -> None:
    table = make_table(COLUMNS, {"mappings": {"dynamic": "strict", "properties": {
        "id": {"type": "integer"}, "name": {"type": "keyword"}, "price": {"type": "keyword"},
        "qty": {"type": "integer"}}}})
    insert_rows(db, table.name, 1, 4)
    config = make_config(table.entry(new_columns="keep"))
    async with caught_up(db, es, table, config):
        pass
    # Changed behind the pipeline's back: two rows now hold what the mapping refuses.
    sql(db, "SET SESSION sql_log_bin = 0")
    try:
        sql(db, f"ALTER TABLE `{table.name}` MODIFY qty VARCHAR(20)")
        sql(db, f"UPDATE `{table.name}` SET qty = 'many' WHERE id IN (1, 2)")
        sql(db, f"UPDATE `{table.name}` SET name = 'renamed' WHERE id = 3")
    finally:
        sql(db, "SET SESSION sql_log_bin = 1")
    before = await documents(es, table.alias)
    report = await reconcile(config, config.tables[0], repair=True, settle_s=0)
    assert report.repaired == {"rewritten": 1, "tombstoned": 0, "refused_as_newer": 0,
                               "refused": 2}
    assert sorted(report.stale) == ["1", "2"]  # still: the re-check after the repair says so
    after = await documents(es, table.alias)
    assert after["3"]["name"] == "renamed"
    assert (after["1"], after["2"], after["4"]) == (before["1"], before["2"], before["4"])
