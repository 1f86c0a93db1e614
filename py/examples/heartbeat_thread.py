"""Keep a Cycles reservation alive on a background thread with the runner.

    leasebeat serve &                     # prints "listening on http://127.0.0.1:PORT"
    python heartbeat_thread.py http://127.0.0.1:PORT my-api-key [--beats 3]

The runner (``leasebeat.run``) creates the reservation, beats when the core
says, retries with the same key when it says, reports every decision and
jeopardy to the listener, and on ``stop(release=True)`` releases the
reservation so it never lapses on the server. CI runs this file against
``leasebeat serve`` (py/tests/test_examples.py).
"""

from __future__ import annotations

import argparse
import threading

import leasebeat
from leasebeat.transports import UrllibTransport


class PrintListener(leasebeat.Listener):
    def __init__(self, beats: int) -> None:
        self.beats = beats
        self.extended = 0
        self.enough = threading.Event()

    def on_decision(self, decision: leasebeat.Decision) -> None:
        print(decision.reservation_id, decision.to_json_str(), flush=True)
        if decision.outcome is leasebeat.OutcomeClass.SUCCESS:
            self.extended += 1
            if self.extended > self.beats:  # the create, then `beats` extensions
                self.enough.set()

    def on_jeopardy(self, event: leasebeat.Jeopardy) -> None:
        print("lease_in_jeopardy", event, flush=True)

    def on_stop(self, decision: leasebeat.Decision) -> None:
        print("stopped:", decision.reason, flush=True)
        self.enough.set()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("base_url")
    p.add_argument("api_key")
    p.add_argument("--beats", type=int, default=3)
    p.add_argument("--ttl-ms", type=int, default=4000)
    args = p.parse_args()
    hb = leasebeat.Heartbeat(
        args.ttl_ms,
        1000,  # request_timeout_ms: the runner enforces it for the whole attempt
        create_request={
            "subject": {"tenant": "acme"},
            "action": {"kind": "llm.completion", "name": "example"},
            "estimate": {"unit": "TOKENS", "amount": 100},
        },
    )
    listener = PrintListener(args.beats)
    runner = leasebeat.run(hb, UrllibTransport(args.base_url, args.api_key), listener=listener)
    listener.enough.wait()  # ... the long work happens here ...
    runner.stop(commit={"unit": "TOKENS", "amount": 42})  # or release=True
    final = runner.join()
    print("final:", final, flush=True)


if __name__ == "__main__":
    main()
