"""The web console at /console, driven in headless Chromium (Debian's, installed by
scripts/setup.sh) by Playwright: sign-in, tables, the data grid, searches, versions, indexes,
jobs and the server page, against a live server. Any JavaScript error or failed request in
the browser fails the test, except the refusals a step provokes on purpose.

Screenshots of every page go to $LANCET_CONSOLE_SCREENSHOTS (docs/console/ in the README is
made with `LANCET_CONSOLE_SCREENSHOTS=docs/console`), else to a temporary directory."""
import contextlib
import hashlib
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
import urllib.request
import zlib

import pyarrow as pa
import pytest
from playwright.sync_api import expect, sync_playwright

from conftest import Lancet, ipc_stream
from test_jobs import virtual_column

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As root in a sandbox, and with nothing fetched from outside (the machine has no internet).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ROWS = 230
DIM = 8


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory() as d:
        # Upkeep off and optimize slowed down: the test cancels an optimize it starts.
        s = Lancet(d, args=["--upkeep", "false"],
                   env={"LANCET_FAULT_INJECTION": "1", "LANCET_FAULT_UPKEEP_DELAY_MS": "60000"})
        try:
            yield s
        finally:
            s.stop()


@pytest.fixture(scope="module")
def shots():
    out = os.environ.get("LANCET_CONSOLE_SCREENSHOTS")
    if out:
        os.makedirs(out, exist_ok=True)
        yield out
    else:
        with tempfile.TemporaryDirectory() as d:
            yield d


@pytest.fixture(scope="module")
def browser():
    assert os.path.exists(CHROMIUM), "chromium is missing: scripts/setup.sh plugins installs it"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Console:
    """A browser page on the console that records every JavaScript error and failed request."""

    def __init__(self, browser, base, shots, color_scheme="light"):
        self.base = base
        self.shots = shots
        self.context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme=color_scheme)
        self.page = self.context.new_page()
        self.problems = []
        self.tolerated = 0
        self.page.on("pageerror", lambda e: self.problems.append(f"JavaScript error: {e}"))
        self.page.on("console", self._console)
        self.page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url} {r.failure}"))
        self.page.on("response", self._response)

    def _console(self, msg):
        if msg.type == "error" and not (self.tolerated and "Failed to load resource" in msg.text):
            self.problems.append(f"console error: {msg.text}")

    def _response(self, r):
        if r.status >= 400 and not self.tolerated:
            self.problems.append(f"{r.status} from {r.request.method} {r.url}")

    @contextlib.contextmanager
    def refusals_expected(self):
        """Within: 4xx answers (and Chromium's note about them) are what the step tests."""
        self.tolerated += 1
        try:
            yield
        finally:
            self.page.wait_for_timeout(200)
            self.tolerated -= 1

    def open(self, hash_=""):
        self.page.goto(f"{self.base}/console{hash_}")

    def sign_in(self, key):
        self.page.fill("#api-key", key)
        self.page.click("#sign-in button[type=submit]")

    def shot(self, name):
        """A screenshot of the page as it is, without passing notices."""
        self.page.evaluate("document.getElementById('toasts').replaceChildren()")
        self.page.screenshot(path=os.path.join(self.shots, f"{name}.png"))

    def close(self):
        self.context.close()
        assert not self.problems, "\n".join(self.problems)


def nulling_column(plugin, entry, inputs):
    """A Wasm virtual column whose failed rows are nulled and recorded (on_error = null)."""
    column = virtual_column(plugin, entry, inputs)
    manifest = json.loads(column["manifest"])
    manifest["on_error"] = "null"
    column["manifest"] = json.dumps(manifest)
    column["manifest_checksum"] = hashlib.sha256(column["manifest"].encode()).hexdigest()
    return column


def png(size, rgb):
    """A small solid-colour PNG."""
    raw = b"".join(b"\x00" + bytes(rgb) * size for _ in range(size))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def make_media(server):
    """Images in a binary column and in a lance blob column (bytes through the blob endpoint)."""
    from lance.blob import blob_array, blob_field
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("thumb", pa.binary()), blob_field("photo")])
    images = [png(24, (i * 60 % 256, 120, 200)) for i in range(4)]
    server.create_table("shop$media", pa.table(
        {"id": [0, 1, 2, 3], "thumb": images, "photo": blob_array(images[:3] + [None])}, schema=schema))


def make_table(server):
    server.post("/v1/namespace/shop/create")
    ids = list(range(ROWS))
    vectors = pa.FixedSizeListArray.from_arrays(
        pa.array([float(i * (j + 1)) for i in ids for j in range(DIM)], pa.float32()), DIM)
    words = ["red", "green", "blue", "amber"]
    server.create_table("shop$items", pa.table({
        "id": pa.array(ids, pa.int64()),
        "text": [f"item {i} is {words[i % 4]} and " + "long " * (40 if i == 3 else 1) for i in ids],
        "vector": vectors,
    }))
    server.post("/v1/table/shop$items/create_index", {"column": "text", "index_type": "FTS"})
    server.post("/v1/table/shop$items/tags/create", {"tag": "first", "version": 1})
    server.post("/v1/view/shop$first_ten/create", {"query": "SELECT id, text FROM shop.items WHERE id < 10"})
    # Version 3, the same rows: something to restore version 2 over.
    server.post("/v1/table/shop$items/update", {"updates": [["text", "text"]], "predicate": f"id = {ROWS - 1}"})


def test_console_pages_against_a_live_server(server, browser, shots):
    make_table(server)
    make_media(server)
    c = Console(browser, server.base, shots)
    page = c.page
    try:
        # A wrong key is refused and asked for again; the right one shows tenant and role.
        c.open()
        with c.refusals_expected():
            c.sign_in("not-a-key")
            expect(page.locator("#sign-in .error")).to_contain_text("invalid API key")
        c.shot("sign-in")
        c.sign_in(server.key)
        expect(page.locator("#tenant")).to_contain_text("default")
        expect(page.locator("#role")).to_have_text("admin")
        # The key is in sessionStorage only, never in a URL.
        assert server.key not in page.url
        assert page.evaluate("sessionStorage.getItem('lancet.key')") == server.key
        assert page.evaluate("localStorage.getItem('lancet.key')") is None

        # Tables: the namespace tree, the table with its row count, search.
        page.click("nav.tree >> text=shop")
        row = page.locator("#tables tbody tr", has_text="items")
        expect(row.locator("td.num")).to_have_text(f"{ROWS}")
        expect(page.locator("#tables tbody tr", has_text="first_ten")).to_contain_text("view")
        # A saved view shows its query and columns.
        page.click("#tables >> text=first_ten")
        expect(page.locator("#view-query")).to_have_text(
            "SELECT id, text FROM shop.items WHERE id < 10")
        expect(page.locator("#view-schema")).to_contain_text("text")
        c.shot("view")
        page.go_back()
        expect(page.locator("#tables tbody tr", has_text="items").first).to_be_visible()
        page.fill("#table-search", "nothing-like-this")
        expect(page.locator("#tables tbody")).to_contain_text("No table matches")
        page.fill("#table-search", "ITE")
        expect(page.locator("#tables tbody tr")).to_have_count(1)
        c.shot("tables")
        page.click("#tables >> text=items")

        # Overview.
        card = lambda label: page.locator(f"#overview .card:has(.label:text-is('{label}')) .value")
        expect(card("Rows")).to_have_text(f"{ROWS}")
        expect(card("Version")).to_have_text("3")
        expect(card("Indexes")).to_have_text("1")
        expect(page.locator("#tab-panel")).to_contain_text("first")
        c.shot("overview")

        # Schema: the vector column is badged with its dimension.
        page.click("#tab-schema")
        expect(page.locator("#schema")).to_contain_text(f"vector, {DIM} dims")

        # Data: server-side pages of 50, a filter, an API error shown inline, a tag.
        page.click("#tab-data")
        expect(page.locator("#page-info")).to_have_text(f"Rows 1–50 of {ROWS}")
        page.click("#next")
        expect(page.locator("#page-info")).to_have_text(f"Rows 51–100 of {ROWS}")
        expect(page.locator("#data-grid tbody tr").first.locator("td").first).to_have_text("50")
        page.fill("#filter", "id >= 200 AND text LIKE '%blue%'")
        page.press("#filter", "Enter")
        expect(page.locator("#page-info")).to_have_text("Rows 1–7 of 7")
        with c.refusals_expected():
            page.fill("#filter", "no_such_column > 1")
            page.click("#apply")
            expect(page.locator("#data-status .error")).to_contain_text("no_such_column")
        page.fill("#filter", "")
        page.click("#apply")
        expect(page.locator("#page-info")).to_have_text(f"Rows 1–50 of {ROWS}")
        # A long text is folded.
        expect(page.locator("#data-grid details.fold")).to_have_count(1)
        c.shot("data")

        # Images inline: a binary column's from the answer, a blob column's through the blob
        # endpoint (fetched with the key); a null blob stays null.
        c.open("#/table/shop%24media/data")
        expect(page.locator("#data-grid img.cell-img")).to_have_count(7)
        page.wait_for_function(
            "[...document.querySelectorAll('#data-grid img.cell-img')].every(i => i.naturalWidth === 24)")
        c.shot("images")
        c.open("#/table/shop%24items/search")

        # Search: rows like row 5 (row 5 itself comes first), then full-text.
        page.click("#tab-search")
        page.fill("#like-row", "id = 5")
        page.click("#load-row")
        expect(page.locator("#query-vector")).not_to_have_value("")
        page.fill("#k", "3")
        page.click("#run-search")
        first = page.locator("#search-results tbody tr").first
        expect(first.locator("td").first).to_have_text("5")
        expect(page.locator("#search-results tbody tr")).to_have_count(3)
        expect(page.locator("#as-curl")).to_contain_text("/v1/table/shop$items/query")
        expect(page.locator("#as-python")).to_contain_text('db.open_table("items")')
        page.click("#explain")
        expect(page.locator("#plan")).to_be_visible()
        page.select_option("#search-mode", "fts")
        page.fill("#fts-text", "amber")
        page.fill("#k", "100")
        page.click("#run-search")
        expect(page.locator("#search-status")).to_contain_text(f"{ROWS // 4} rows")
        expect(page.locator("#search-results tbody")).not_to_contain_text("red")
        c.shot("search")

        # Versions: operations, the tag, tag a version, restore (typing the name).
        page.click("#tab-versions")
        expect(page.locator("#versions")).to_contain_text("CreateIndex")
        expect(page.locator("#versions tr[data-version='1']")).to_contain_text("tag first")
        page.locator("#versions tr[data-version='2'] .tag-version").click()
        page.fill("dialog input", "indexed")
        page.click("dialog button[type=submit]")
        expect(page.locator("#versions tr[data-version='2']")).to_contain_text("tag indexed")
        latest = server.post("/v1/table/shop$items/describe")["version"]
        c.shot("versions")
        page.locator("#versions tr[data-version='2'] .restore").click()
        expect(page.locator("dialog button.danger")).to_be_disabled()
        page.fill("dialog input", "items")
        page.click("dialog button.danger")
        expect(page.locator(f"#versions tr[data-version='{latest + 1}']")).to_contain_text("Restore")
        assert server.post("/v1/table/shop$items/describe")["version"] == latest + 1

        # Indexes: build a vector index from the page; then start an optimize.
        page.click("#tab-indexes")
        expect(page.locator("#indexes")).to_contain_text("text_idx")
        page.select_option("#index-column", "id")
        page.select_option("#index-type", "BTREE")
        page.click("#create-index")
        expect(page.locator("#indexes")).to_contain_text("id_idx")
        c.shot("indexes")
        page.click("#optimize")
        link = page.locator("#tab-panel a[href^='#/jobs/']")
        expect(link).to_be_visible()
        optimize_job = link.inner_text()

        # Jobs: a backfill's bar reaches 100% with its row errors; the optimize is cancelled.
        server.post("/v1/table/shop$items/add_columns", {"new_columns": [
            {"name": "checked", "virtual_column": nulling_column("misbehave", "fail_negative", ["id"])}]})
        server.post("/v1/table/shop$items/update", {"updates": [["id", "id - 3"]], "predicate": "id < 3"})
        backfill = server.post("/v1/table/shop$items/backfill_column", {"column": "checked"})["job_id"]
        page.click("nav >> text=Jobs")
        row = page.locator(f"#jobs tr[data-job='{backfill}']")
        expect(row.locator("[role=progressbar]")).to_have_attribute("aria-valuenow", "100", timeout=60_000)
        expect(row).to_have_attribute("data-state", "DONE")
        opt = page.locator(f"#jobs tr[data-job='{optimize_job}']")
        expect(opt).to_have_attribute("data-state", "IN_PROGRESS")
        c.shot("jobs")
        opt.locator("button.cancel").click()
        expect(opt).to_have_attribute("data-state", "CANCELLED")
        # A slow backfill (0.17 s a row measured here: ~40 s for the table) paused, resumed and
        # cancelled from its row.
        server.post("/v1/table/shop$items/add_columns", {"new_columns": [
            {"name": "slow", "virtual_column": virtual_column("misbehave", "slow_double", ["id"],
                                                              {"spin": "500000000"})}]})
        slow = server.post("/v1/table/shop$items/backfill_column",
                           {"column": "slow", "checkpoint_size": 1, "max_checkpoint_size": 1})["job_id"]
        slow_row = page.locator(f"#jobs tr[data-job='{slow}']")
        expect(slow_row).to_have_attribute("data-state", "IN_PROGRESS")
        slow_row.locator("button.pause").click()
        expect(slow_row).to_have_attribute("data-state", "PAUSED", timeout=30_000)
        slow_row.locator("button.resume").click()
        expect(slow_row).to_have_attribute("data-state", "IN_PROGRESS", timeout=30_000)
        slow_row.locator("button.cancel").click()
        expect(slow_row).to_have_attribute("data-state", "CANCELLED", timeout=30_000)
        page.click(f"#jobs >> text={backfill}")
        expect(page.locator("#events")).to_contain_text("done")
        expect(page.locator("#row-errors")).to_contain_text("negative value")
        c.shot("job")
        page.click("text=← All jobs")

        # Server: figures from /metrics, refreshed.
        page.click("nav >> text=Server")
        expect(page.locator("#routes")).to_contain_text("/v1/table/{id}/query")
        expect(page.locator("#server-cards")).not_to_contain_text("…", timeout=10_000)
        c.shot("server")

        # The schema badges the virtual column with its UDF and backfill state.
        c.open("#/table/shop%24items/schema")
        expect(page.locator("#schema")).to_contain_text("virtual: fail_negative")
        expect(page.locator("#schema")).to_contain_text("backfill done")
        c.shot("schema")

        # The version picker reads older versions (before the virtual column), by number or
        # tag; the column picker hides a column.
        c.open("#/table/shop%24items/data/1")
        expect(page.locator("#ref")).to_have_value("1")
        expect(page.locator("#page-info")).to_have_text(f"Rows 1–50 of {ROWS}")
        expect(page.locator("#data-grid thead")).not_to_contain_text("checked")
        page.select_option("#ref", "main")
        expect(page.locator("#data-grid thead")).to_contain_text("checked")
        page.select_option("#ref", "tag:indexed")
        expect(page.locator("#data-grid thead")).not_to_contain_text("checked")
        page.click("#column-picker summary")
        page.uncheck("#column-picker input[value='vector']")
        expect(page.locator("#data-grid thead")).not_to_contain_text("vector")
        expect(page.locator("#data-grid thead")).to_contain_text("text")

        # Narrow window: still usable (nothing hidden sideways on the tables page).
        page.set_viewport_size({"width": 420, "height": 800})
        c.open("#/tables/shop")
        expect(page.locator("#tables")).to_contain_text("items")
        assert page.evaluate("document.documentElement.scrollWidth") <= 430
        c.shot("narrow")

        # Keyboard: tabs move with the arrow keys.
        page.set_viewport_size({"width": 1280, "height": 800})
        c.open("#/table/shop%24items/overview")
        page.focus("#tab-overview")
        page.keyboard.press("ArrowRight")
        expect(page.locator("#tab-schema")).to_have_attribute("aria-selected", "true")
    finally:
        c.close()


def test_a_read_only_key_sees_no_write_buttons_and_a_refused_key_asks_again(server, browser, shots):
    try:
        server.post("/v1/table/shop$items/describe")
    except Exception:
        make_table(server)
    key = server.new_key("default", "read")
    # In the dark theme (the page follows the system setting).
    c = Console(browser, server.base, shots, color_scheme="dark")
    page = c.page
    try:
        c.open("#/table/shop%24items/indexes")
        c.sign_in(key)
        expect(page.locator("#role")).to_have_text("read")
        expect(page.locator("#indexes")).to_contain_text("text_idx")
        expect(page.locator("#create-index")).to_have_count(0)
        expect(page.locator("#optimize")).to_have_count(0)
        c.open("#/table/shop%24items/versions")
        expect(page.locator("#versions tbody tr").first).to_be_visible()
        expect(page.locator("#versions .restore")).to_have_count(0)
        expect(page.locator("#versions .tag-version")).to_have_count(0)
        c.open("#/jobs")
        expect(page.locator("#jobs tbody tr").first).to_be_visible()
        expect(page.locator("#jobs button")).to_have_count(0)
        c.shot("read-only-dark")
        # The key stops working (revoked): the next call asks for a key again.
        with c.refusals_expected():
            page.evaluate("sessionStorage.setItem('lancet.key', 'revoked-key')")
            page.click("nav >> text=Tables")
            expect(page.locator("#sign-in .error")).to_contain_text("sign in again")
    finally:
        c.close()


def test_the_operator_sees_tenants_usage_and_audit(browser, shots):
    """An operator key opens the operator's view: tenants (suspend, resume, keys), usage by
    hour, audit search and chain verification; a tenant's key still sees its tenant's."""
    operator = "console-operator-key"
    with tempfile.TemporaryDirectory() as d:
        s = Lancet(d, env={"LANCET_OPERATOR_KEY": operator, "LANCET_USAGE_FLUSH": "200ms"})
        env = {**os.environ, "LANCET_URL": s.base, "LANCET_OPERATOR_KEY": operator}
        run = lambda *a: json.loads(subprocess.run([s.binary, "admin", *a], env=env, check=True,
                                                   capture_output=True, text=True).stdout)
        run("tenants", "create", "acme", "--settings", '{"quota": {"tables": 5}}')
        key = run("keys", "create", "acme", "--role", "admin")
        s.post("/v1/namespace/shop/create", key=key["key"])
        req = urllib.request.Request(
            s.base + "/v1/table/shop$t/create", data=ipc_stream(pa.table({"id": [1, 2, 3]})), method="POST",
            headers={"x-api-key": key["key"], "content-type": "application/vnd.apache.arrow.stream"})
        urllib.request.urlopen(req).read()
        time.sleep(0.5)  # one usage flush
        c = Console(browser, s.base, shots)
        page = c.page
        try:
            c.open()
            with c.refusals_expected():  # /v1/whoami refuses the operator's key first
                c.sign_in(operator)
                expect(page.locator("#role")).to_have_text("operator")
            expect(page.locator("nav >> text=Tables")).to_be_hidden()
            row = page.locator("#tenants tr[data-tenant=acme]")
            expect(row).to_contain_text("active")
            expect(row).to_contain_text("5 tables")
            row.locator("button.suspend").click()
            page.click("dialog button.danger")
            expect(row).to_contain_text("suspended")
            c.shot("operator-tenants")
            row.locator("button.resume").click()
            expect(row).to_contain_text("active")
            row.locator("a").click()
            expect(page.locator(f"#keys tr[data-key={key['id']}]")).to_contain_text("active")
            page.click("nav >> text=Usage")
            expect(page.locator("#usage tbody")).to_contain_text("acme")
            page.click("nav >> text=Audit")
            expect(page.locator("#audit tbody")).to_contain_text("/v1/admin/tenants/{tenant}/suspend")
            page.fill("#audit-tenant", "acme")
            page.click("#audit-search button[type=submit]")
            expect(page.locator("#audit tbody")).to_contain_text("POST /v1/table/{id}/create")
            c.shot("operator-audit")
            page.click("#audit-verify")
            expect(page.locator("#toasts")).to_contain_text("every chain intact")
            assert c.problems == [], c.problems
        finally:
            c.close()
            s.stop()
