"""A real SMTP server (aiosmtpd) on 127.0.0.1 for tests/tests/notify.rs.

Appends one JSON line per accepted message to OUT: {"mail_from", "rcpt_tos", "data"}
(data is the message exactly as received), prints "PORT <n>" once listening, and runs
until killed.
"""
import json
import socket
import sys
import time

from aiosmtpd.controller import Controller


class Sink:
    def __init__(self, out):
        self.out = out

    async def handle_DATA(self, server, session, envelope):
        with open(self.out, "a", encoding="utf-8") as f:
            f.write(json.dumps({
                "mail_from": envelope.mail_from,
                "rcpt_tos": envelope.rcpt_tos,
                "data": envelope.original_content.decode("utf-8", "replace"),
            }) + "\n")
        return "250 OK"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    out = sys.argv[1]
    port = free_port()
    c = Controller(Sink(out), hostname="127.0.0.1", port=port)
    c.start()
    print(f"PORT {port}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
