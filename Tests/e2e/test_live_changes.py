"""Live changes for the app (SPEC §16, issue 34): GET /api/v1/billing/access/changes, end to end.

The stack's nginx loads Debian's libnginx-mod-nchan; its billing-rpc publishes each committed
change to the user's channel through the publisher socket (live.publisherSocket). Covered:
the route answers at once when the user's revision already exceeds `after` (a document, or
one SSE event); a long poll and an SSE stream started before a purchase get the change within
a second of the webhook's 2xx; a stream gets successive changes in revision order and, after
a reconnect with its Last-Event-ID, what it missed; 400 waiting clients leave every worker
thread idle and /health answering, and each gets his own user's change only; bad requests
get precise 4xx; the internal and publisher locations are not reachable from outside; an
erased user's channel is dropped and his waiting stream ends."""
import http.client
import json
import os
import re
import threading
import time
import unittest
import urllib.parse
import uuid

from harness.billing import HTTP_BASE, VAR_DIR, request, rpc, sql, sql_string, wait_until
from harness.entitlements import DAY, access, known_user, now_ms, rc_deliver, rc_event, rc_subscription_id
from harness.tokens import token
from test_ops import sample

CHANGES = "/api/v1/billing/access/changes"
ACTOR = "e2e-live@ops"
CHANGE_FIELDS = {"userId", "revision", "tier", "phase", "source", "sources", "store", "expiresAt", "pendingChange"}


def bearer(user):
    return {"Authorization": "Bearer " + token(user)}


def grant(user, days=1, key=None):
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + days * 86_400))
    reply = rpc("grants.create", {"userId": user, "tier": "pro", "reason": "e2e live", "actor": ACTOR,
                                  "idempotencyKey": key or str(uuid.uuid4()), "expiresAt": expires})
    assert "result" in reply, reply
    return reply["result"]


def connection(timeout):
    url = urllib.parse.urlsplit(HTTP_BASE)
    return http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)


class Poll(threading.Thread):
    """A long poll waiting in the background: .status, .body, .answered_at once joined."""

    def __init__(self, user, after, timeout=70):
        super().__init__(daemon=True)
        self.user, self.after, self.timeout = user, after, timeout
        self.status = self.body = self.answered_at = self.error = None
        self.headers = bearer(user)

    def run(self):
        try:
            r = request("GET", f"{CHANGES}?after={self.after}", headers=self.headers, timeout=self.timeout)
            self.status, self.body, self.answered_at = r.status, r.body, time.time()
        except Exception as error:  # reported by the test's assertions
            self.error = error

    def change(self):
        assert self.status == 200, (self.status, self.body, self.error)
        return json.loads(self.body)


class StreamWaiter(threading.Thread):
    """A stream waiting in the background for its first event: .status, .body (the event's
    data, as a long poll's) once joined."""

    def __init__(self, user, after):
        super().__init__(daemon=True)
        self.user, self.after = user, after
        self.status = self.body = self.error = None

    def run(self):
        try:
            stream = Stream(self.user, self.after, timeout=60)
            event = stream.next_event()
            stream.close()
            self.status = stream.status if event else None
            self.body = json.dumps(event[1]).encode() if event else None
        except Exception as error:  # reported by the test's assertions
            self.error = error


class Stream:
    """An SSE subscription read line by line: events() yields (id, data) as they arrive."""

    def __init__(self, user, after, last_event_id=None, timeout=10):
        self.conn = connection(timeout)
        headers = {**bearer(user), "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", f"{CHANGES}?after={after}", headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.content_type = self.response.getheader("Content-Type", "")

    def next_event(self):
        """The next event with data (comments and the retry field skipped), with the time it
        arrived; None when the server ended the stream."""
        event_id, data = None, []
        while True:
            line = self.response.readline()
            if not line:
                return None
            line = line.decode().rstrip("\n")
            if line == "":
                if data:
                    return event_id, json.loads("\n".join(data)), time.time()
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "id":
                event_id = value
            elif field == "data":
                data.append(value)

    def close(self):
        self.conn.close()


class LiveChanges(unittest.TestCase):
    def test_answers_at_once_when_the_revision_already_exceeds_after(self):
        user = known_user()
        grant(user)
        snapshot = access(user)
        self.assertGreater(snapshot["revision"], 0)
        r = request("GET", f"{CHANGES}?after={snapshot['revision'] - 1}", headers=bearer(user), timeout=5)
        self.assertEqual(r.status, 200, r)
        self.assertTrue(r.headers["content-type"].startswith("application/json"))
        change = r.json()
        self.assertEqual(set(change), CHANGE_FIELDS)
        for key in ["userId", "revision", "tier", "phase", "source", "store"]:
            self.assertEqual(change[key], snapshot[key], key)
        # A stream is answered at once too: one event, its id the revision, then a reconnect.
        stream = Stream(user, 0)
        self.assertEqual(stream.status, 200)
        self.assertTrue(stream.content_type.startswith("text/event-stream"))
        event_id, data, _ = stream.next_event()
        self.assertEqual((event_id, data), (f"r{snapshot['revision']}", change))
        self.assertIsNone(stream.next_event(), "the worker's answer ends the stream: the app reconnects with its id")
        stream.close()

    def test_a_waiting_long_poll_gets_a_purchase_within_a_second_of_the_webhook(self):
        user = known_user()
        revision = access(user)["revision"]
        before = subscribers()
        poll = Poll(user, revision)
        poll.start()
        wait_for_subscribers(before + 1)
        at = now_ms()
        rc_deliver(rc_event("INITIAL_PURCHASE", user, at=at, sub=rc_subscription_id(), expires=at + 30 * DAY))
        acknowledged = time.time()
        poll.join(30)
        change = poll.change()
        self.assertEqual((change["userId"], change["tier"]), (user, "plus"))
        self.assertGreater(change["revision"], revision)
        self.assertLess(poll.answered_at - acknowledged, 1.0, "a change reaches a waiting app within a second of its commit")
        self.assertEqual(change["revision"], access(user)["revision"])

    def test_a_stream_gets_each_change_in_order_and_resumes_after_a_reconnect(self):
        user = known_user()
        revision = access(user)["revision"]
        before = subscribers()
        stream = Stream(user, revision, timeout=15)
        self.assertEqual(stream.status, 200)
        wait_for_subscribers(before + 1)
        at = now_ms()
        sub = rc_subscription_id()
        rc_deliver(rc_event("INITIAL_PURCHASE", user, at=at, sub=sub, expires=at + 30 * DAY))
        acknowledged = time.time()
        event_id, first, arrived = stream.next_event()
        self.assertLess(arrived - acknowledged, 1.0)
        self.assertEqual((first["userId"], first["tier"]), (user, "plus"))
        revisions = [first["revision"]]
        for n in range(5):
            grant(user, days=2 + n)
            event_id, change, _ = stream.next_event()
            revisions.append(change["revision"])
        self.assertEqual(revisions, sorted(set(revisions)), "each change once, in revision order")
        self.assertRegex(event_id, r"^\d+:\d+$", "a streamed event's id is nchan's message id")
        stream.close()
        # Changes made while the app was away: a reconnect with its last id is told the latest at once.
        grant(user, days=20)
        grant(user, days=21)
        latest = access(user)["revision"]
        resumed = Stream(user, revision, last_event_id=event_id)
        got_id, change, _ = resumed.next_event()
        self.assertEqual((got_id, change["revision"]), (f"r{latest}", latest))
        resumed.close()
        # ... and one that missed nothing waits for the next, from its last id.
        before = subscribers()
        caught_up = Stream(user, revision, last_event_id=got_id, timeout=15)
        wait_for_subscribers(before + 1)
        grant(user, days=22)
        _, change, _ = caught_up.next_event()
        self.assertEqual(change["revision"], access(user)["revision"])
        self.assertGreater(change["revision"], latest)
        caught_up.close()

    def test_a_wait_begun_right_after_a_change_gets_the_next_change_not_that_one(self):
        # The app learns revision R from the change it just made and waits at once, before the
        # publisher has put R on the channel: it must get R+, never R again. Long polls and
        # streams, ten rounds each.
        user = known_user()
        for kind in [Poll, StreamWaiter]:
            for _ in range(10):
                grant(user)
                revision = access(user)["revision"]
                waiter = kind(user, revision)
                waiter.start()
                time.sleep(0.3)
                grant(user)
                waiter.join(30)
                self.assertEqual(waiter.status, 200, (kind.__name__, waiter.error))
                change = json.loads(waiter.body)
                self.assertGreater(change["revision"], revision, kind.__name__)

    def test_four_hundred_waiting_apps_hold_no_worker_thread_and_get_only_their_own_changes(self):
        users = [known_user() for _ in range(40)]
        revisions = {user: access(user)["revision"] for user in users}
        before = subscribers()
        # Per user, five long polls and five streams.
        polls = [kind(user, revisions[user]) for user in users for kind in [Poll, StreamWaiter] for _ in range(5)]
        for poll in polls:
            poll.start()
        wait_for_subscribers(before + len(polls), seconds=30)
        # Each worker publishes its gauges every second: past the authorizations' second, two
        # seconds of readings. The busy threads allowed are those of /metrics itself: the
        # worker answering it, and the other worker's gauge published while it answered the
        # reading before (up to a second old). 400 waiting apps on worker threads would fill
        # all 8 (4 per worker).
        time.sleep(1.5)
        readings = []
        for _ in range(5):
            metrics = request("GET", "/metrics").body.decode()
            readings.append(sum(sample(metrics, "billing_worker_busy_threads", worker=f"worker-{n}") for n in (1, 2)))
            time.sleep(0.5)
        self.assertLessEqual(max(readings), 2, f"nginx holds the waiting apps, no worker thread does: {readings}")
        health = request("GET", "/api/v1/health", timeout=5)
        self.assertEqual(health.status, 200, health)
        for user in users:
            grant(user)
        for poll in polls:
            poll.join(30)
        wrong = [(poll.user, poll.status, poll.body) for poll in polls
                 if poll.status != 200 or json.loads(poll.body)["userId"] != poll.user
                 or json.loads(poll.body)["revision"] <= revisions[poll.user]]
        self.assertEqual(wrong[:3], [], f"{len(wrong)} of {len(polls)} waiting apps got no change or another's")

    def test_bad_requests_get_precise_errors(self):
        user = known_user()
        for query, status, code in [("", 400, "invalid_request"), ("?after=", 400, "invalid_request"),
                                    ("?after=-1", 400, "invalid_request"), ("?after=1.5", 400, "invalid_request"),
                                    ("?after=99999999999999999999999", 400, "invalid_request")]:
            r = request("GET", CHANGES + query, headers=bearer(user), timeout=5)
            self.assertEqual((r.status, r.json()["error"]["code"]), (status, code), query)
        r = request("GET", f"{CHANGES}?after=0", timeout=5)
        self.assertEqual(r.status, 401, r)
        r = request("GET", f"{CHANGES}?after=0", headers={"Authorization": "Bearer not-a-token"}, timeout=5)
        self.assertEqual(r.status, 401, r)
        # The channel locations are internal: no request reaches them from outside.
        channel = "0" * 64
        for path in [f"/_billing/changes/poll/{channel}", f"/_billing/changes/stream/{channel}",
                     f"/_billing/publish/{channel}", "/_billing/status"]:
            r = request("GET", path, timeout=5)
            self.assertEqual(r.status, 404, path)
        r = request("POST", f"/_billing/publish/{channel}", body=b"{}", timeout=5)
        self.assertEqual(r.status, 404)

    def test_erasing_a_user_drops_his_channel_and_ends_his_stream(self):
        user = known_user()
        grant(user)
        revision = access(user)["revision"]
        self.assertTrue(wait_until(lambda: sql(f"SELECT COUNT(*) FROM billing_outbox WHERE user_id = {sql_string(user)} "
                                               "AND type = 'access.changed' AND published_at IS NULL") == [["0"]], 10))
        before = subscribers()
        stream = Stream(user, revision, timeout=10)
        self.assertEqual(stream.status, 200)
        wait_for_subscribers(before + 1)
        reply = rpc("users.delete", {"userId": user, "actor": ACTOR, "reason": "e2e live erasure"})
        self.assertIn("result", reply, reply)
        self.assertEqual(reply["result"]["liveChannel"], "dropped", "the change nginx kept for him went with his channel")
        self.assertIsNone(stream.next_event(), "his waiting stream ends, with no event")
        stream.close()
        again = rpc("users.delete", {"userId": user, "actor": ACTOR})["result"]
        self.assertEqual((again["alreadyDeleted"], again["liveChannel"]), (True, "absent"))

    def test_the_outbox_notes_what_was_published(self):
        user = known_user()
        grant(user)
        self.assertTrue(wait_until(lambda: sql(f"SELECT COUNT(*) FROM billing_outbox WHERE user_id = {sql_string(user)} "
                                               "AND type = 'access.changed' AND published_at IS NULL") == [["0"]], 10))
        ids = [row[0] for row in sql(f"SELECT live_message_id FROM billing_outbox WHERE user_id = {sql_string(user)} "
                                     "AND type = 'access.changed'")]
        self.assertTrue(ids and all(re.fullmatch(r"\d+:\d+", i) for i in ids), ids)
        self.assertEqual(sql(f"SELECT COUNT(*) FROM billing_outbox WHERE user_id = {sql_string(user)} "
                             "AND type = 'event.applied' AND published_at IS NOT NULL"), [["0"]])


def subscribers():
    """nchan's subscriber count, from its status location on the publisher socket."""
    conn = http.client.HTTPConnection("localhost", timeout=5)
    conn.sock = unix_socket(os.path.join(VAR_DIR, "run", "nchan.sock"))
    conn.request("GET", "/_billing/status")
    text = conn.getresponse().read().decode()
    conn.close()
    for line in text.splitlines():
        if line.startswith("subscribers:"):
            return int(line.split(":")[1])
    raise AssertionError(f"no subscriber count in nchan's status: {text!r}")


def unix_socket(path):
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(path)
    return s


def wait_for_subscribers(n, seconds=10):
    """Until nchan holds at least n subscribers (the test's waits are in place)."""
    assert wait_until(lambda: subscribers() >= n, seconds), f"nchan holds {subscribers()} subscribers, not {n}"


if __name__ == "__main__":
    unittest.main()
