"""Drives headless Chromium over the DevTools protocol (a minimal WebSocket client on the standard
library) for serve_page_test.sh: opens the chat page of `hypic serve` with a question, waits until the
streamed reply has finished, checks what the page shows, and optionally saves a screenshot.

Usage: serve_page_client.py DEVTOOLS_PORT PAGE_URL [SCREENSHOT.png]"""
import base64
import json
import os
import socket
import struct
import sys
import time
import urllib.request

devtools_port, page_url = int(sys.argv[1]), sys.argv[2]
shot = sys.argv[3] if len(sys.argv) > 3 else None


class WebSocket:
    def __init__(self, url):
        host_port, path = url[len("ws://"):].split("/", 1)
        host, port = host_port.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, host_port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise AssertionError("DevTools refused the WebSocket: %r" % head)
        self.next_id = 0

    def _read(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise AssertionError("DevTools closed the connection")
            out += chunk
        return out

    def send(self, method, **params):
        self.next_id += 1
        data = json.dumps({"id": self.next_id, "method": method, "params": params}).encode()
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))
        while True:  # events are skipped until the answer to this command
            msg = json.loads(self.receive())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise AssertionError("%s: %s" % (method, msg["error"]))
                return msg["result"]

    def receive(self):
        payload = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            data = self._read(n)
            if b0 & 0x0F in (0x1, 0x0):
                payload += data
                if b0 & 0x80:
                    return payload.decode()


def evaluate(ws, expr):
    return ws.send("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get("value")


req = urllib.request.Request("http://127.0.0.1:%d/json/new?about:blank" % devtools_port, method="PUT")
target = json.loads(urllib.request.urlopen(req, timeout=30).read())
ws = WebSocket(target["webSocketDebuggerUrl"])
ws.send("Emulation.setDeviceMetricsOverride", width=900, height=560, deviceScaleFactor=1, mobile=False)
ws.send("Page.navigate", url=page_url)
deadline = time.time() + 90
while time.time() < deadline and evaluate(ws, "document.body ? document.body.dataset.replies || '' : ''") != "1":
    time.sleep(0.1)
if evaluate(ws, "document.body.dataset.replies") != "1":
    raise AssertionError("the streamed reply did not finish: " + str(evaluate(ws, "document.body.innerText")))
text = evaluate(ws, "document.getElementById('log').innerText")
print(text)
for needle in ["What is the capital of France?", "TTFT ", " ms (engine ", "blocks: ", "generated"]:
    if needle not in text:
        raise AssertionError("the page does not show %r" % needle)
if "miss" not in text and "hit" not in text:
    raise AssertionError("the page shows no per-block cache result")
if shot:
    png = ws.send("Page.captureScreenshot", format="png")["data"]
    with open(shot, "wb") as f:
        f.write(base64.b64decode(png))
print("ok - the page streamed a reply and showed its TTFT and block hits")
