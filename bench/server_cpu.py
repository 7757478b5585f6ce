"""Round trip and the server's CPU per request for three calls, one keep-alive connection.

Start a server on a loaded table with `request_bench --hold count --clients 0 --secs 75`
(it prints `server pid PID at BASE`), then:

    python3 bench/server_cpu.py BASE request-bench-key 6 PID

Calls: `GET /healthz`, `POST /v1/table/t/exists` (every layer, the catalog from memory) and
`POST /v1/table/t/count_rows` with a predicate on the indexed `category`. The server's CPU
comes from /proc/PID/stat (user + system), so run nothing else meanwhile.
"""
import http.client
import os
import sys
import time

base, key, secs, pid = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
host, port = base.replace("http://", "").split(":")


def cpu():
    fields = open(f"/proc/{pid}/stat").read().split(") ")[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


conn = http.client.HTTPConnection(host, int(port))
headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
calls = [
    ("healthz", "GET", "/healthz", None),
    ("exists", "POST", "/v1/table/t/exists", b"{}"),
    ("count", "POST", "/v1/table/t/count_rows", b'{"predicate":"category = 3"}'),
]
for name, method, path, body in calls:
    for _ in range(200):
        conn.request(method, path, body=body, headers=headers)
        conn.getresponse().read()
    n, t0, c0 = 0, time.time(), cpu()
    while time.time() - t0 < secs:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        assert response.status == 200, (path, response.status)
        n += 1
    dt, dc = time.time() - t0, cpu() - c0
    print(f"{name}: {n / dt:.0f}/s, {dt / n * 1e6:.0f} us/round trip, server CPU {dc / n * 1e6:.0f} us/req")
