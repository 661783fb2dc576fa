"""Starts a serving cluster as real processes: crescent-master (+ HTTP
metadata), a crescent-node holding the KV, crescent-conductor, P prefill and
D decode workers. Every process listens on the given host(s) on ephemeral
ports and is stopped (TERM, then KILL) by Cluster.stop().

With netns=True the pieces run in three network namespaces (names prefixed
"i15-", a /24 per link, nothing in the root namespace), created here and
always deleted by stop(): i15-store-<pid> (master, node, conductor),
i15-pre-<pid> (prefill workers), i15-dec-<pid> (decode workers),
i15-rtr-<pid> (the calling process: the router), joined by a bridge namespace
i15-br-<pid>."""
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

STARTUP_S = float(os.environ.get("CRESCENT_SERVING_STARTUP_S", "120"))
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_exe(name):
    import crescent
    p = crescent.find_executable(name)
    if p is None:
        raise RuntimeError("%s not found (build crescent; CRESCENT_BIN_DIR / PATH)" % name)
    return p


def _wait_line(proc, pattern, what, timeout=STARTUP_S):
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            for line in buf.decode(errors="replace").splitlines():
                m = re.search(pattern, line)
                if m:
                    return m
        elif proc.poll() is not None:
            break
    raise RuntimeError("%s: no line matching %r within %ss (exit %s); output: %r"
                       % (what, pattern, timeout, proc.poll(), buf[-3000:]))


class Netns:
    """Four hosts on one bridge: 10.215.0.1 store, .2 prefill, .3 decode,
    .4 the router (this process moves its own thread there: enter())."""

    HOSTS = ("store", "pre", "dec", "rtr")

    def __init__(self):
        tag = str(os.getpid())
        self.ns = {h: "i15-%s-%s" % (h, tag) for h in self.HOSTS}
        self.ns["br"] = "i15-br-" + tag
        self.ip = {"store": "10.215.0.1", "pre": "10.215.0.2", "dec": "10.215.0.3",
                   "rtr": "10.215.0.4"}
        self.root_fd = None
        self.created = []

    @staticmethod
    def _ip(*args):
        subprocess.run(["ip"] + list(args), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    def up(self):
        self.cleanup_stale()
        for n in self.ns.values():
            self._ip("netns", "add", n)
            self.created.append(n)
        br = self.ns["br"]
        self._ip("-n", br, "link", "add", "br0", "type", "bridge")
        self._ip("-n", br, "link", "set", "br0", "up")
        for i, host in enumerate(self.HOSTS):
            ns = self.ns[host]
            self._ip("link", "add", "e%d" % i, "netns", ns, "type", "veth", "peer", "name",
                     "p%d" % i, "netns", br)
            self._ip("-n", br, "link", "set", "p%d" % i, "master", "br0")
            self._ip("-n", br, "link", "set", "p%d" % i, "up")
            self._ip("-n", ns, "addr", "add", self.ip[host] + "/24", "dev", "e%d" % i)
            self._ip("-n", ns, "link", "set", "e%d" % i, "up")
            self._ip("-n", ns, "link", "set", "lo", "up")

    def enter(self, host):
        """Moves the calling thread (call it before any thread exists that
        must talk to the cluster) into host's namespace; leave() returns."""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        self.root_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
        fd = os.open("/run/netns/" + self.ns[host], os.O_RDONLY)
        try:
            if libc.setns(fd, 0x40000000) != 0:          # CLONE_NEWNET
                raise OSError(ctypes.get_errno(), "setns " + self.ns[host])
        finally:
            os.close(fd)

    def leave(self):
        if self.root_fd is not None:
            import ctypes
            ctypes.CDLL(None, use_errno=True).setns(self.root_fd, 0x40000000)
            os.close(self.root_fd)
            self.root_fd = None

    def prefix(self, host):
        return ["ip", "netns", "exec", self.ns[host]]

    def down(self):
        self.leave()
        for n in reversed(self.created):
            subprocess.run(["ip", "netns", "del", n], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.created = []

    @staticmethod
    def cleanup_stale():
        """Deletes i15-*-<pid> namespaces whose creating process is gone."""
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            m = re.match(r"(i15-(?:store|pre|dec|rtr|br)-(\d+))", line)
            if m and not os.path.exists("/proc/%s" % m.group(2)):
                subprocess.run(["ip", "netns", "del", m.group(1)], stderr=subprocess.DEVNULL)


class Cluster:
    def __init__(self, cfg, n_prefill=1, n_decode=1, netns=False, node_size="256MB",
                 worker_blocks=512, whole_kv=False, worker_env=None, protocol="tcp"):
        self.cfg = cfg
        self.procs = []
        self.workers = {}          # id -> (proc, endpoint)
        self.net = Netns() if netns else None
        self.n_prefill, self.n_decode = n_prefill, n_decode
        self.node_size = node_size
        self.worker_blocks = worker_blocks
        self.whole_kv = whole_kv
        self.worker_env = worker_env or {}
        self.protocol = protocol

    def _host(self, role):
        return self.net.ip[role] if self.net else "127.0.0.1"

    def _start(self, argv, role, env=None):
        pre = self.net.prefix(role) if self.net else []
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.Popen(pre + argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             env=e)
        self.procs.append(p)
        return p

    def start(self):
        try:
            if self.net:
                self.net.up()
                self.net.enter("rtr")
            h = self._host("store")
            m = self._start([find_exe("crescent-master"), "--rpc_port=0", "--rpc_address=" + h,
                             "--enable_http_metadata_server=true", "--http_metadata_server_host=" + h,
                             "--http_metadata_server_port=0", "--metrics_address=" + h,
                             "--metrics_port=0"], "store")
            mm = _wait_line(m, r"listening rpc=(\d+) .*http_metadata=(\d+)", "crescent-master")
            self.master = "%s:%s" % (h, mm.group(1))
            self.metadata = "http://%s:%s/metadata" % (h, mm.group(2))
            n = self._start([find_exe("crescent-node"), "--master_server_address", self.master,
                             "--metadata_server", self.metadata, "--local_hostname", h,
                             "--global_segment_size", self.node_size], "store")
            _wait_line(n, r"ready segment=(\S+)", "crescent-node")
            c = self._start([find_exe("crescent-conductor"), "--host=" + h, "--port=0",
                             "--block_size=%d" % self.cfg.block_size], "store")
            cm = _wait_line(c, r"listening on \S+:(\d+)", "crescent-conductor")
            self.conductor = "http://%s:%s" % (h, cm.group(1))
            # start every worker first, then wait: their imports run in parallel
            pending = [self.start_worker("prefill", "p%d" % i, wait=False) for i in range(self.n_prefill)]
            pending += [self.start_worker("decode", "d%d" % i, wait=False) for i in range(self.n_decode)]
            for wid in pending:
                self.wait_worker(wid)
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self, role, wid, cfg=None, env=None, wait=True):
        """Starts a worker; returns its RPC endpoint (wait=False: its id,
        wait_worker(id) returns the endpoint)."""
        cfg = cfg or self.cfg
        host = self._host("pre" if role == "prefill" else "dec")
        e = dict(self.worker_env)
        e.update(env or {})
        e["PYTHONPATH"] = PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
        argv = [sys.executable, "-m", "crescent_serving.worker", "--role", role, "--id", wid,
                "--master", self.master, "--metadata", self.metadata, "--host", host,
                "--model", json.dumps(cfg.to_dict()), "--blocks", str(self.worker_blocks),
                "--protocol", self.protocol]
        if self.whole_kv:
            argv.append("--whole-kv")
        if "LOAD_BATCH_PAGES" in e:
            argv += ["--load-batch-pages", e.pop("LOAD_BATCH_PAGES")]
        p = self._start(argv, "pre" if role == "prefill" else "dec", e)
        self.workers[wid] = (p, None)
        return self.wait_worker(wid) if wait else wid

    def wait_worker(self, wid):
        p = self.workers[wid][0]
        m = _wait_line(p, r"READY id=\S+ rpc=(\S+)", "worker " + wid)
        self.workers[wid] = (p, m.group(1))
        return m.group(1)

    def endpoints(self, ids=None):
        return [ep for wid, (p, ep) in sorted(self.workers.items()) if ids is None or wid in ids]

    def kill(self, wid):
        p = self.workers[wid][0]
        p.send_signal(signal.SIGKILL)
        p.wait()

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()
        self.procs = []
        if self.net:
            self.net.down()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
