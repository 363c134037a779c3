#!/usr/bin/env python3
"""Inter-token gaps of a streaming request while another client sends a new image.

Measures what chunked prefill and tile-by-tile encoding buy: a running stream should keep
receiving tokens while the server encodes someone else's image. Prints the stream's largest gap
between two SSE events and the image request's latency, as JSON.

usage: bench/stream_gaps.py URL IMAGE.ppm [--max-tokens N] [--delay S]
(IMAGE must be a binary PPM: its last pixel byte is changed so that the image is never a cache hit)
"""
import argparse, base64, http.client, json, threading, time, urllib.parse


def post(url, body):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    conn.request("POST", "/v1/vlm/invoke", json.dumps(body), {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("image")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--delay", type=float, default=1.0, help="seconds before the image request")
    a = ap.parse_args()
    data = bytearray(open(a.image, "rb").read())
    if not data.startswith(b"P6"):
        raise SystemExit("IMAGE must be a binary PPM (P6)")
    # A distinct image each run (one pixel byte changes the pixel hash): never a cache hit.
    data[-1] = (data[-1] + 1 + int(time.time() * 1000) % 254) % 256
    image = base64.b64encode(bytes(data)).decode()
    result = {}

    def image_request():
        time.sleep(a.delay)
        t0 = time.time()
        body = {"prompt": "Describe the image.", "max_tokens": 4, "image_base64": image}
        conn, r = post(a.url, body)
        r.read()
        result["image_request_ms"] = (time.time() - t0) * 1000
        result["image_status"] = r.status

    t = threading.Thread(target=image_request)
    conn, r = post(a.url, {"prompt": "Tell a long story.", "max_tokens": a.max_tokens,
                           "stream": True, "temperature": 0})
    t.start()
    times = []
    for line in r:
        if line.startswith(b"data:"):
            times.append(time.time())
    t.join()
    gaps = [b - a_ for a_, b in zip(times, times[1:])]
    result["stream_events"] = len(times)
    result["max_gap_ms"] = max(gaps) * 1000 if gaps else 0
    result["median_gap_ms"] = sorted(gaps)[len(gaps) // 2] * 1000 if gaps else 0
    print(json.dumps(result))


if __name__ == "__main__":
    main()
