#!/usr/bin/env python3
"""tcp_cut_proxy.py LISTEN_PORT TARGET_PORT CUT: a TCP proxy on 127.0.0.1
for the rank link tests (tests/ranks_test.sh link-lost). It forwards each
connection to TARGET_PORT both ways; the first connection is closed, both
sides, once CUT bytes of it went from the client to the target (a link
lost in the middle of a version). Later connections are forwarded whole.
Runs until killed."""
import select
import socket
import sys
import threading


def pipe(a, b, cut):
    sent = 0
    try:
        while True:
            r, _, _ = select.select([a, b], [], [])
            for s in r:
                d = s.recv(65536)
                if not d:
                    return
                if s is a and cut is not None:
                    if sent + len(d) >= cut:
                        b.sendall(d[:cut - sent])
                        return  # the cut: both sides closed
                    sent += len(d)
                (b if s is a else a).sendall(d)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def main():
    lport, tport, cut = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", lport))
    ls.listen(8)
    first = True
    while True:
        c, _ = ls.accept()
        t = socket.create_connection(("127.0.0.1", tport))
        threading.Thread(target=pipe, args=(c, t, cut if first else None), daemon=True).start()
        first = False


if __name__ == "__main__":
    main()
