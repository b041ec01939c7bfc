"""A team service receiving FCGIBilling's outbound webhooks (SPEC §16): HTTPS with a server
certificate from a CA of its own (`ca_file`, for `webhooks.caFile`), a `whsec_` secret of its
own (`secret_file`), and every POST verified as any receiver would, with the Standard Webhooks
library (`standardwebhooks` on PyPI).

`FakeWebhookReceiver(directory, name, tls)`; `tls` is `tls_files(directory)`, one CA for every
receiver of a daemon (it trusts one `webhooks.caFile`); `endpoint(events)` is the receiver's
`webhooks.endpoints` entry.
Behaviours: `fail_next(n, status)` answers the next n deliveries with an error, `hang_seconds`
holds every answer that long (a slow endpoint), `answer_body` is what every answer carries. `received` lists what was accepted (2xx), in
arrival order, each {"id", "timestamp", "type", "data", "headers"}; `attempts` everything
that came, accepted or not; `unverified` what failed verification (must stay empty)."""
import base64
import http.server
import json
import os
import secrets
import ssl
import threading
import time

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from harness.fake_appstore_api import _tls_files


def tls_files(directory):
    """(ca.pem, cert.pem, key.pem) for 127.0.0.1, made once in directory."""
    path = os.path.join(directory, "webhook-tls")
    os.makedirs(path, exist_ok=True)
    return _tls_files(path)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass


class FakeWebhookReceiver:
    def __init__(self, directory, name, tls):
        self.name = name
        self.directory = os.path.join(directory, "webhook-" + name)
        os.makedirs(self.directory, exist_ok=True)
        self.secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
        self.secret_file = os.path.join(self.directory, "secret")
        with open(self.secret_file, "w") as f:
            f.write(self.secret + "\n")
        self.ca_file, cert_file, key_file = tls
        self.verifier = Webhook(self.secret)
        self.lock = threading.Lock()
        self.received = []
        self.attempts = []
        self.unverified = []
        self.hang_seconds = 0
        # What every answer carries (any bytes: a sender reads it for nothing but its status).
        self.answer_body = b'{"ok": true}'
        self._failures = 0
        self._failure_status = 500
        self._stopping = threading.Event()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 60
            # The answer's headers and body are two writes: without this, Nagle's algorithm and
            # the client's delayed ACK hold each answer ~40 ms on a kept-alive connection.
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if len(body) < length:
                    # The sender went away mid-request (killed): nothing was delivered.
                    self.close_connection = True
                    return
                status = fake._take(body, {k.lower(): v for k, v in self.headers.items()})
                if fake.hang_seconds and fake._stopping.wait(fake.hang_seconds):
                    self.close_connection = True
                    return
                answer = fake.answer_body
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = _Server(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert_file, key_file)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-webhook-" + name, daemon=True)
        self.thread.start()

    def _take(self, body, headers):
        with self.lock:
            arrival = {"at": time.time(), "headers": headers, "body": body}
            self.attempts.append(arrival)
            try:
                payload = self.verifier.verify(body, headers)
            except WebhookVerificationError as error:
                self.unverified.append((repr(error), headers))
                return 400
            if self._failures > 0:
                self._failures -= 1
                return self._failure_status
            self.received.append({"id": headers.get("webhook-id"), "timestamp": int(headers.get("webhook-timestamp")),
                                  "type": payload["type"], "bodyTimestamp": payload["timestamp"], "data": payload["data"],
                                  "headers": headers, "at": arrival["at"]})
            return 200

    def fail_next(self, times, status=500):
        with self.lock:
            self._failures, self._failure_status = times, status

    def endpoint(self, events=None, url_path="/hooks/billing"):
        entry = {"id": self.name, "url": f"https://127.0.0.1:{self.port}{url_path}", "secretFile": self.secret_file}
        if events is not None:
            entry["events"] = events
        return entry

    def of(self, user, type_="access.changed"):
        with self.lock:
            return [r for r in self.received if r["type"] == type_ and r["data"].get("userId") == user]

    def attempts_of(self, user):
        with self.lock:
            out = []
            for a in self.attempts:
                try:
                    if json.loads(a["body"])["data"].get("userId") == user:
                        out.append(a)
                except (ValueError, KeyError):
                    pass
            return out

    def stop(self):
        self._stopping.set()
        self.server.shutdown()
        self.thread.join(timeout=10)
        self.server.server_close()
