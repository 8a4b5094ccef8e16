#!/usr/bin/env python3
"""A FabricMem control-plane client written from the published wire format alone.

It speaks the request framing (magic 0xA4B3C2D1, u64 length = 4 + payload, i32 type, compact
JSON; host byte order), sends a connect request, reads the connect response and the status, and
prints what the server offered. It shares no code with the engine it talks to.

    fabricmem_client.py HOST PORT [CHANNEL_ID]

Prints one line per share-handle entry ("entry va_addr=<n> len=<n> handle_bytes=<n>") and a
final "status <code> entries=<n>". Exits 0 only when the status is 0 and every entry is well
formed (numbers, a 128-byte handle).
"""
import json
import socket
import struct
import sys

FRAME_MAGIC = 0xA4B3C2D1
K_CONNECT, K_STATUS = 1, 3
MAX_LEN = 1 << 20


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"peer closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def send_frame(sock, msg_type, obj):
    payload = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
    sock.sendall(struct.pack("=IQi", FRAME_MAGIC, 4 + len(payload), msg_type) + payload)


def recv_frame(sock):
    magic, length = struct.unpack("=IQ", recv_exact(sock, 12))
    if magic != FRAME_MAGIC:
        raise ValueError(f"bad magic {magic:#x}")
    if not 4 <= length <= MAX_LEN:
        raise ValueError(f"bad length {length}")
    body = recv_exact(sock, length)
    (msg_type,) = struct.unpack("=i", body[:4])
    return msg_type, json.loads(body[4:] or b"{}")


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    channel_id = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1:0"
    with socket.create_connection((host, port), timeout=10) as sock:
        send_frame(sock, K_CONNECT, {"addrs": [], "channel_id": channel_id, "comm_res": "",
                                     "share_handles": [], "timeout": 10000})
        t, resp = recv_frame(sock)
        if t != K_CONNECT:
            raise ValueError(f"expected a connect response, got type {t}")
        if resp.get("channel_id") != channel_id:
            raise ValueError(f"channel_id not echoed: {resp.get('channel_id')!r}")
        t, status = recv_frame(sock)
        if t != K_STATUS:
            raise ValueError(f"expected a status, got type {t}")
        entries = resp.get("share_handles")
        if not isinstance(entries, list):
            entries = []
        ok = True
        for e in entries:
            handle = e.get("share_handle")
            good = (isinstance(e.get("va_addr"), int) and isinstance(e.get("len"), int)
                    and isinstance(handle, list) and len(handle) == 128
                    and all(isinstance(b, int) and 0 <= b <= 255 for b in handle))
            ok &= good
            print(f"entry va_addr={e.get('va_addr')} len={e.get('len')} "
                  f"handle_bytes={len(handle) if isinstance(handle, list) else 'bad'}")
        code = status.get("error_code")
        print(f"status {code} entries={len(entries)}")
        return 0 if code == 0 and ok else 1


if __name__ == "__main__":
    sys.exit(main())
