"""After the compile: the device-code gate, the platform tag and the smoke test; the
provenance record; stamping into a scratch directory inside the output and linking the finished
wheel into place (never over another). Also whether a wheel of exactly this plan is already
there."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name
from packaging.version import Version

from wheelsmith import __version__, locations
from wheelsmith.arch import ArchSet
from wheelsmith.builder import (
    audit,
    compilecache,
    hostlibs,
    manylinux,
    reproducible,
    shipped,
    stableabi,
    torchrange,
)
from wheelsmith.builder.compile import Compiled, log_path_of
from wheelsmith.builder.compilesetup import CompileSetup, read_guard_report
from wheelsmith.builder.linking import TorchEnv
from wheelsmith.builder.parallel import Parallelism
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.builder.request import RUNNER_INFO, BuildRequest, Reporter
from wheelsmith.builder.smoke import driver_stub_dir, smoke_test
from wheelsmith.builder.stamp import stamp
from wheelsmith.builder.verify import Release, check, check_pure, check_release, verify_wheel
from wheelsmith.errors import OutputError, WheelsmithError
from wheelsmith.files import place_no_clobber, scratch_dir, sha256_file
from wheelsmith.inventory import DeviceCode, wheel_inventory
from wheelsmith.toolchain import overlay, target
from wheelsmith.toolchain.foreign import emulated_python
from wheelsmith.toolchain.platform import pip_platforms
from wheelsmith.toolchain.tools import auditwheel_for, cuobjdump_for
from wheelsmith.toolchain.torchspan import Span, without_span
from wheelsmith.untrusted import clip
from wheelsmith.untrusted.provenance import read_provenance
from wheelsmith.wheelfile import WheelName

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Checked:
    """What the checks of a raw wheel found."""

    inventory: list[DeviceCode]
    smoke_output: str
    platform: dict[str, Any]  # manylinux.py's assessment: the tag and how it was found
    audit: dict[str, Any] | None = None  # audit.py's, of the binaries; None: a pure wheel
    torch_range: dict[str, Any] | None = None  # torchrange.py's; None: not asked for


def check_wheel(plan: BuildPlan, raw: Path, request: BuildRequest, work: Path,
                report: Reporter, *, libraries: tuple[hostlibs.Provided, ...] = ()
                ) -> Checked:
    """The release it is, nothing the sdist shipped prebuilt, none of its host libraries'
    shared objects, the device-code gate, the platform tag (manylinux.py), then the smoke
    test (with the host libraries' wheels the stamped wheel will require)."""
    report.stage("verify", f"release and device code of {raw.name}")
    shipped.refuse_vendored(raw, libraries)
    cuobjdump = cuobjdump_for(plan.toolchain, request.python)
    inventory = check_built(plan, raw, cuobjdump, work)
    auditwheel = auditwheel_for(plan.toolchain, request.python)
    platform = manylinux.assess(raw, auditwheel)
    report.stage("platform", platform.describe())
    audited = audit_built(plan, raw, inventory, cuobjdump=cuobjdump, auditwheel=auditwheel,
                          tag=platform.tag, libraries=hostlibs.lib_dirs(libraries))
    if audited is not None:
        report.stage("audit", "; ".join(audit.describe(audited)))
    recorded = audited.as_dict() if audited is not None else None
    toolchain = plan.toolchain
    if toolchain.target_site is not None:
        report.stage("smoke", f"import under qemu-user ({toolchain.platform}) against torch "
                              f"{toolchain.torch_version}")
        return Checked(inventory, smoke_emulated(plan, raw, work), platform.as_dict(), recorded)
    needs, runtime = runtime_requirements(plan, raw, hostlibs.requirements(libraries))
    report.stage("smoke", (f"import against torch {toolchain.torch_version}"
                           if toolchain.torch_version else "import against the toolchain's CUDA "
                           "runtime (no torch)") + describe_needs(needs))
    smoke_output = smoke_in(plan, raw, [toolchain.python], [toolchain.python, "-m", "pip"],
                            work, sites=(runtime,) if runtime is not None else (),
                            left_out=needs.left_out)
    if request.target is not None and request.target != toolchain.python:
        env = target.probe(request.target)
        report.stage("smoke", f"import in {request.target} against its torch {env.torch}")
        smoke_output += "\n" + smoke_in(plan, raw, [request.target], env.pip(), work)
    ranged = _torch_range(plan, raw, request, work, report) if request.torch_range else None
    return Checked(inventory, smoke_output, platform.as_dict(), recorded, ranged)


def _torch_range(plan: BuildPlan, raw: Path, request: BuildRequest, work: Path,
                 report: Reporter) -> dict[str, Any]:
    """The wheel's torch range (`--torch-range`), proven with the toolchain's Python."""
    toolchain = plan.toolchain
    env = TorchEnv(toolchain.site, toolchain.python) if toolchain.site is not None else None
    asked = request.torch_range or "all"
    minors = () if asked == "all" else tuple(m.strip() for m in asked.split(",") if m.strip())
    found = torchrange.run_range(raw, env, plan.archs, smoke=(plan.recipe.smoke_imports,
                                                              plan.recipe.smoke_gpu),
                                 torches=minors, work_dir=work)
    report.stage("torch range", found.summary())
    return found.as_dict()


def audit_built(plan: BuildPlan, raw: Path, inventory: list[DeviceCode], *, cuobjdump: Path,
                auditwheel: Path | None, tag: str, libraries: tuple[Path, ...] = ()
                ) -> audit.Audit | None:
    """The binary audit of a plan's wheel (none for a pure recipe's), its imports resolved
    against the toolchain's torch and the host libraries' directories (`libraries`); refused
    where one stays undefined or its symbol versions need more than `tag` allows."""
    if plan.recipe.kind == "pure":
        return None
    toolchain = plan.toolchain
    env = TorchEnv(toolchain.site, toolchain.python, libraries) \
        if toolchain.site is not None and toolchain.target_site is None else None
    why = ("a cross build: the target's import test under qemu-user loads it"
           if toolchain.target_site is not None else "the toolchain's site-packages is not known")
    arch = audit.arch_of(WheelName.parse(raw.name).platform)
    audited = audit.audit_wheel(raw, inventory, cuobjdump, env,
                                manylinux.policies_for(auditwheel, arch), not_resolved=why)
    audit.check(raw.name, audited, tag)
    return stable_checked(raw, audited, env) if plan.recipe.stable_abi else audited


def stable_checked(wheel: Path, audited: audit.Audit, env: TorchEnv | None) -> audit.Audit:
    """`audited` with the stable-ABI audit of `wheel` (stableabi.py); refused where it uses
    an unstable symbol."""
    stable = stableabi.audit_stable(wheel, env)
    stableabi.check_stable(wheel.name, stable)
    return dataclasses.replace(audited, stable=stable)


def runtime_requirements(plan: BuildPlan, raw: Path, extra: tuple[str, ...] = ()
                         ) -> tuple[overlay.RuntimeNeeds, Path | None]:
    """The wheel's runtime requirements (and `extra`, what stamping adds) the toolchain lacks
    (pinned as pip resolves them) and
    the directory they are installed in, for its smoke test: a user's pip installs them with
    the wheel, so its import may use them. What cannot be had (not on the index, no index: a
    container's build, an offline machine) is left out, each with why, and the smoke test
    goes on with the rest."""
    needs = overlay.runtime_needs(raw, plan.toolchain, extra)
    try:
        return needs, overlay.ensure(needs.pins, plan.toolchain, locations.cache_dir(),
                                     what=f"what {raw.name} requires")
    except WheelsmithError as exc:
        return needs.not_installed(clip(exc.message, 200)), None


def describe_needs(needs: overlay.RuntimeNeeds) -> str:
    """The smoke stage's words for what it installs beside the toolchain and leaves out."""
    said = ""
    if needs.pins:
        said += f", with what it requires that the toolchain lacks: {', '.join(needs.pins)}"
    if needs.left_out:
        said += ("; left out of what it requires (an import that needs it is not made): " +
                 "; ".join(item.describe() for item in needs.left_out))
    return said


def smoke_in(plan: BuildPlan, raw: Path, python: list[str | Path], pip: list[str | Path],
             work: Path, *, sites: tuple[Path, ...] = (), options: tuple[str, ...] = (),
             left_out: tuple[overlay.LeftOut, ...] = ()) -> str:
    return smoke_test(raw, python=python, pip=pip, cuda_home=plan.toolchain.cuda_home,
                      imports=plan.recipe.smoke_imports, gpu_code=plan.recipe.smoke_gpu,
                      archs=plan.archs, scratch=work / "smoke", log_path=log_path_of(work),
                      sites=sites, install_options=options, left_out=left_out,
                      libraries=() if plan.toolchain.torch_version else
                      (*cuda_runtime_dirs(plan.toolchain.cuda_home), *wheel_lib_dirs(sites)),
                      load_shared=plan.recipe.kind == "cuda")


def wheel_lib_dirs(sites: tuple[Path, ...]) -> tuple[Path, ...]:
    """The library directories NVIDIA's wheels installed in `sites` have (a host library the
    wheel requires, nvidia/nccl/lib): where a package that links no torch finds them."""
    return tuple(lib for site in sites for lib in sorted(site.glob("nvidia/*/lib")))


def cuda_runtime_dirs(cuda_home: Path) -> tuple[Path, ...]:
    """Where a package that links no torch finds the CUDA libraries it was linked with (torch
    loads its own): the toolchain's, and its driver stub where no driver is installed (a
    build machine without a GPU imports it as on a machine whose GPU is missing)."""
    stubs = driver_stub_dir(cuda_home)
    return (cuda_home / "lib", stubs) if stubs is not None else (cuda_home / "lib",)


def smoke_emulated(plan: BuildPlan, raw: Path, work: Path) -> str:
    """A cross build's wheel, imported by the target CPU's Python under qemu-user with the
    target site's torch (foreign.py); the wheel goes in by pip's tag rules for that CPU."""
    toolchain = plan.toolchain
    assert toolchain.target_site is not None
    version = toolchain.python_version
    python: list[str | Path] = [*emulated_python(toolchain.platform, version,
                                                 locations.cache_dir())]
    tags = [arg for tag in [*pip_platforms(toolchain.platform), f"linux_{toolchain.platform}"]
            for arg in ("--platform", tag)]
    options = ("--python-version", version, "--only-binary", ":all:", *tags)
    return smoke_in(plan, raw, python, [toolchain.python, "-m", "pip"], work,
                    sites=(toolchain.target_site,), options=options)


def check_built(plan: BuildPlan, wheel: Path, cuobjdump: Path, work: Path) -> list[DeviceCode]:
    """The gates of a plan's wheel: the recipe's package and version, nothing the sdist in
    `work` shipped prebuilt, then exactly the requested archs, or no device code at all for a
    pure recipe. Used where the wheel is built and again on the host after a container."""
    check_release(wheel, Release(plan.recipe.name, plan.release.version))
    shipped.refuse_passed_through(wheel, work)
    inventory = wheel_inventory(wheel, cuobjdump)
    if plan.recipe.kind == "pure":
        check_pure(wheel.name, inventory)
    else:
        check(wheel.name, inventory, plan.archs, plan.recipe.host_only)
    return inventory


def verify(wheel: Path, archs: ArchSet, *, python: Path, host_only: tuple[str, ...] = (),
           release: Release | None = None, env: TorchEnv | None = None,
           no_env: str = "") -> tuple[list[DeviceCode], audit.Audit]:
    """`wheelsmith verify`: the post-build check, on any wheel, and its binary audit, its
    imports resolved against `env` (None: `no_env` says why not), with the stable-ABI audit
    for a wheel labelled stable; `release`: the one its provenance records."""
    cuobjdump = cuobjdump_for(None, python)
    inventory = verify_wheel(wheel, archs, cuobjdump, host_only, release)
    platform = WheelName.parse(wheel.name).platform
    arch = audit.arch_of(platform)
    audited = audit.audit_wheel(wheel, inventory, cuobjdump, env, manylinux.policies_for(
        auditwheel_for(None, python), arch), not_resolved=no_env)
    audit.check(wheel.name, audited, platform)
    if stableabi.labelled_stable(wheel.name):
        audited = stable_checked(wheel, audited, env)
    return inventory, audited


def source_epoch(root: Path) -> int:
    """SOURCE_DATE_EPOCH from the newest file of the unpacked source (stable per sdist)."""
    newest = 0.0
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if not path.is_symlink():
                newest = max(newest, path.stat().st_mtime)
    return int(newest)


def up_to_date(plan: BuildPlan, out_dir: Path, *, rebuild: bool) -> Path | None:
    """A wheel in `out_dir` built from exactly this plan, if any; refuse silent overwrites."""
    if not out_dir.is_dir():
        return None
    for wheel in sorted(out_dir.glob("*.whl")):
        if not made_by(wheel.name, plan):
            continue  # the same package for another Python or CPU: another build's
        provenance = read_provenance(wheel)
        key = provenance.key if provenance else None
        if key == plan.key and not rebuild:
            return wheel
        if key != plan.key and not rebuild:
            raise OutputError(
                f"{wheel} exists and was built from different inputs (key {str(key)[:12]}, "
                f"now {plan.key[:12]})",
                hint="pass --rebuild to replace it, or choose another --out directory",
            )
    return None


def made_by(filename: str, plan: BuildPlan) -> bool:
    """Whether `filename` is the name this plan's wheel gets: its project, version and label
    (as PEP 503 names and PEP 440 versions: `1.0.0-post1` is `1.0.0.post1`; with whatever
    torch span its range proved), and the tags of its Python and CPU (a pure wheel's tags are
    everyone's)."""
    try:
        name = WheelName.parse(filename)
    except InvalidWheelFilename:
        return False
    unspanned = Version(f"{name.version.public}+{without_span(name.version.local or '')}") \
        if name.version.local else name.version
    if canonicalize_name(name.name) != canonicalize_name(plan.recipe.name) or \
            unspanned != Version(f"{plan.release.version}+{plan.local_label()}"):
        return False
    python, _, platform = name.tags.split("-")
    if plan.recipe.kind == "pure":
        return True
    cp = "cp" + plan.toolchain.python_version.replace(".", "")
    return cp in python.split(".") and platform.endswith(plan.toolchain.platform)


def provenance_record(plan: BuildPlan, checked: Checked, setup: CompileSetup,
                      compiled: Compiled, *, work: Path, seconds: float,
                      vendored: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The record stamped into the wheel (`<dist-info>/wheelsmith.json`)."""
    recipe, release, toolchain = plan.recipe, plan.release, plan.toolchain
    return {
        "schema": 1,
        "tool": f"wheelsmith {__version__}",
        "key": plan.key,
        "recipe": {"file": recipe.file.name, "file_sha256": sha256_file(recipe.file),
                   "package": recipe.name, "version": release.version},
        "source": plan.key_inputs()["recipe"]["source"],
        **({"carried": plan.key_inputs()["recipe"]["carry"]} if release.carried else {}),
        **({"libraries": [found.record() for found in setup.libraries]}
           if setup.libraries else {}),
        "patches": [{"file": p.path.name, "sha256": p.sha256} for p in release.patches],
        "toolchain": {**toolchain.identity(), "channel": toolchain.channel(),
                      # which toolkit compiled it (a toolchain's own: relative to it)
                      "cuda_home": reproducible.portable(toolchain.cuda_home, toolchain)},
        "nvcc": str(toolchain.nvcc_version),
        "archs_requested": str(plan.archs),
        "host_only": list(recipe.host_only),  # `wheelsmith verify` reads both
        "extra_env": dict(plan.extra_env),
        **({"stable_abi": {"floor": recipe.stable_abi.floor,  # recipes/stableabi.py
                           "torch_target_version": recipe.stable_abi.target_version()}}
           if recipe.stable_abi else {}),
        **reproducible.promise(setup.parallelism, setup.env),
        "device_code": [d.as_dict() for d in checked.inventory],
        **({"audit": checked.audit} if checked.audit is not None else {}),
        **({"vendored": vendored} if vendored else {}),  # the SBOM names them (sbom.py)
        **({"torch_range": checked.torch_range} if checked.torch_range else {}),  # run.json
        **({"torch_range_request": plan.torch_range} if plan.torch_range else {}),
        "build": {**_build_record(setup.parallelism, seconds, compiled),
                  "object_seconds": compiled.object_seconds},
        "smoke": checked.smoke_output.strip().splitlines(),
        "prebuild_check": (list(read_guard_report(setup.guard))
                           or "not run (the build used no ninja)"),
        "platform": checked.platform,
        "runner": json.loads(os.environ.get(RUNNER_INFO, '{"engine": "host"}')),
        "compile_cache": ({"backend": setup.cache.describe(),
                           **compilecache.stats(work, setup.source_seen)}
                          if setup.cache else None),
        "compile_farm": compiled.farm,
    }


def _build_record(parallelism: Parallelism, seconds: float, compiled: Compiled
                  ) -> dict[str, Any]:
    return {"seconds": seconds, "max_jobs": parallelism.jobs,
            "nvcc_threads": parallelism.nvcc_threads,
            "split_compile": parallelism.split_setting,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "raw_wheel": compiled.raw.name, "plan": list(compiled.plans)}


def write_output(plan: BuildPlan, raw: Path, request: BuildRequest,
                 provenance: dict[str, Any], epoch: int, *, requires: tuple[str, ...] = (),
                 span: Span | None = None) -> Path:
    """Stamp into a scratch directory inside the output, then move the finished file in;
    `requires`: the host libraries' wheels it requires; `span`: the torch span its range
    proved (its label and torch requirement state it)."""
    out_dir = request.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with scratch_dir(out_dir) as scratch:
        stamped = stamp(raw, scratch, label=plan.local_label(span),
                        torch_requirement=plan.torch_requirement(span), provenance=provenance,
                        epoch=epoch, platform=provenance["platform"]["tag"],
                        requires=requires)
        return place(stamped, out_dir, rebuild=request.rebuild)


def place(finished: Path, out_dir: Path, *, rebuild: bool) -> Path:
    """Move a finished wheel (on the same filesystem) into `out_dir`, never over another."""
    final = out_dir / finished.name
    WheelName.parse(final.name)  # the stamped name must stay a valid wheel filename
    if rebuild and final.exists():
        log.info("replacing %s (--rebuild)", final)
        finished.replace(final)
    elif not place_no_clobber(finished, final):
        raise OutputError(f"{final} appeared while building; not overwriting it",
                          hint="pass --rebuild to replace it")
    return final

