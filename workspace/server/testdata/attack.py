# The containment test's attacker (contain_e2e_test.go): run inside a
# workspace, as its command and through `ws exec`, it looks for what it must
# not reach and prints one JSON report on its last line. It is told where
# things are (ATTACK_*): knowing a path or a port is not supposed to help.
import glob
import json
import os
import re
import socket
import time
import urllib.request

API = os.environ["ATTACK_API"]            # http://127.0.0.1:PORT of the server
DATA = os.environ["ATTACK_DATA"]          # the server's --data
# Strings that must stay out of reach, each written backwards (so that this
# variable, in the attacker's own environment, is not a finding).
CANARIES = [c[::-1] for c in os.environ["ATTACK_CANARIES"].split(",")]
OWN_PORT = int(os.environ.get("PORT", "0"))
TOKEN = re.compile(rb"gws(?:ess)?_[A-Za-z0-9]+_[A-Za-z0-9_-]{16,}")
BUDGET = float(os.environ.get("ATTACK_BUDGET", "6"))

report = {"files_read": 0, "names_seen": 0, "tokens": [], "whoami": [], "canaries": [],
          "open_ports": [], "ports_scanned": 0, "bob_proxy": []}
tokens = set()


def look(where, data):
    for i, c in enumerate(CANARIES):
        if c.encode() in data:
            report["canaries"].append({"canary": str(i), "where": where})
    for m in TOKEN.findall(data):
        tokens.add(m.decode())


def read(path, limit=4 << 20):
    try:
        with open(path, "rb") as f:
            data = f.read(limit)
    except OSError:
        return
    report["files_read"] += 1
    look(path, data)


def walk(root, deadline, read_all):
    for d, dirs, files in os.walk(root, onerror=lambda e: None):
        if time.time() > deadline:
            return
        dirs[:] = [x for x in dirs if os.path.join(d, x) not in ("/proc", "/sys", "/dev", "/usr")]
        for f in files:
            report["names_seen"] += 1
            p = os.path.join(d, f)
            if read_all or "admin-token" in f or f.startswith("workspaces.db") or f.endswith((".pid", ".log", ".txt")):
                read(p)


def search_files():
    for p in [os.path.join(DATA, "admin-token"), os.path.join(DATA, "workspaces.db"), "../../admin-token"]:
        read(p)
    for pattern in ["*", "*/*", "*/*/*", "*/*/*/*"]:
        for p in glob.glob(os.path.join(DATA, pattern)):
            read(p)
    for p in glob.glob("../*/*") + glob.glob("../../*"):
        read(p)
    start = time.time()
    for root in [DATA, os.path.dirname(DATA), "/tmp", "/var/tmp", "/dev/shm", "/root", "/home", "/run"]:
        walk(root, start + BUDGET / 2, True)
    walk("/", start + BUDGET, False)


def search_processes():
    look("own environment", b"\0".join(k.encode() + b"=" + v.encode() for k, v in os.environ.items()))
    for d in glob.glob("/proc/[0-9]*"):
        for f in ("environ", "cmdline"):
            read(os.path.join(d, f))


def ports_from_pidfiles():
    ports = set()
    for p in glob.glob(os.path.join(DATA, "run", "*.pid")):
        try:
            ports.add(int(open(p).read().split()[2]))
        except (OSError, IndexError, ValueError):
            pass
    return ports


def answers(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.settimeout(0.5)
            s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
            try:
                return s.recv(64).decode("latin-1").split("\r\n")[0] or "(open, silent)"
            except OSError:
                return "(open, silent)"
    except OSError:
        return None


def scan_ports():
    candidates = ports_from_pidfiles()
    for port in range(1, 65536):
        if port == OWN_PORT:
            continue
        report["ports_scanned"] += 1
        s = socket.socket()
        s.settimeout(0.2)
        try:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                candidates.add(port)
        finally:
            s.close()
    candidates.discard(OWN_PORT)
    for port in sorted(candidates):
        a = answers(port)
        if a is not None:
            report["open_ports"].append({"port": port, "answer": a})


def call(path, token):
    req = urllib.request.Request(API + path, headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.status, r.read(300).decode("latin-1")
    except urllib.error.HTTPError as e:
        return e.code, e.read(300).decode("latin-1")
    except OSError as e:
        return None, str(e)


def try_tokens():
    report["tokens"] = sorted(tokens)
    bob = os.environ.get("ATTACK_BOB_ID", "")
    for t in sorted(tokens):
        status, body = call("/v1/whoami", t)
        report["whoami"].append({"token": t[:12], "status": status, "body": body})
        if bob:
            status, body = call("/w/%s/" % bob, t)
            report["bob_proxy"].append({"token": t[:12], "status": status, "body": body[:80]})


search_files()
search_processes()
scan_ports()
try_tokens()
print(json.dumps(report))
