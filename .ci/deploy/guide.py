#!/usr/bin/env python3
"""README's "Deploying on hosts", word for word, on hosts simulated here.

Each host of the guide's topology is a network namespace with the
topology's address (joined to this machine by a veth pair on one bridge,
the operator's machine being 10.45.0.254) and a mount namespace of its own
in which /etc/seatfence, /var/lib/seatfence and /run/sf45 are its own
directories; the installed package's binary and unit are shared. There is
no systemd, so `systemctl` is .ci/deploy/systemctl (the unit's ExecStart as
its user, in the host's namespaces).

The steps are README's marked code blocks, in order:
  <!-- guide: file NAME -->     the block is written to NAME
  <!-- guide: append NAME -->   the block is appended to NAME
  <!-- guide: operator -->      the block runs in one bash (set -euo
                                pipefail) that lives through the guide, so
                                variables carry over as in a reader's shell
  <!-- guide: on H1 H2 ... -->  the block runs on each host, as root, with
                                HOST set, in a directory holding the package
                                and the host's files from out/hosts/HOST
                                (what the reader copies there)
  <!-- guide-test: kill H -->   the test's own step: host H dies (every
                                process SIGKILLed, its link down)
Usage (root): guide.py README.md PACKAGE.deb [WORKDIR]
"""

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BRIDGE = "sf45br"
OPERATOR_IP = "10.45.0.254"
STEP_TIMEOUT = 600  # seconds; generous: it only stops a hung step


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def steps(readme):
    """(kind, arg, body) for every marked block, in README order."""
    lines = open(readme).read().splitlines()
    out, i = [], 0
    marker = re.compile(r"^<!-- guide(-test)?: (\S+)(.*?) -->$")
    while i < len(lines):
        m = marker.match(lines[i].strip())
        i += 1
        if not m:
            continue
        test, kind, arg = m.group(1), m.group(2), m.group(3).strip()
        if test:
            out.append(("test-" + kind, arg, ""))
            continue
        while i < len(lines) and lines[i].strip() == "":
            i += 1
        if i >= len(lines) or not lines[i].startswith("```"):
            sys.exit(f"guide: the marker before line {i + 1} has no code block")
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        out.append((kind, arg, "\n".join(body) + "\n"))
    return out


class World:
    def __init__(self, work, deb):
        self.work = work
        self.deb = deb
        self.op_dir = os.path.join(work, "operator")
        self.mnt = os.path.join(work, "mnt")
        self.hosts = {}
        os.makedirs(self.op_dir)
        os.makedirs(os.path.join(work, "bin"))
        shutil.copy(os.path.join(os.path.dirname(__file__), "systemctl"), os.path.join(work, "bin"))
        self.operator = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=self.op_dir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        # The log names each command as it runs (`+ command`).
        self.operator.stdin.write("set -euo pipefail -x\nPS4='+ '\n")

    def network(self):
        self.teardown_network()
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{OPERATOR_IP}/16", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        # A host whose FORWARD policy is DROP (docker's) must pass the bridge.
        fwd = ["FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"]
        if shutil.which("iptables") and sh("iptables", "-w", "-C", *fwd, check=False).returncode:
            sh("iptables", "-w", "-I", *fwd)
        os.makedirs(self.mnt)
        sh("mount", "--bind", self.mnt, self.mnt)
        sh("mount", "--make-private", self.mnt)
        for d in ["/etc/seatfence", "/var/lib/seatfence", "/run/sf45"]:
            os.makedirs(d, exist_ok=True)

    @staticmethod
    def teardown_network():
        out = sh("ip", "-o", "link", "show", check=False).stdout
        for name in re.findall(r"^\d+: (v45-[^:@]+)", out, re.M):
            sh("ip", "link", "del", name, check=False)
        for ns in sh("ip", "netns", "list", check=False).stdout.split():
            if ns.startswith("sf45-"):
                for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
                    sh("kill", "-9", pid, check=False)
                sh("ip", "netns", "del", ns, check=False)
        sh("ip", "link", "del", BRIDGE, check=False)

    def host(self, name, address):
        """The host `name` at `address`, made on first use."""
        if name in self.hosts:
            return self.hosts[name]
        ns, veth = f"sf45-{name}", f"v45-{name}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "p")
        sh("ip", "link", "set", veth + "p", "netns", ns)
        sh("ip", "-n", ns, "link", "set", veth + "p", "name", "eth0")
        sh("ip", "-n", ns, "addr", "add", f"{address}/16", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", OPERATOR_IP)
        sh("ip", "link", "set", veth, "master", BRIDGE)
        sh("ip", "link", "set", veth, "up")
        root = os.path.join(self.work, "hosts", name)
        dirs = {d: os.path.join(root, d) for d in ["etc", "varlib", "run", "copied"]}
        for d in dirs.values():
            os.makedirs(d)
        mnt = os.path.join(self.mnt, name)
        open(mnt, "w").close()
        binds = " && ".join(
            f"mount --bind {src} {dst}"
            for src, dst in [
                (dirs["etc"], "/etc/seatfence"),
                (dirs["varlib"], "/var/lib/seatfence"),
                (dirs["run"], "/run/sf45"),
            ]
        )
        sh("unshare", f"--mount={mnt}", "--propagation", "private", "sh", "-c", binds)
        self.hosts[name] = {"ns": ns, "mnt": mnt, "copied": dirs["copied"], "run": dirs["run"]}
        return self.hosts[name]

    def address_of(self, name):
        """The host's address in the guide's topology.toml (as it is now)."""
        text = open(os.path.join(self.op_dir, "topology.toml")).read()
        for block in text.split("[[host]]")[1:]:
            if re.search(rf'^name = "{re.escape(name)}"', block, re.M):
                return re.search(r'^address = "([^"]+)"', block, re.M).group(1)
        sys.exit(f"guide: no host {name} in topology.toml")

    def run_operator(self, body):
        done = f"__guide_step_{time.monotonic_ns()}__"
        self.operator.stdin.write(body + f"\necho {done}\n")
        self.operator.stdin.flush()
        deadline = time.monotonic() + STEP_TIMEOUT
        # Raw reads with a deadline: a command that hangs silently (a
        # request that never answers) still ends the step at its time.
        fd, buf = self.operator.stdout.fileno(), ""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                sys.exit("guide: an operator step ran past its time")
            ready, _, _ = select.select([fd], [], [], min(left, 5.0))
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                sys.exit("guide: an operator command failed (above)")
            buf += chunk.decode(errors="replace")
            while "\n" in buf:
                line, buf = buf.split("\n", 1)
                if line.strip() == done:
                    return
                print("    " + line)

    def run_on(self, name, body):
        h = self.host(name, self.address_of(name))
        # What the reader copies to the host: the package and its files.
        shutil.copy(self.deb, h["copied"])
        dst = os.path.join(h["copied"], name)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(os.path.join(self.op_dir, "out", "hosts", name), dst)
        env = dict(os.environ, HOST=name, PATH=f"{self.work}/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        script = f"cd {h['copied']}\n{body}"
        r = subprocess.run(
            ["nsenter", f"--net=/run/netns/{h['ns']}", f"--mount={h['mnt']}", "--",
             "bash", "-euo", "pipefail", "-c", script],
            env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT,
        )
        for line in (r.stdout + r.stderr).splitlines():
            print(f"    [{name}] {line}")
        if r.returncode:
            log = os.path.join(h["run"], "node.log")
            if os.path.exists(log):
                print(open(log).read()[-4000:])
            sys.exit(f"guide: the step on {name} failed (exit {r.returncode})")

    def kill(self, name):
        ns = self.hosts[name]["ns"]
        for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
            sh("kill", "-9", pid, check=False)
        sh("ip", "-n", ns, "link", "set", "eth0", "down")

    def close(self):
        try:
            os.killpg(self.operator.pid, 9)
        except ProcessLookupError:
            pass
        sh("pkill", "-9", "-f", f"gateway --listen {OPERATOR_IP}:", check=False)
        for h in self.hosts.values():
            for pid in sh("ip", "netns", "pids", h["ns"], check=False).stdout.split():
                sh("kill", "-9", pid, check=False)
        time.sleep(0.5)
        for h in self.hosts.values():
            sh("umount", h["mnt"], check=False)
        sh("umount", self.mnt, check=False)
        self.teardown_network()


def main():
    if os.geteuid() != 0:
        sys.exit("guide: needs root (network and mount namespaces)")
    readme, deb = sys.argv[1], os.path.abspath(sys.argv[2])
    work = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp(prefix="seatfence-guide-")
    world = World(work, deb)
    # A CI run stopped with SIGTERM still removes the hosts (finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("guide: terminated"))
    ok = False
    try:
        world.network()
        todo = steps(readme)
        if not any(k == "on" for k, _, _ in todo):
            sys.exit("guide: README has no marked steps")
        for kind, arg, body in todo:
            started = time.monotonic()
            print(f"guide: {kind} {arg}".rstrip(), flush=True)
            if kind in ("file", "append"):
                with open(os.path.join(world.op_dir, arg), "w" if kind == "file" else "a") as f:
                    f.write(body)
            elif kind == "operator":
                world.run_operator(body)
            elif kind == "on":
                for name in arg.split():
                    world.run_on(name, body)
            elif kind == "test-kill":
                world.kill(arg)
            else:
                sys.exit(f"guide: unknown step {kind}")
            print(f"guide: ... {time.monotonic() - started:.1f} s", flush=True)
        ok = True
        print("guide: every step of README's \"Deploying on hosts\" passed")
    finally:
        world.close()
        if ok and not os.environ.get("SEATFENCE_KEEP_GUIDE"):
            shutil.rmtree(work, ignore_errors=True)
        elif not ok:
            print(f"guide: FAILED; the hosts' files and logs are in {work}/hosts/*/run")


if __name__ == "__main__":
    main()
