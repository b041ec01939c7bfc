"""A billing-fcgi of a test's own: the stack's binary and configuration (edited by the test,
plus `BILLING__section__key` environment overrides), on a FastCGI socket of its own, sharing
the stack's database. Requests reach it through libfcgi's own client (`cgi-fcgi`, Debian's
libfcgi-bin), as nginx's would: the CGI variables nginx sets, the body on standard input."""
import json
import os
import signal
import subprocess

from .billing import REPO, VAR_DIR, wait_until

BIN_DIR = os.path.dirname(os.environ.get("BILLING_RPC_BINARY", os.path.join(REPO, ".build/release/billing-rpc")))
STACK_CONFIG = os.path.join(VAR_DIR, "billing.json")


class OwnWorker:
    def __init__(self, tmp, name, environment=None, configure=None, threads=2):
        with open(STACK_CONFIG) as f:
            self.config = json.load(f)
        if configure:
            configure(self.config)
        self.path = os.path.join(tmp, name + ".json")
        with open(self.path, "w") as f:
            json.dump(self.config, f)
        self.name = name
        self.socket = os.path.join(tmp, name + ".sock")
        self.log_path = os.path.join(tmp, name + ".log")
        self.metrics = os.path.join(tmp, name + "-metrics")
        self.out_path = os.path.join(tmp, name + ".out")
        self.out = open(self.out_path, "ab")
        env = dict(os.environ, **(environment or {}))
        self.process = subprocess.Popen(
            [os.path.join(BIN_DIR, "billing-fcgi"), "--config", self.path, "--socket", self.socket, "--threads", str(threads),
             "--log-file", self.log_path, "--metrics-dir", self.metrics], stdout=self.out, stderr=self.out, env=env)
        assert wait_until(lambda: os.path.exists(self.socket) or self.process.poll() is not None, 20), "no socket"
        assert self.process.poll() is None, open(self.out_path).read()

    def request(self, method, uri, body=None, headers=None, timeout=60):
        """(status, JSON body or None) of one request."""
        path, _, query = uri.partition("?")
        data = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        env = dict(os.environ, REQUEST_METHOD=method, REQUEST_URI=uri, DOCUMENT_URI=path, SERVER_PROTOCOL="HTTP/1.1",
                   REMOTE_ADDR="127.0.0.1", QUERY_STRING=query, CONTENT_LENGTH=str(len(data)))
        if body is not None:
            env["CONTENT_TYPE"] = "application/json"
        for name, value in (headers or {}).items():
            env["HTTP_" + name.upper().replace("-", "_")] = value
        r = subprocess.run(["cgi-fcgi", "-bind", "-connect", self.socket], env=env, input=data, capture_output=True,
                           timeout=timeout)
        assert r.returncode == 0, r.stderr
        head, _, payload = r.stdout.partition(b"\r\n\r\n")
        status = 200
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"status:"):
                status = int(line.split()[1])
        try:
            return status, json.loads(payload) if payload else None
        except ValueError:
            return status, payload

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def samples(self):
        """The worker's published metrics: {name or name{labels}: value}."""
        out = {}
        try:
            names = os.listdir(self.metrics)
        except OSError:
            return out
        for file in names:
            try:
                with open(os.path.join(self.metrics, file)) as f:
                    snapshot = json.load(f)
            except (OSError, ValueError):
                continue
            for name, labels, value in snapshot.get("samples", []):
                pairs = ",".join("%s=%s" % (labels[i], labels[i + 1]) for i in range(0, len(labels), 2))
                key = name + ("{%s}" % pairs if pairs else "")
                out[key] = out.get(key, 0) + value
        return out

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.out.close()
