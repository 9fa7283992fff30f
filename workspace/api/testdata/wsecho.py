# A WebSocket echo server on 127.0.0.1:$PORT in the standard library only,
# for the proxy test: it answers the handshake and echoes text frames.
import base64, hashlib, os, socket, struct, threading

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

def frames(conn):
    while True:
        head = conn.recv(2, socket.MSG_WAITALL)
        if len(head) < 2:
            return
        n = head[1] & 0x7F
        if n == 126:
            n = struct.unpack(">H", conn.recv(2, socket.MSG_WAITALL))[0]
        elif n == 127:
            n = struct.unpack(">Q", conn.recv(8, socket.MSG_WAITALL))[0]
        mask = conn.recv(4, socket.MSG_WAITALL) if head[1] & 0x80 else b"\0\0\0\0"
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(conn.recv(n, socket.MSG_WAITALL)))
        if head[0] & 0x0F == 8:
            return
        yield data

def serve(conn):
    req = b""
    while b"\r\n\r\n" not in req:
        chunk = conn.recv(4096)
        if not chunk:
            return
        req += chunk
    key = b""
    for line in req.split(b"\r\n"):
        if line.lower().startswith(b"sec-websocket-key:"):
            key = line.split(b":", 1)[1].strip()
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    for data in frames(conn):
        reply = b"echo: " + data
        conn.sendall(bytes([0x81, len(reply)]) + reply)
    conn.close()

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["PORT"])))
s.listen()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
