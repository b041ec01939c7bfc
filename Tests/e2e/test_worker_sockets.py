"""How a worker listens, beyond dev-up's own Unix sockets (SPEC §10, §13):

- systemd socket activation (`billing-fcgi@.socket`): the worker serves the socket passed as
  LISTEN_FDS, never unlinks it, stops at once on SIGTERM, and connections that arrive while
  no worker runs wait in the socket's backlog for the next instance (none refused);
- TCP: a worker refuses to listen on TCP unless the nginx hosts are named
  (`server.webServerAddrs` / FCGI_WEB_SERVER_ADDRS), and libfcgi then drops any other peer.

The FastCGI client is libfcgi's own `cgi-fcgi` (Debian libfcgi-bin); the activator is this
test, doing what systemd does: bind, listen, fork, put the socket at descriptor 3, set
LISTEN_PID/LISTEN_FDS, exec."""
import json
import os
import socket
import subprocess
import tempfile
import unittest

from harness.billing import REPO, VAR_DIR, wait_until

BIN_DIR = os.path.dirname(os.environ.get("BILLING_RPC_BINARY", os.path.join(REPO, ".build/release/billing-rpc")))
WORKER = os.path.join(BIN_DIR, "billing-fcgi")
CONFIG = os.path.join(VAR_DIR, "billing.json")
CGI_ENV = {"REQUEST_METHOD": "GET", "REQUEST_URI": "/api/v1/health", "DOCUMENT_URI": "/api/v1/health",
           "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1", "QUERY_STRING": ""}


def fastcgi_get(address, timeout=15):
    """GET /api/v1/health over FastCGI with libfcgi's client; (exit status, stdout)."""
    env = dict(os.environ, **CGI_ENV)
    r = subprocess.run(["cgi-fcgi", "-bind", "-connect", address], env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout)
    return r.returncode, r.stdout


def read(path):
    with open(path) as f:
        return f.read()


def answered_ok(output):
    head, _, body = output.partition(b"\r\n\r\n")
    return head.startswith(b"Status: 200") and json.loads(body)["status"] == "ok"


class Activator:
    """Holds a listening socket as systemd does and launches workers on it."""

    def __init__(self, tmp, family=socket.AF_UNIX):
        self.tmp = tmp
        if family == socket.AF_UNIX:
            self.address = os.path.join(tmp, "worker-41.sock")
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.bind(self.address)
        else:
            self.sock = socket.socket(socket.AF_INET)
            self.sock.bind(("127.0.0.1", 0))
            self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.sock.listen(64)
        self.log = os.path.join(tmp, "worker.log")

    def launch(self, socket_argument=None, extra_env=None):
        out = open(os.path.join(self.tmp, "worker.out"), "ab")
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(self.sock.fileno(), 3)
                os.set_inheritable(3, True)  # dup2 onto itself keeps close-on-exec
                os.dup2(out.fileno(), 1)
                os.dup2(out.fileno(), 2)
                env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()), **(extra_env or {}))
                os.execve(WORKER, [WORKER, "--config", CONFIG, "--socket", socket_argument or self.address,
                                   "--log-file", self.log, "--metrics-dir", os.path.join(self.tmp, "metrics")], env)
            finally:
                os._exit(127)
        out.close()
        return pid

    def close(self):
        self.sock.close()


def stop(pid, timeout=30):
    os.kill(pid, 15)
    return wait_exit(pid, timeout)


def wait_exit(pid, timeout=30):
    result = {}

    def exited():
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            result["status"] = os.waitstatus_to_exitcode(status)
        return bool(done)
    if not wait_until(exited, timeout):
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError(f"worker {pid} did not exit within {timeout}s")
    return result["status"]


class SocketActivation(unittest.TestCase):
    def setUp(self):
        self.tmpdir = tempfile.TemporaryDirectory()
        self.activator = Activator(self.tmpdir.name)

    def tearDown(self):
        self.activator.close()
        self.tmpdir.cleanup()

    def test_serves_the_passed_socket_stops_at_once_and_leaves_it_to_the_next_instance(self):
        pid = self.activator.launch()
        try:
            status, out = fastcgi_get(self.activator.address)
            self.assertEqual(status, 0)
            self.assertTrue(answered_ok(out), out)
            self.assertIn('"socket.activated":true', read(self.activator.log))
        finally:
            self.assertEqual(stop(pid), 0, read(os.path.join(self.tmpdir.name, "worker.out")))
        # systemd's socket: still there, still listening, not unlinked by the worker.
        self.assertTrue(os.path.exists(self.activator.address))
        # A request while no worker runs waits in the backlog (no refusal) and is answered
        # by the next instance.
        env = dict(os.environ, **CGI_ENV)
        waiting = subprocess.Popen(["cgi-fcgi", "-bind", "-connect", self.activator.address], env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            self.assertFalse(wait_until(lambda: waiting.poll() is not None, 1), "the request was refused while no worker ran")
            pid = self.activator.launch()
            out, _ = waiting.communicate(timeout=15)
            self.assertEqual(waiting.returncode, 0)
            self.assertTrue(answered_ok(out), out)
        finally:
            if waiting.poll() is None:
                waiting.kill()
            self.assertEqual(stop(pid), 0)

    def test_a_passed_socket_that_is_not_the_configured_one_stops_the_worker(self):
        pid = self.activator.launch(socket_argument=os.path.join(self.tmpdir.name, "worker-42.sock"))
        self.assertEqual(wait_exit(pid), 1)
        out = read(os.path.join(self.tmpdir.name, "worker.out")) + read(self.activator.log)
        self.assertIn("systemd passed a socket on", out)
        self.assertIn("worker-42.sock", out)

    def test_another_process_s_listen_pid_is_ignored(self):
        # LISTEN_PID of someone else (inherited by mistake): the worker creates its own socket.
        own = os.path.join(self.tmpdir.name, "own.sock")
        env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID="1")
        proc = subprocess.Popen([WORKER, "--config", CONFIG, "--socket", own, "--log-file", self.activator.log,
                                 "--metrics-dir", os.path.join(self.tmpdir.name, "metrics")], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.assertTrue(wait_until(lambda: os.path.exists(own), 10))
            status, out = fastcgi_get(own)
            self.assertTrue(answered_ok(out), out)
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(30), 0)
        self.assertFalse(os.path.exists(own), "a socket the worker created is removed at exit")


class TCPListeners(unittest.TestCase):
    def run_tcp_worker(self, env_extra):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        address = f"127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if k != "FCGI_WEB_SERVER_ADDRS"}
        env.update(env_extra)
        tmp = tempfile.mkdtemp()
        proc = subprocess.Popen([WORKER, "--config", CONFIG, "--socket", address, "--metrics-dir", os.path.join(tmp, "metrics")],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.addCleanup(proc.stdout.close)
        return proc, address

    def wait_listening(self, proc, address):
        host, port = address.split(":")

        def listening():
            with socket.socket() as s:
                return s.connect_ex((host, int(port))) == 0
        self.assertTrue(wait_until(lambda: listening() or proc.poll() is not None, 15))
        self.assertIsNone(proc.poll(), proc.stdout.read().decode() if proc.poll() is not None else "")

    def test_tcp_without_web_server_addresses_is_refused_at_start(self):
        proc, address = self.run_tcp_worker({})
        self.assertEqual(proc.wait(30), 1)
        self.assertIn("needs server.webServerAddrs", proc.stdout.read().decode())

    def test_tcp_serves_the_named_nginx_host(self):
        proc, address = self.run_tcp_worker({"FCGI_WEB_SERVER_ADDRS": "127.0.0.1"})
        try:
            self.wait_listening(proc, address)
            status, out = fastcgi_get(address)
            self.assertEqual(status, 0)
            self.assertTrue(answered_ok(out), out)
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(30), 0)

    def test_tcp_drops_a_peer_that_is_not_a_named_nginx_host(self):
        # The configuration's list wins over the environment's.
        proc, address = self.run_tcp_worker({"BILLING__server__webServerAddrs": '["10.20.30.40"]',
                                             "FCGI_WEB_SERVER_ADDRS": "127.0.0.1"})
        try:
            self.wait_listening(proc, address)
            status, out = fastcgi_get(address)
            self.assertNotIn(b"Status: 200", out)
            self.assertFalse(out.startswith(b"Status:"), out)
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(30), 0)


class Readiness(unittest.TestCase):
    """Type=notify: each daemon sends READY=1 to $NOTIFY_SOCKET once it accepts, and
    STOPPING=1 when told to stop (systemd's protocol, sd_notify(3))."""

    def notify_socket(self, tmp, abstract=False):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "fcgibilling-test-" + os.path.basename(tmp)
            sock.bind("\0" + name)
            address = "@" + name
        else:
            address = os.path.join(tmp, "notify.sock")
            sock.bind(address)
        sock.settimeout(30)
        self.addCleanup(sock.close)
        return sock, address

    def messages(self, sock):
        data = sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in data.splitlines() if "=" in line)

    def check_worker(self, abstract):
        with tempfile.TemporaryDirectory() as tmp:
            notify, address = self.notify_socket(tmp, abstract)
            path = os.path.join(tmp, "worker-51.sock")
            env = dict(os.environ, NOTIFY_SOCKET=address)
            proc = subprocess.Popen([WORKER, "--config", CONFIG, "--socket", path, "--metrics-dir", os.path.join(tmp, "metrics"),
                                     "--log-file", os.path.join(tmp, "worker.log")], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                ready = self.messages(notify)
                self.assertEqual(ready.get("READY"), "1", ready)
                self.assertEqual(ready.get("MAINPID"), str(proc.pid))
                # Ready means accepting: the first request after READY=1 is answered.
                status, out = fastcgi_get(path)
                self.assertTrue(answered_ok(out), out)
            finally:
                proc.terminate()
                stopping = self.messages(notify)
                self.assertEqual(stopping.get("STOPPING"), "1", stopping)
                self.assertEqual(proc.wait(30), 0)

    def test_a_worker_says_ready_once_it_accepts_and_stopping_when_it_drains(self):
        self.check_worker(abstract=False)

    def test_an_abstract_notify_socket_works_too(self):
        self.check_worker(abstract=True)

    def test_billing_rpc_says_ready_once_its_socket_accepts(self):
        from harness.billing import rpc_raw
        rpc_binary = os.path.join(BIN_DIR, "billing-rpc")
        with tempfile.TemporaryDirectory() as tmp:
            notify, address = self.notify_socket(tmp)
            admin = os.path.join(tmp, "rpc.sock")
            env = dict(os.environ, NOTIFY_SOCKET=address, BILLING__admin__socket=admin)
            proc = subprocess.Popen([rpc_binary, "--config", CONFIG, "--log-file", os.path.join(tmp, "rpc.log")], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                ready = self.messages(notify)
                self.assertEqual(ready.get("READY"), "1", ready)
                reply = json.loads(rpc_raw(b'{"jsonrpc":"2.0","method":"system.health","id":1}', sock_path=admin))
                self.assertEqual(reply["result"]["database"]["status"], "ok")
            finally:
                proc.terminate()
                self.assertEqual(proc.wait(30), 0)


if __name__ == "__main__":
    unittest.main()
