"""Schema-driven HTTP fuzzing: schemathesis generates requests for every operation of the live
server's own /v1/openapi.json (valid and schema-violating bodies, query and path parameters,
Arrow bodies from fuzz_hooks.py) and checks every answer: no 5xx, the documented status codes
and content types, and bodies that match the documented schemas (the spec's JSON error shape for
every 4xx). Bounded: LANCET_FUZZ_EXAMPLES cases per operation and phase (default 5; try 100),
seed LANCET_FUZZ_SEED (default fixed, so a run is repeatable).
"""
import json
import os
import subprocess
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def test_schemathesis_finds_no_server_error_or_schema_break(lancet, tmp_path):
    req = urllib.request.Request(lancet.base + "/v1/openapi.json",
                                 headers={"authorization": f"Bearer {lancet.key}"})
    with urllib.request.urlopen(req) as r:
        doc = json.loads(r.read())
    assert doc["openapi"].startswith("3.1"), doc["openapi"]
    schema = tmp_path / "openapi.json"
    schema.write_text(json.dumps(doc))
    stats = tmp_path / "stats.json"
    examples = os.environ.get("LANCET_FUZZ_EXAMPLES", "5")
    seed = os.environ.get("LANCET_FUZZ_SEED", "20240615")
    cmd = [
        os.path.join(os.path.dirname(sys.executable), "schemathesis"), "run", str(schema),
        "--url", lancet.base,
        "--header", f"Authorization: Bearer {lancet.key}",
        "--checks", CHECKS,
        "--phases", os.environ.get("LANCET_FUZZ_PHASES", "examples,coverage,fuzzing"),
        "--mode", "all",
        "--max-examples", examples,
        "--seed", seed,
        # One worker: hypothesis parses lambdas with `ast` while generating, which CPython 3.11
        # does not do safely from two threads at once.
        "--workers", "1",
        "--suppress-health-check", "all",
        "--request-timeout", "60",
        "--no-color",
    ]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "fuzz_hooks",
        "PYTHONPATH": HERE + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "LANCET_FUZZ_BASE": lancet.base,
        "LANCET_FUZZ_KEY": lancet.key,
        "LANCET_FUZZ_STATS": str(stats),
    }
    # cwd: the CLI keeps its state in ./.schemathesis
    run = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=3600)
    output = run.stdout + run.stderr
    counts = json.loads(stats.read_text()) if stats.exists() else {"statuses": {}}
    total = sum(counts["statuses"].values())
    fives = {s: n for s, n in counts["statuses"].items() if s.startswith("5")}
    report = f"schemathesis sent {total} requests (seed {seed}, {examples} examples): {counts['statuses']}"
    print(report)
    with open(os.environ.get("LANCET_FUZZ_REPORT", os.devnull), "w") as f:
        f.write(report + "\n" + output)
    assert lancet.proc.poll() is None, "the server died during fuzzing\n" + output[-20000:]
    assert run.returncode == 0, f"{report}\n{output[-20000:]}"
    assert not fives, f"{report}\n{output[-20000:]}"
    assert total > 200, f"too few requests: {report}\n{output[-5000:]}"
