"""Registered Functions with more than one file, through the unmodified lancedb 0.40 client:
modules shipped with `code=[...]` (a python_bundle artifact) and pure-Python pip packages
fetched from the package index the server is configured with (`LANCET_PACKAGE_INDEX`): here a
PEP 503 index served on loopback from wheels this test builds. Values are checked against the
same code run here."""
import base64
import hashlib
import http.server
import io
import json
import os
import sys
import tempfile
import threading
import zipfile

import pyarrow as pa
import pytest
from lancedb import col, udf

from conftest import Lancet

TINYDEP_10 = "TABLE = {'and': 'n'}\n"
TINYDEP_11 = "import gettext, zoneinfo  # preloaded stdlib\nTABLE = {'and': '&', 'the': ''}\n"
TINYSLUG = """import pkgutil
from importlib.metadata import version
from tinydep import TABLE

assert version("tinyslug") == "1.0", "its own metadata travels with it"

SEP = pkgutil.get_data(__name__, "sep.txt").decode()


def slug(text):
    words = (TABLE.get(w, w) for w in text.lower().split())
    return SEP.join(w for w in words if w)
"""


def wheel(name, version, files, requires=(), tag="py3-none-any"):
    """A wheel's file name and bytes (PEP 427 layout, RECORD without hashes)."""
    dist = f"{name}-{version}.dist-info"
    meta = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    entries = {**files, f"{dist}/METADATA": "\n".join(meta) + "\n\n",
               f"{dist}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n",
               f"{dist}/RECORD": ""}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, text in entries.items():
            z.writestr(path, text)
    return f"{name}-{version}-{tag}.whl", buf.getvalue()


@pytest.fixture(scope="module")
def index():
    """A PEP 503 index on loopback: /simple/<project>/ pages linking /files/<wheel>#sha256=."""
    wheels = [
        wheel("tinydep", "1.0", {"tinydep/__init__.py": TINYDEP_10}),
        wheel("tinydep", "1.1", {"tinydep/__init__.py": TINYDEP_11}),
        wheel("tinyslug", "1.0", {"tinyslug/__init__.py": TINYSLUG, "tinyslug/sep.txt": "-"},
              requires=["tinydep>=1.0", 'neverneeded; python_version < "3.0"',
                        'extrasonly; extra == "fast"']),
        wheel("tinyslug", "2.0", {"tinyslug/__init__.py": "def slug(text):\n    return 'v2'\n"},
              requires=["tinydep>=1.0"]),
        wheel("nativepkg", "1.0", {"nativepkg/__init__.py": ""},
              tag="cp314-cp314-manylinux_2_17_x86_64"),
    ]
    root = tempfile.mkdtemp()
    os.makedirs(f"{root}/files")
    pages = {}
    for filename, data in wheels:
        with open(f"{root}/files/{filename}", "wb") as f:
            f.write(data)
        digest = hashlib.sha256(data).hexdigest()
        pages.setdefault(filename.split("-")[0], []).append(
            f'<a href="../../files/{filename}#sha256={digest}">{filename}</a>')
    for project, links in pages.items():
        os.makedirs(f"{root}/simple/{project}")
        with open(f"{root}/simple/{project}/index.html", "w") as f:
            f.write("<html><body>\n" + "<br/>\n".join(links) + "\n</body></html>\n")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=root, **kw)

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/simple/"
    httpd.shutdown()


@pytest.fixture()
def server(index):
    with tempfile.TemporaryDirectory() as d:
        s = Lancet(d, env={"LANCET_PACKAGE_INDEX": index, "LANCET_UDF_TIMEOUT_MS": "5000"})
        try:
            yield s
        finally:
            s.stop()



def titles_table(db, name):
    titles = ["The Cat and the Hat", "Rain AND Snow", "plain"]
    schema = pa.schema([pa.field("title", pa.string(), nullable=False)])
    return db.create_table(name, pa.table({"title": titles}, schema=schema))


def computed(db, fv, table, column):
    """A table of titles with `column` = fv(title), refreshed: {title: value}."""
    t = titles_table(db, table)
    t.add_columns({column: fv(title=col("title"))})
    result = t.refresh_column_async(column).wait()
    assert result.rows_failed == 0, [e.error_message for e in t.function_errors(column=column).records]
    assert result.rows_assigned == 3
    return {r["title"]: r[column] for r in t.search().limit(100).to_arrow().to_pylist()}


def local_slug(text, table):
    words = (table.get(w, w) for w in text.lower().split())
    return "-".join(w for w in words if w)


@udf(pip=["tinyslug<2"])
def slugged(title: str) -> str:
    import tinyslug
    return tinyslug.slug(title)


def test_pip_packages_and_their_dependencies_come_from_the_index(server):
    db = server.lancedb()
    fv = db.create_function(slugged)
    assert fv.metadata["pip"] == "tinyslug==1.0 tinydep==1.1"
    # tinyslug<2 picks 1.0 (2.0 would give "v2"); its dependency tinydep resolves to the newest
    # (1.1); the marker-only and extra-only requirements are not fetched (they do not exist).
    got = computed(db, fv, "titles", "slug")
    table = {"and": "&", "the": ""}
    assert got == {title: local_slug(title, table) for title in got}, got
    # The same registration again answers the same version.
    assert db.create_function(slugged).version == fv.version
    # The packages' files live beside the version's record, not in it, and go with it.
    stored = stored_files(server)
    assert [p for p in stored if p.endswith(".files")], stored
    records = [json.loads(data) for p, data in stored.items() if p.endswith(".json")]
    assert len(records) == 1 and "files" not in records[0], records
    assert records[0]["files_object"] in [os.path.basename(p) for p in stored]
    assert db.drop_function("slugged", version=fv.version) is True
    assert not [p for p in stored_files(server) if p.endswith(".files")]


def stored_files(server):
    out = {}
    for root, _, files in os.walk(os.path.join(server.data, "_functions")):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                out[os.path.join(root, f)] = fh.read()
    return out


def test_what_the_index_cannot_give_is_refused_by_name(server):
    db = server.lancedb()

    @udf(pip=["nativepkg"])
    def native(x: int) -> int:
        return x

    with pytest.raises(Exception, match="nativepkg.*no pure-Python wheel"):
        db.create_function(native)

    @udf(pip=["notonindex==1.0"])
    def missing(x: int) -> int:
        return x

    with pytest.raises(Exception, match="notonindex"):
        db.create_function(missing)

    @udf(pip=["tinyslug==1.0", "tinydep<1.0"])
    def clash(x: int) -> int:
        return x

    # tinydep<1.0 exists nowhere on the index: refused naming it.
    with pytest.raises(Exception, match="tinydep"):
        db.create_function(clash)


# A package of the test's own, importable here, shipped with `code=`.
_HELPERS = tempfile.mkdtemp()
os.makedirs(f"{_HELPERS}/titlehelpers")
with open(f"{_HELPERS}/titlehelpers/__init__.py", "w") as _f:
    _f.write("from .words import shout\n")
with open(f"{_HELPERS}/titlehelpers/words.py", "w") as _f:
    _f.write("def shout(text):\n    return text.upper() + '!'\n")
sys.path.insert(0, _HELPERS)
import titlehelpers  # noqa: E402

sys.path.remove(_HELPERS)


@udf(code=[titlehelpers])
def loud(title: str) -> str:
    return titlehelpers.shout(title)


def test_modules_shipped_with_code_are_importable(server):
    db = server.lancedb()
    got = computed(db, db.create_function(loud), "loud", "loud")
    assert got == {title: title.upper() + "!" for title in got}
