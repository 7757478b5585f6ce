"""The README's five-minute tour, run as written against a real server.

Every code block the README marks `<!-- tour -->` (shell) or `<!-- tour-file: NAME -->` (a file
the tour asks to save) is taken from the README in order; shell blocks run with bash in a fresh
working directory and a fresh HOME (so the tour's venv is made from scratch, as on a new
machine), with only the server's address replaced. The outputs are then checked for the values
the tour promises."""
import ast
import json
import os
import pathlib
import re
import subprocess
import tempfile

import pytest

from conftest import Lancet

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
MARK = re.compile(r"<!-- tour(?:-file: (?P<file>[\w.\-]+))? -->\n```(?P<lang>\w+)\n(?P<body>.*?)\n```",
                  re.S)


def tour_blocks():
    blocks = [(m["file"], m["lang"], m["body"]) for m in MARK.finditer(README.read_text())]
    assert blocks, "the README marks no tour blocks"
    return blocks


def test_the_tour_blocks_are_marked_as_the_tour_needs():
    kinds = [(f is not None, lang) for f, lang, _ in tour_blocks()]
    # a venv, the tour file, running it, the curl query
    assert kinds == [(False, "sh"), (True, "python"), (False, "sh"), (False, "sh")], kinds


@pytest.fixture()
def server():
    with tempfile.TemporaryDirectory() as d:
        # The tour's key; the tour's Function needs the Python runner the suite already has.
        s = Lancet(d, env={"LANCET_BOOTSTRAP_KEY": "dev-key"})
        try:
            yield s
        finally:
            s.stop()


def run_tour(base):
    outputs = []
    with tempfile.TemporaryDirectory() as work:
        home = os.path.join(work, "home")
        os.mkdir(home)
        env = {**os.environ, "HOME": home,
               # a fresh HOME, but the machine's wheel cache: the tour's pip is not re-downloaded
               "PIP_CACHE_DIR": os.path.join(os.path.expanduser("~"), ".cache", "pip")}
        for name, _lang, body in tour_blocks():
            body = body.replace("http://127.0.0.1:8080", base)
            if name:
                pathlib.Path(work, name).write_text(body + "\n")
                continue
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=work, env=env,
                                  capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, f"tour block failed:\n{body}\n{done.stdout}\n{done.stderr}"
            outputs.append(done.stdout)
    return outputs


def test_the_readme_tour_runs_as_written(server):
    _venv, tour, curl = run_tour(server.base)
    printed = [ast.literal_eval(line) for line in tour.strip().splitlines()]
    filtered, counted, nearest, fts = printed
    assert [r["id"] for r in filtered] == [2, 3]
    assert {r["id"]: r["n_words"] for r in counted} == {1: 8, 2: 6, 3: 5}
    # [1.0, 0.2, 0.0]: row 1 at 0.02, row 2 at 0.06 (squared L2), row 3 far away
    assert [r["id"] for r in nearest] == [1, 2]
    assert [r["id"] for r in fts] == [3]
    answer = json.loads(curl)
    assert answer["num_rows"] == 2
    assert [(r["id"], r["n_words"]) for r in answer["rows"]] == [(1, 8), (2, 6)]
