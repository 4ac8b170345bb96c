"""What publishing into the index refuses, decided in one place: `publish` asks about a built
wheel under the index lock, nightly about the wheel a cell's plan will build, before anything
is compiled (fleet/verdict.py). The rules and their messages are here; each caller words the
hint for its users (publish names its options, nightly the keys of matrix.yaml).

Over the ledger folded (`IndexState`, every line that names the project):
  - a published file never changes: a file name has one content in the whole index (a built
    wheel's content is its sha256; a planned one's its content key: one key, one set of bytes);
  - one arch set per version per channel: pip picks among local labels by sorting, not by the
    user's GPU, so a second arch set of a version would hand some users a wheel without theirs.
A wheel whose file its channel lists already is held there (publishing it again is a no-op);
whether that file is yanked is for the caller to weigh.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from packaging.version import Version

from wheelsmith.errors import FileConflictError, PublishError, WheelsmithError
from wheelsmith.index.ledger import FileRecord, IndexState, ProjectState

IMMUTABLE = "a published file never changes"
ONE_ARCH_SET = "one arch set per version per channel"


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """A wheel to be published into `channel`: a built one (`sha256` known; `named`: its file
    name), or one a plan will build (`sha256` None, its content is its `key`; `named`: the
    names it may get, known up to the glibc floor in its platform tag)."""

    channel: str
    project: str  # normalized (PEP 503)
    version: str
    archs: str | None  # None: not a wheelsmith build (no provenance)
    key: str | None
    named: Callable[[str], bool]
    sha256: str | None = None

    @classmethod
    def built(cls, record: FileRecord) -> Claim:
        return cls(channel=record.channel, project=record.project, version=record.version,
                   archs=record.archs, key=record.key,
                   named=lambda filename: filename == record.filename, sha256=record.sha256)

    def same_content(self, held: FileRecord) -> bool:
        if self.sha256 is not None:
            return held.sha256 == self.sha256
        return self.key is not None and held.key == self.key


@dataclass(frozen=True, kw_only=True, slots=True)
class Refusal:
    """A rule that refuses `claim`, met at the published file `held`."""

    rule: str  # IMMUTABLE or ONE_ARCH_SET
    message: str  # what the index holds and what the claim is
    held: FileRecord
    claim: Claim

    def error(self, hint: str, lead: str = "") -> WheelsmithError:
        """The refusal as the error it is (its exit code: 13 a changed file, 12 an arch
        set), its message after `lead`."""
        kind = FileConflictError if self.rule == IMMUTABLE else PublishError
        return kind(lead + self.message, hint=hint)


Advice = Callable[[Refusal], str]  # a refusal's hint, in the words of the caller's users


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a claim stands: its file `held` in its channel already (`yanked`: that file's yank
    reason), or refused by a rule, or neither: free to be published."""

    held: FileRecord | None = None
    yanked: str | None = None
    refusal: Refusal | None = None


def judge(state: IndexState, claim: Claim) -> Standing:
    """The standing of `claim` in the index whose ledger `state` folds (at least every line
    that names the claim's project)."""
    project = state.channels.get(claim.channel, {}).get(claim.project, ProjectState())
    held = next((r for r in project.files.values()
                 if claim.named(r.filename) and claim.same_content(r)), None)
    if held is not None:
        return Standing(held=held, yanked=project.yanked.get(held.filename))
    changed = next((r for r in state.by_filename.values() if r.project == claim.project
                    and claim.named(r.filename) and not claim.same_content(r)), None)
    if changed is not None:  # in any channel: a name has one content in the whole index
        return Standing(refusal=_changed(changed, claim))
    return Standing(refusal=_other_arch_set(project, claim))


def _changed(held: FileRecord, claim: Claim) -> Refusal:
    if claim.sha256 is not None:
        facts = f"with sha256 {held.sha256}; this file has {claim.sha256}"
    else:
        facts = (f"from content key {_short(held.key)}; this build's content key is "
                 f"{_short(claim.key)}")
    return Refusal(rule=IMMUTABLE, held=held, claim=claim,
                   message=f"{held.filename} was published on {held.upload_time} {facts}")


def _short(key: str | None) -> str:
    return key[:12] if key else "none (not a wheelsmith build)"


def _other_arch_set(project: ProjectState, claim: Claim) -> Refusal | None:
    if claim.archs is None:
        return None
    public = Version(claim.version).public
    for other in project.files.values():
        if Version(other.version).public == public and other.archs not in (None, claim.archs):
            return Refusal(rule=ONE_ARCH_SET, held=other, claim=claim, message=(
                f"channel {claim.channel} already holds {claim.project} {public} for archs "
                f"{other.archs}; this wheel is for {claim.archs}"))
    return None
