"""One JSON-RPC call to billing-rpc's admin socket (scripts/bench's Python helpers)."""
import json
import socket


class RpcError(RuntimeError):
    """The daemon answered an error: `reason` is its code and data.reason, e.g. "error -32001 statement_timeout"."""

    def __init__(self, method, error):
        super().__init__(f"{method}: {error}")
        self.reason = f"error {error.get('code')} {(error.get('data') or {}).get('reason', '')}".strip()


def call(path, method, params, timeout=1800):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(json.dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": 1}).encode() + b"\n")
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    reply = json.loads(data)
    if "error" in reply:
        raise RpcError(method, reply["error"])
    return reply["result"]
