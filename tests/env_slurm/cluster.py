"""A real single-node SLURM cluster on loopback: munged, slurmctld and slurmd, started and stopped by PID.

Used by the ``slurm`` fixture of this test package, and runnable by hand or from ``.ci/run``::

    python -m tests.env_slurm.cluster start /tmp/slurm   # prints: export SLURM_CONF=/tmp/slurm/slurm.conf
    SLURM_CONF=/tmp/slurm/slurm.conf srun -n2 hostname
    python -m tests.env_slurm.cluster stop /tmp/slurm    # stops every daemon it started, checks ports

It installs nothing: the Debian packages ``slurmctld slurmd slurm-client munge`` must be there
(``apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge``). Nothing
outside the cluster directory is touched: munged runs with its own key, socket and PID file there
(so a system munged, if any, is left alone), and every client reaches the cluster through
``SLURM_CONF``. The configuration is the one measured in ``shared/notes/slurm.md``, with
``cred_expire=10`` and one-second scheduler passes so that a requeued job runs again in about 11 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = ["REQUIRED_BINARIES", "Cluster", "ClusterError", "missing_requirements", "start"]

#: The programs the cluster needs, with the Debian package that provides each.
REQUIRED_BINARIES: Final = {
    "munged": "munge",
    "munge": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "srun": "slurm-client",
    "sbatch": "slurm-client",
    "scancel": "slurm-client",
    "scontrol": "slurm-client",
    "sinfo": "slurm-client",
    "squeue": "slurm-client",
}
CTLD_PORT: Final = 6817
SLURMD_PORT: Final = 6818
_SBIN: Final = ("/usr/sbin", "/sbin", "/usr/local/sbin")
_STOP_ORDER: Final = ("slurmd", "slurmctld", "munged")

_CONFIG: Final = """\
ClusterName=torchplug
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={base}/munge/munge.socket,cred_expire=10
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
CommunicationParameters=NoInAddrAny
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/run/slurmctld.pid
SlurmdPidFile={base}/run/slurmd.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
JobRequeue=1
NodeName={host} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class ClusterError(RuntimeError):
    """The cluster could not be started or stopped cleanly; the message carries the daemon logs."""


def which(name: str) -> str | None:
    """``shutil.which`` that also looks in the sbin folders (a non-login root shell may lack them on PATH)."""
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN))


def missing_requirements() -> str | None:
    """None when a cluster can be started here, else why not (for a skip reason)."""
    missing = sorted(name for name in REQUIRED_BINARIES if which(name) is None)
    if missing:
        packages = " ".join(sorted({REQUIRED_BINARIES[name] for name in missing}))
        return (
            f"SLURM is not installed (missing: {', '.join(missing)}). Hint: apt-get install -y "
            f"--no-install-recommends {packages}"
        )
    if os.geteuid() != 0:
        return "a loopback SLURM cluster needs root (slurmd runs jobs as their user); run the tests as root"
    host = short_hostname()
    try:
        socket.gethostbyname(host)
    except OSError:
        return f"the host name {host!r} does not resolve; add '127.0.0.1 {host}' to /etc/hosts"
    return None


def short_hostname() -> str:
    """``hostname -s``: the name slurmd registers under."""
    return socket.gethostname().split(".")[0]


def port_open(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Cluster:
    """A running cluster: its directory, configuration and daemon PIDs.

    Attributes:
        base: The cluster directory (configuration, state, spool, logs, munge key and socket).
        pids: PID of each daemon this object started, by name.
        ports: The slurmctld and slurmd ports (6817 and 6818 unless those were taken).
    """

    base: Path
    pids: dict[str, int] = field(default_factory=dict)
    ports: tuple[int, int] = (CTLD_PORT, SLURMD_PORT)
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    @property
    def conf(self) -> Path:
        """The rendered ``slurm.conf``."""
        return self.base / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """``os.environ`` with ``SLURM_CONF`` pointing here and no other ``SLURM_*`` (from an outer job, say)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return {**env, "SLURM_CONF": str(self.conf)}

    def run(
        self, argv: list[str], timeout: float = 60, check: bool = True, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run a client command (``srun``, ``sbatch``...) against this cluster and capture its output."""
        env = {**self.env, **kwargs.pop("env", {})}
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
        if check and result.returncode != 0:
            raise ClusterError(
                f"{' '.join(argv)} exited with {result.returncode}\nstdout:\n{result.stdout}\n"
                f"stderr:\n{result.stderr}\n{self.logs()}"
            )
        return result

    def job_state(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (JobState, Restarts, Reason...); empty once the job is forgotten."""
        result = self.run(["scontrol", "show", "job", "-o", job_id], check=False)
        fields: dict[str, str] = {}
        for token in result.stdout.split():
            key, sep, value = token.partition("=")
            if sep:
                fields[key] = value
        return fields

    def logs(self, lines: int = 60) -> str:
        """The last lines of each daemon log, for failure messages."""
        parts = []
        for path in sorted((self.base / "log").glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"==> {path} <==\n" + "\n".join(text))
        return "\n".join(parts)

    # -- stopping ---------------------------------------------------------------------------------

    def stop(self, timeout: float = 20) -> list[str]:
        """Cancel every job, then stop slurmd, slurmctld and munged (by PID, in that order).

        Returns:
            Problems found afterwards (a daemon that needed SIGKILL, a port still open); empty when clean.
        """
        problems: list[str] = []
        if self.pids.get("slurmctld") and _alive(self.pids["slurmctld"]):
            self._cancel_jobs(timeout)
        for name in _STOP_ORDER:
            pid = self.pids.get(name)
            if pid is not None and not self._terminate(name, pid, timeout):
                problems.append(f"{name} (pid {pid}) ignored SIGTERM for {timeout:.0f} s and was killed")
        problems += [f"port {port} still open after stop" for port in self.ports if port_open(port)]
        self.pids.clear()
        self._save()
        return problems

    def _cancel_jobs(self, timeout: float) -> None:
        self.run(["scancel", "--user", str(os.geteuid())], check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            queue = self.run(["squeue", "-h", "-o", "%i"], check=False)
            if queue.returncode != 0 or not queue.stdout.strip():
                return
            time.sleep(0.5)

    def _terminate(self, name: str, pid: int, timeout: float) -> bool:
        """SIGTERM ``pid`` and wait for it; SIGKILL after ``timeout``. True when SIGTERM was enough."""
        if not _is_ours(pid, name, self.base):
            return True  # already gone (and the PID perhaps reused): nothing of ours to stop
        os.kill(pid, signal.SIGTERM)
        if self._wait(name, pid, timeout):
            return True
        os.kill(pid, signal.SIGKILL)
        self._wait(name, pid, 5)
        return False

    def _wait(self, name: str, pid: int, timeout: float) -> bool:
        proc = self._procs.get(name)
        if proc is not None:
            try:
                proc.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while _alive(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def _save(self) -> None:
        (self.base / "cluster.json").write_text(json.dumps({"pids": self.pids, "ports": self.ports}))

    @classmethod
    def load(cls, base: Path) -> Cluster:
        """The cluster started earlier in ``base`` (by another process, for example the CLI)."""
        state = json.loads((base / "cluster.json").read_text())
        return cls(base.resolve(), state["pids"], tuple(state["ports"]))


def start(base: Path | None = None, cpus: int | None = None, timeout: float = 60) -> Cluster:
    """Render the configuration into ``base`` (a new temporary folder by default) and start the daemons.

    Args:
        base: The cluster directory; created if needed. munged requires every folder on the way to
            its socket to be searchable by all, so the default is a fresh folder under the system
            temporary directory, not pytest's private one.
        cpus: CPUs the node declares (default: ``max(nproc, 4)``, so that a 2-task job and a few
            concurrent steps fit on a 2-core machine; ``config_overrides`` lets slurmd accept it).
        timeout: Seconds to wait for the node to become ``idle``.

    SLURM's own ports 6817 and 6818 are used when free; when another cluster holds them (a second
    test run on the same machine), two free ports are taken instead.

    Raises:
        ClusterError: A requirement is missing, or a daemon did not come up (the message carries the logs).
    """
    reason = missing_requirements()
    if reason is not None:
        raise ClusterError(reason)
    base = Path(base) if base is not None else Path(tempfile.mkdtemp(prefix="torchplug-slurm-"))
    cluster = Cluster(base.resolve(), ports=_choose_ports())
    _prepare(cluster, cpus or max(os.cpu_count() or 1, 4))
    try:
        _start_daemons(cluster)
        _wait_idle(cluster, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _choose_ports() -> tuple[int, int]:
    if not port_open(CTLD_PORT) and not port_open(SLURMD_PORT):
        return CTLD_PORT, SLURMD_PORT
    sockets = [socket.socket() for _ in range(2)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        ctld, slurmd = (sock.getsockname()[1] for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()
    return ctld, slurmd


def _prepare(cluster: Cluster, cpus: int) -> None:
    base = cluster.base
    for sub in ("state", "spool", "run", "log", "munge"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    (base / "munge").chmod(0o755)
    key = base / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(128))
    key.chmod(0o600)
    host = short_hostname()
    ctld_port, slurmd_port = cluster.ports
    (base / "slurm.conf").write_text(
        _CONFIG.format(host=host, base=base, cpus=cpus, ctld_port=ctld_port, slurmd_port=slurmd_port)
    )


def _spawn(cluster: Cluster, name: str, argv: list[str]) -> None:
    log = open(cluster.base / "log" / f"{name}.stdout", "wb")  # noqa: SIM115 - the daemon owns it
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "SLURM_CONF": str(cluster.conf)},
    )
    log.close()
    cluster._procs[name] = proc
    cluster.pids[name] = proc.pid
    cluster._save()


def _start_daemons(cluster: Cluster) -> None:
    munge_dir = cluster.base / "munge"
    _spawn(
        cluster,
        "munged",
        [
            str(which("munged")),
            "--foreground",
            f"--key-file={munge_dir / 'munge.key'}",
            f"--socket={munge_dir / 'munge.socket'}",
            f"--pid-file={munge_dir / 'munged.pid'}",
            f"--log-file={cluster.base / 'log' / 'munged.log'}",
            f"--seed-file={munge_dir / 'munged.seed'}",
        ],
    )
    _wait_for(lambda: (munge_dir / "munge.socket").exists(), 10, "munged to create its socket", cluster)
    conf = str(cluster.conf)
    _spawn(cluster, "slurmctld", [str(which("slurmctld")), "-D", "-f", conf])
    _wait_for(lambda: port_open(cluster.ports[0]), 20, f"slurmctld to listen on port {cluster.ports[0]}", cluster)
    _spawn(cluster, "slurmd", [str(which("slurmd")), "-D", "-f", conf])


def _wait_idle(cluster: Cluster, timeout: float) -> None:
    def idle() -> bool:
        result = cluster.run(["sinfo", "-h", "-N", "-o", "%T"], check=False)
        return result.stdout.strip() == "idle"

    _wait_for(idle, timeout, "the node to become idle (sinfo)", cluster)


def _wait_for(ready: Any, timeout: float, what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        dead = [name for name, proc in cluster._procs.items() if proc.poll() is not None]
        if dead or time.monotonic() > deadline:
            why = f"{', '.join(dead)} exited" if dead else f"timed out after {timeout:.0f} s"
            raise ClusterError(f"Waiting for {what}: {why}.\n{cluster.logs()}")
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except (OSError, IndexError):
        return False


def _is_ours(pid: int, name: str, base: Path) -> bool:
    """Whether ``pid`` is still the daemon we started (guards against a reused PID)."""
    if not _alive(pid):
        return False
    with contextlib.suppress(OSError):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        return name in cmdline and str(base) in cmdline
    return False


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.env_slurm.cluster", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["start", "stop", "check"])
    parser.add_argument("directory", nargs="?", type=Path, help="the cluster directory (start: created)")
    args = parser.parse_args(argv)
    if args.action == "check":
        reason = missing_requirements()
        print(reason or "ok: a loopback SLURM cluster can be started here")
        return 1 if reason else 0
    if args.directory is None:
        parser.error(f"{args.action} needs the cluster directory")
    if args.action == "start":
        started = time.monotonic()
        cluster = start(args.directory)
        print(
            f"# cluster up in {time.monotonic() - started:.1f} s: pids {cluster.pids}, ports {cluster.ports}",
            file=sys.stderr,
        )
        print(f"export SLURM_CONF={cluster.conf}")
        return 0
    problems = Cluster.load(args.directory).stop()
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(_main())
