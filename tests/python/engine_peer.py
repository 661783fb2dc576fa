"""A Transfer Engine in its own process, driven over stdin/stdout by the tests.

    engine_peer.py <metadata_server> <size> [local_hostname]

Registers a numpy buffer of <size> bytes filled with pattern(i) = (i*7+3)%251,
prints one JSON line {"name", "addr", "port", "first"} ("first": the engine's
first registered buffer, its managed-buffer pool) and then answers commands:
    hex OFF LEN      -> hex of buffer[OFF:OFF+LEN]
    fill OFF LEN B   -> buffer[OFF:OFF+LEN] = B
    reg LEN B        -> registers one more buffer of LEN bytes B; JSON {"rc", "addr"}
    unreg            -> unregisters the first buffer (it stays allocated); prints the rc
    rereg            -> registers it again; prints the rc
    notifies         -> JSON [[name, msg], ...] of received notifications
    quit             -> exits 0
"""
import json
import sys

import numpy as np

from mooncake.engine import TransferEngine


def main():
    meta, size = sys.argv[1], int(sys.argv[2])
    host = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
    eng = TransferEngine()
    rc = eng.initialize(host, meta, "tcp", "")
    if rc != 0:
        print(json.dumps({"error": rc}), flush=True)
        return 1
    buf = (np.arange(size, dtype=np.uint64) * 7 + 3) % 251
    buf = buf.astype(np.uint8)
    addr = buf.ctypes.data
    rc = eng.register_memory(addr, size)
    if rc != 0:
        print(json.dumps({"error": rc}), flush=True)
        return 1
    print(json.dumps({"name": eng.get_local_name(), "addr": addr, "port": eng.get_rpc_port(),
                      "first": eng.get_first_buffer_address(eng.get_local_name())}), flush=True)
    keep = []
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "hex":
            off, n = int(cmd[1]), int(cmd[2])
            print(buf[off:off + n].tobytes().hex(), flush=True)
        elif cmd[0] == "fill":
            off, n, b = int(cmd[1]), int(cmd[2]), int(cmd[3])
            buf[off:off + n] = b
            print("ok", flush=True)
        elif cmd[0] == "reg":  # register one more buffer (filled with byte B)
            extra = np.full(int(cmd[1]), int(cmd[2]), dtype=np.uint8)
            keep.append(extra)
            rc = eng.register_memory(extra)
            print(json.dumps({"rc": rc, "addr": extra.ctypes.data}), flush=True)
        elif cmd[0] == "unreg":
            print(eng.unregister_memory(addr), flush=True)
        elif cmd[0] == "rereg":
            print(eng.register_memory(addr, size), flush=True)
        elif cmd[0] == "notifies":
            print(json.dumps([[n.name, n.msg] for n in eng.get_notifies()]), flush=True)
        elif cmd[0] == "quit":
            break
    eng.unregister_memory(addr)
    eng.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
