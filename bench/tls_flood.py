#!/usr/bin/env python3
"""Latency of requests on an established HTTPS connection while new TLS connections flood in.

Starts vlmd (its built-in demo model) with a fresh RSA-2048 certificate, then times GET /health
on one kept-alive HTTPS connection: first alone, then while FLOODS `openssl s_time -new`
processes open connections and run full handshakes back to back (each costs the server a
key exchange and an RSA signature). Prints the P50 and P99 of both runs and their ratio, as JSON.

usage: bench/tls_flood.py VLMD_BINARY [--floods 2] [--requests 2000] [--port 18443]
(needs the openssl command line tool)
"""
import argparse, http.client, json, os, ssl, subprocess, tempfile, time


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100.0 * len(s)))]


def time_requests(port, n):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    conn.request("GET", "/health")  # the handshake, not timed
    conn.getresponse().read()
    ms = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("GET", "/health")
        r = conn.getresponse()
        r.read()
        ms.append((time.perf_counter() - t) * 1000.0)
        if r.status != 200:
            raise SystemExit("GET /health: %d" % r.status)
    conn.close()
    return ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vlmd")
    ap.add_argument("--floods", type=int, default=2)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--port", type=int, default=18443)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
        server = subprocess.Popen([a.vlmd, "--port", str(a.port), "--tls-cert", cert, "--tls-key", key,
                                   "--max-connections-per-address", "0"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(300):
                try:
                    time_requests(a.port, 1)
                    break
                except OSError:
                    time.sleep(0.1)
            alone = time_requests(a.port, a.requests)
            floods = [subprocess.Popen(["openssl", "s_time", "-connect", "127.0.0.1:%d" % a.port, "-new",
                                        "-time", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                      for _ in range(a.floods)]
            time.sleep(1.0)
            try:
                flooded = time_requests(a.port, a.requests)
            finally:
                for f in floods:
                    f.kill()
        finally:
            server.terminate()
            server.wait()
    out = {"requests": a.requests, "floods": a.floods}
    for name, ms in (("alone", alone), ("flooded", flooded)):
        out[name] = {"p50_ms": round(percentile(ms, 50), 3), "p99_ms": round(percentile(ms, 99), 3)}
    out["p50_ratio"] = round(out["flooded"]["p50_ms"] / out["alone"]["p50_ms"], 2)
    out["p99_ratio"] = round(out["flooded"]["p99_ms"] / out["alone"]["p99_ms"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
