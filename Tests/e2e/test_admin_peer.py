"""The admin socket checks who connects (SPEC §8, §13): billing-rpc reads each connection's
peer with SO_PEERCRED and refuses any uid outside `admin.allowedUsers` (default: root and its
own user) before reading a byte, answering one JSON-RPC error (-32003) and leaving an audit
trail; every audit row written through the socket records the peer's uid and user name beside
the actor the caller claims.

The refused caller is a real other uid: a system user the suite creates (the stack runs as
root, as CI does). So that the kernel lets it connect at all, the socket's mode is opened for
the duration of the test: what refuses it is then the daemon's own check, not the file mode."""
import json
import os
import pwd
import subprocess
import unittest
import uuid

from harness.billing import RPC_SOCKET, rpc, sql, sql_string, wait_until

INTRUDER = "billing-e2e-peer"
SYSTEM_PYTHON = "/usr/bin/python3"


def intruder_uid():
    try:
        return pwd.getpwnam(INTRUDER).pw_uid
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", INTRUDER],
                       check=True, capture_output=True, timeout=30)
        return pwd.getpwnam(INTRUDER).pw_uid


# Runs as the intruder: connects and reads what the daemon says first (it answers without
# waiting for anything), then tries a mutation anyway and reads any further reply. Prints
# the first line, then "MORE:" and whatever came after it (nothing: the connection is closed).
CLIENT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
first = b""
try:
    while not first.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        first += chunk
except OSError:
    pass
more = b""
try:
    s.sendall(b'{"jsonrpc":"2.0","method":"flags.set","params":{"enforcement":"enforce","actor":"intruder"},"id":1}\n')
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        more += chunk
except OSError:
    pass
sys.stdout.write(first.decode() + "MORE:" + more.decode())
"""


class AdminSocketPeer(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.fail("these tests create a user and switch to it: run the suite as root (CI does)")

    def test_another_uid_is_refused_before_anything_is_read_and_audited(self):
        uid = intruder_uid()
        # Refusals are audited at most once a minute per uid: a row of this uid from within
        # that window is the trail of this attempt (a rerun of the suite finds its own).
        started = "'" + sql("SELECT UTC_TIMESTAMP(3) - INTERVAL 61 SECOND")[0][0] + "'"
        flags_before = rpc("flags.get")["result"]
        mode = os.stat(RPC_SOCKET).st_mode & 0o777
        os.chmod(RPC_SOCKET, 0o666)
        # The other user must also be able to traverse the directories down to the socket
        # (a checkout under a private temporary directory is not): opened for the test only.
        opened = []
        directory = os.path.dirname(os.path.abspath(RPC_SOCKET))
        while True:
            dir_mode = os.stat(directory).st_mode & 0o7777
            if not dir_mode & 0o001:
                os.chmod(directory, dir_mode | 0o001)
                opened.append((directory, dir_mode))
            if directory == "/":
                break
            directory = os.path.dirname(directory)
        try:
            # The system's interpreter: the suite's own may live under root's home, which
            # the other user cannot enter.
            out = subprocess.run([SYSTEM_PYTHON, "-c", CLIENT, RPC_SOCKET], capture_output=True, text=True, timeout=30,
                                 user=uid, group=pwd.getpwuid(uid).pw_gid, extra_groups=[])
        finally:
            os.chmod(RPC_SOCKET, mode)
            for directory, dir_mode in reversed(opened):
                os.chmod(directory, dir_mode)
        self.assertEqual(out.returncode, 0, out.stderr)
        first, _, more = out.stdout.partition("MORE:")
        reply = json.loads(first)
        self.assertEqual(reply["error"]["code"], -32003, reply)
        self.assertIsNone(reply["id"], "answered before the peer sent anything, so no id is echoed")
        self.assertEqual(more, "", "one line, then the connection is closed: the mutation got no answer")
        self.assertEqual(rpc("flags.get")["result"], flags_before, "the refused call changed nothing")
        # Audited by the refused connection's thread once it has closed: wait (bounded).
        self.assertTrue(wait_until(lambda: int(sql(
            f"SELECT COUNT(*) FROM audit_log WHERE action = 'rpc.refused' AND peer_uid = {uid} AND created_at >= {started}")[0][0]) > 0,
            10), "no audit row for the refused peer")
        rows = sql(f"SELECT actor, peer_uid, peer_user FROM audit_log WHERE action = 'rpc.refused' AND peer_uid = {uid} "
                   "ORDER BY id DESC LIMIT 1")
        self.assertEqual(rows, [["billing-rpc", str(uid), INTRUDER]])

    def test_root_is_admitted_and_its_audit_rows_name_the_peer(self):
        actor = f"claims-to-be-alice-{uuid.uuid4().hex[:8]}"
        reply = rpc("users.import", {"users": [{"id": str(uuid.uuid4()), "createdAt": "2026-01-01T00:00:00Z"}],
                                     "actor": actor})
        self.assertIn("result", reply, reply)
        rows = sql(f"SELECT actor, peer_uid, peer_user FROM audit_log WHERE action = 'users.import' AND actor = {sql_string(actor)}")
        self.assertEqual(rows, [[actor, "0", "root"]], "the claimed actor beside the real peer")

if __name__ == "__main__":
    unittest.main()
