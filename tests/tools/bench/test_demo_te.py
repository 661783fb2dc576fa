#!/usr/bin/python3
"""crescent-demo te (the Transfer Engine demo) end to end with small sizes: an
embedded metadata server, a target child process, READ and WRITE verified for
each protocol; the transport reported must match the protocol asked for.
Usage: test_demo_te.py <crescent-demo>"""
import re
import subprocess
import sys

r = subprocess.run([sys.argv[1], "te", "--total", "48MiB", "--buffer_size", "16MiB", "--block_size",
                    "1MiB", "--batch_size", "8", "--protocols", "tcp,shm,auto"],
                   capture_output=True, text=True, timeout=200)
print(r.stdout)
print(r.stderr, file=sys.stderr)
fail = []
if r.returncode != 0:
    fail.append("exit status: expected 0, got %d" % r.returncode)
got = re.findall(r"protocol=(\w+)\s+transport=(\S+) moved (\d+) MiB .*: (\w+)", r.stdout)
want = [("tcp", "tcp", "48", "verified"), ("shm", "shm", "48", "verified"),
        ("auto", "shm", "48", "verified")]
if got != want:
    fail.append("passes: expected %r, got %r" % (want, got))
if not r.stdout.rstrip().endswith("crescent-demo: OK"):
    fail.append("last line: expected 'crescent-demo: OK'")
for f in fail:
    print("FAIL:", f)
sys.exit(1 if fail else 0)
