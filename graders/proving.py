"""check-exercises: prove that every exercise can tell right from each of its known bugs, and
from every small edit of its reference solution (`graders.mutation`).

Trusted code only (the reference, the starter, the declared bugs, the reference's mutants), so
it runs in this process, without a sandbox, through the very judging that grades learners.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from graders import harness
from graders.claims import CLAIMS
from graders.diagnosis import explanations
from graders.exercise import Exercise, Variant, for_learner
from graders.explanation import Traces
from graders.grading import (
    Failure,
    failure_report,
    judge,
    non_finite_failure,
    trace_failure,
    trusted_trajectories,
)
from graders.judging import batch_of, case_data, close_values, loss_and_gradients, same_trace
from graders.kinds import kind_of
from graders.mutation import Mutant, reference_mutants
from graders.optimizers import declared_optimizer
from graders.report import GradeReport
from graders.sentences import Sentence
from graders.starter import is_starter_source, not_started_report
from graders.trace import CaseTrace, NonFiniteValue, parse_trace

log = logging.getLogger(__name__)

# The mutant that gives clip_grad_norm_ a used-up generator (mutation.PATTERNS) makes torch warn
# that nothing was clipped: that is the mistake it stands for, not news for the operator.
warnings.filterwarnings(
    "ignore", message=r"`parameters` is an empty generator", category=UserWarning
)


def trace_source(exercise: Exercise, source: str) -> tuple[dict[str, CaseTrace], Failure | None]:
    """Trace trusted source in this process, as the sandbox would: its cases, or its failure."""
    specs = [spec.harness_spec() for spec in exercise.cases]
    kind = kind_of(exercise)
    document = harness.run_submission(source, kind.record, exercise.entry_point, specs)
    traces: dict[str, CaseTrace] = {}
    try:
        trace = parse_trace(json.dumps(document).encode(), kind.trace, list(exercise.cases))
    except NonFiniteValue as error:  # a mutant's training may blow up
        return traces, non_finite_failure(error)
    return traces, trace_failure(exercise, trace, list(exercise.cases), traces)


def judge_source(exercise: Exercise, source: str) -> GradeReport:
    """Grade trusted source in this process: the same trace, parsing and judging as grade()."""
    return told(exercise, source)[0]


def told(exercise: Exercise, source: str) -> tuple[GradeReport, Traces]:
    """judge_source's report, with the traces it was judged from (empty when not traced)."""
    if is_starter_source(exercise, source):
        return not_started_report(exercise), {}
    traces, failure = trace_source(exercise, source)
    if failure is not None:
        return failure_report(exercise, failure), traces
    return judge(exercise, traces), traces


def false_claims(exercise: Exercise, report: GradeReport, traces: Traces) -> tuple[list[str], int]:
    """Every claim (`graders.claims`) said in a report whose predicate the program's own recorded
    calls in the visible cases do not bear out, one line each; and how many claims were said.

    A claim about one call must hold of some call; one about every call, of each.
    """
    texts = [report.feedback, *(check.message for check in report.checks)]
    calls = [
        record["calls"]
        for spec in exercise.cases
        if not spec.hidden and spec.id in traces
        for record in traces[spec.id].records
        if record is not None and "calls" in record
    ]
    problems, said = [], 0
    for claim in CLAIMS:
        if not any(claim.words in text for text in texts):
            continue
        said += 1
        holds = all(map(claim.holds, calls)) if claim.every else any(map(claim.holds, calls))
        if not (calls and holds):
            problems.append(f"{exercise.id}: told {claim.words!r}, which its calls contradict")
    return problems, said


def unworded_checks(exercise: Exercise, report: GradeReport) -> list[str]:
    """Each check message said as plain text, not as a declared sentence (graders.sentences):
    its words would be stored, not made when read, and rewording them would mark every graded
    result for regrade."""
    return [
        f"{exercise.id}: check {check.id}'s message is a plain text, not a declared Sentence "
        f'(docs/authoring.md, "A check\'s sentences"): {check.message[:80]!r}'
        for check in report.checks
        if check.said is None
    ]


@dataclass(frozen=True)
class MutantVerdict:
    """How the grader took one mutant of the reference; `report` is None for an equivalent one."""

    mutant: Mutant
    report: GradeReport | None
    told: GradeReport | None = None  # what it is told, an equivalent one's too
    traces: Traces = field(default_factory=dict)


@dataclass
class Soundness:
    """What check-exercises found about one exercise: its problems and how its mutants fared."""

    problems: list[str] = field(default_factory=list)
    mutants: list[MutantVerdict] = field(default_factory=list)
    claims_checked: int = 0

    def survivors(self) -> list[Mutant]:
        return [
            v.mutant
            for v in self.mutants
            # Every check, those with no points too (a fact the code could forge teaches).
            if v.report is not None
            and all(c.passed for c in v.report.checks)
            and not v.mutant.right
        ]

    def only_incorrect(self) -> list[Mutant]:
        return [
            v.mutant
            for v in self.mutants
            if v.report is not None
            and v.report.score < v.report.max_score
            and v.report.diagnosis == "incorrect"
        ]


def judge_mutant(exercise: Exercise, mutant: Mutant) -> MutantVerdict:
    """Grade a mutant unless it is equivalent: every recorded value the same as the reference's."""
    reference = trusted_trajectories(exercise)["reference"]
    traces, failure = trace_source(exercise, mutant.source)
    report = failure_report(exercise, failure) if failure else judge(exercise, traces)
    if failure is None and all(
        same_trace(traces[spec.id], reference[spec.id]) for spec in exercise.cases
    ):
        return MutantVerdict(mutant, None, report, traces)
    return MutantVerdict(mutant, report, report, traces)


def prove(exercise: Exercise) -> list[str]:
    """Every way the exercise is unsound, each said with what shows it; empty when sound."""
    return soundness(exercise).problems + variant_problems(exercise) + wording_problems(exercise)


def proof_cache_dir() -> Path:
    """Where proofs are kept between runs: LOOPGRADE_PROOF_CACHE_DIR, else the data
    directory's `proofs/` (LOOPGRADE_DATA_DIR, default `data`, as the server's settings)."""
    chosen = os.environ.get("LOOPGRADE_PROOF_CACHE_DIR")
    if chosen:
        return Path(chosen)
    return Path(os.environ.get("LOOPGRADE_DATA_DIR") or "data") / "proofs"


FOLDER = "{folder}"


def _proof_file(exercise: Exercise) -> str:
    """The proof's file name, from what a proof is a function of: the exercise's version (its
    folder and the grader code that judges it), the proof's own code, and torch."""
    # `correct` is no part of the version (it changes no grade) but is proven (wording_problems).
    digest = hashlib.sha256(
        f"{exercise.id}\0{exercise.version}\0{exercise.correct}\0{torch.__version__}".encode()
    )
    for module in ("proving.py", "mutation.py"):
        digest.update(b"\0" + (Path(__file__).parent / module).read_bytes())
    return f"{exercise.id}-{digest.hexdigest()[:32]}.json"


def proven_problems(exercise: Exercise) -> list[str]:
    """prove(exercise), read from the proof cache when this version was proven before (by the
    server or by check-exercises), else proven here and kept there."""
    path = proof_cache_dir() / _proof_file(exercise)
    try:
        kept = json.loads(path.read_text())
        if isinstance(kept, list) and all(isinstance(problem, str) for problem in kept):
            return [problem.replace(FOLDER, exercise.folder or ".") for problem in kept]
    except (OSError, ValueError):
        pass  # not proven yet, or a damaged file: prove again
    problems = prove(exercise)
    keep_proof(exercise, problems)
    return problems


def keep_proof(exercise: Exercise, problems: list[str]) -> None:
    """Keep what proving this version found; a cache that cannot be written only costs time."""
    directory = proof_cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # Written whole, then renamed: a process reading it sees the old file or the new one.
        with tempfile.NamedTemporaryFile("w", dir=directory, delete=False) as file:
            # The folder's place is no part of the version: a copy elsewhere reads its own.
            here = exercise.folder or FOLDER
            json.dump([problem.replace(here, FOLDER) for problem in problems], file)
        os.replace(file.name, directory / _proof_file(exercise))
    except OSError as exc:
        log.warning("the proof of %s is not kept in %s: %s", exercise.id, directory, exc)


def wording_problems(exercise: Exercise) -> list[str]:
    """What an exercise must say that the grader cannot make up for it (its `correct` text),
    and what that text may not say (`unmeasured_in_correct`)."""
    if exercise.correct:
        return unmeasured_in_correct(exercise)
    return [
        f"{exercise.folder}/exercise.toml: correct: missing: add one sentence saying what a "
        "submission that passes every check does (the learner reads it)"
    ]


CODE_SPAN = re.compile(r"`([^`]*)`")
# Code written as a word: a call, a dotted name, a name with an underscore.
CODE_WORD = re.compile(r"\w+\(\)|\b\w+(?:\.\w+)+|\b\w*_\w+")
# Words for how code gets its values (what it calls, where it runs, how it copies), which a
# check that compares values does not see: a correct answer may get the same values any way.
WAYS = re.compile(
    r"\b(in place|under|autocast|backward|backpropagat\w*|unscal\w*|clon\w*|clear\w*"
    r"|no.grad|detach\w*|deepcopy)\b",
    re.IGNORECASE,
)


def unmeasured_in_correct(exercise: Exercise) -> list[str]:
    """Each name of code, or way of writing it, that the `correct` text says and no passed
    sentence of the exercise's checks does: praise of what the checks never measured.

    A correct text says the values the checks compared ("after every call the weights equal
    ..."), never how the code got them: a code span must name the function, one of its
    arguments, or a code span of a check's passed sentence; a word of code or of a way, a word
    one of those sentences says.
    """
    passed = [kind_of(exercise).judge.checks[check] for check in exercise.checks]
    measured = " ".join(s.text if isinstance(s, Sentence) else s for s in passed)
    names = set(re.findall(r"\w+", exercise.signature))
    spans = set(CODE_SPAN.findall(measured))
    text = exercise.correct
    prose = CODE_SPAN.sub(" ", text)
    unmeasured = [f"`{span}`" for span in CODE_SPAN.findall(text) if span not in names | spans]
    unmeasured += [
        word
        for word in CODE_WORD.findall(prose) + [m.group() for m in WAYS.finditer(prose)]
        if word.lower() not in measured.lower()
    ]
    return [
        f"{exercise.folder}/exercise.toml: correct: says {word}, which none of its checks "
        "measures: say the values the checks compared, not how the code got them"
        for word in dict.fromkeys(unmeasured)
    ]


# A per-learner exercise is proven on so many learners' seeds besides its declared ones: a
# visible case must tell the known bugs apart whatever seed a learner draws.
PROVEN_VARIANTS = 3


def variant_problems(exercise: Exercise) -> list[str]:
    """What is unsound on the seeds of a few made-up learners; empty for a fixed exercise."""
    if exercise.case_seeds == "fixed":
        return []
    problems = []
    for number in range(1, PROVEN_VARIANTS + 1):
        variant = for_learner(exercise, f"check-exercises:{number}")
        seeds = ", ".join(f"{c.id} seed {c.seed}" for c in variant.cases if not c.hidden)
        problems += [f"{p} (per-learner cases: {seeds})" for p in soundness(variant).problems]
    return problems


def soundness(exercise: Exercise) -> Soundness:
    """Prove the exercise sound: its reference, starter, known bugs and mutants graded as due."""
    # Checks and kinds the grader does not know were refused when the exercise loaded.
    problems: list[str] = []
    checked = 0

    def proven(report: GradeReport, traces: Traces) -> GradeReport:
        nonlocal checked
        false, said = false_claims(exercise, report, traces)
        problems.extend(false)
        checked += said
        problems.extend(unworded_checks(exercise, report))
        return report

    reference = proven(*told(exercise, exercise.solution_code))
    if reference.score != exercise.max_score or reference.diagnosis != "correct":
        failing = next((c.message for c in reference.checks if not c.passed), "")
        problems.append(
            f"{exercise.id}: the reference solution scores {reference.score:g}/"
            f"{exercise.max_score:g} ({reference.diagnosis}): {failing}"
        )
    trusted = trusted_trajectories(exercise)
    problems += reference_against_optimizer(exercise, trusted["reference"])
    # Unchanged, the starter is recognised by its code; edited without changing what it does,
    # by its trajectory: either way it earns nothing.
    starters = [("unchanged", judge_source(exercise, exercise.starter_code))]
    if all(trace.error is None for trace in trusted["starter"].values()):
        starters.append(("behaving as it does", judge(exercise, trusted["starter"])))
    for how, starter in starters:
        if starter.score != 0 or starter.diagnosis != "not-started":
            problems.append(
                f"{exercise.id}: the starter code scores {starter.score:g}/"
                f"{exercise.max_score:g} {how} ({starter.diagnosis}), not 0 (not-started)"
            )
    for variant in exercise.variants:
        report = proven(*told(exercise, variant.source))
        differing = [
            spec.id
            for spec in exercise.cases
            if not same_trace(trusted[variant.id][spec.id], trusted["reference"][spec.id])
        ]
        if all(
            same_trace(trusted[variant.id][spec.id], trusted["starter"][spec.id])
            for spec in exercise.cases
        ):
            problems.append(
                f"{exercise.id}: known bug {variant.id} behaves exactly like the starter code, "
                "which is not-started: remove it"
            )
            continue
        if not differing:
            problems.append(
                f"{exercise.id}: the reference solution behaves exactly like known bug "
                f"{variant.id} in every case"
            )
            continue
        shown_by = f"it differs from the reference in: {', '.join(differing) or 'no case'}"
        if report.score >= exercise.max_score:
            problems.append(
                f"{exercise.id}: known bug {variant.id} scores full marks: no case makes it "
                "fail a check"
            )
        elif report.diagnosis != variant.diagnosis:
            problems.append(
                f"{exercise.id}: known bug {variant.id} is diagnosed {report.diagnosis}, "
                f"not {variant.diagnosis} ({shown_by})"
            )
        else:
            problems += _better_explained(exercise, variant, trusted)
    verdicts = [judge_mutant(exercise, m) for m in reference_mutants(exercise)]
    for verdict in verdicts:
        if verdict.told is not None:
            proven(verdict.told, verdict.traces)
    found = Soundness(problems, verdicts, checked)
    for verdict in verdicts:
        told_it = verdict.told
        if verdict.mutant.right and told_it is not None and told_it.score < exercise.max_score:
            problems.append(
                f"{exercise.id}: a right way of writing the reference scores {told_it.score:g}/"
                f"{exercise.max_score:g} ({verdict.mutant.describe()})"
            )
    for mutant in found.survivors():
        problems.append(
            f"{exercise.id}: a mutant of the reference changes what the harness records but "
            f"passes every check ({mutant.describe()})"
        )
    return found


def _better_explained(
    exercise: Exercise, variant: Variant, trusted: dict[str, Traces]
) -> list[str]:
    """A declared bug that the grader's own explanations (the kind's models and the other
    known bugs) fit under other names only: learners who make it would be told the wrong one.
    A bug that raises is named by its failure, not by these models."""
    if any(trace.error is not None for trace in trusted[variant.id].values()):
        return []
    others = exercise.model_copy(
        update={"variants": [v for v in exercise.variants if v.id != variant.id]}
    )
    codes = {fit.codes[0] for fit in explanations(others, trusted[variant.id], trusted)}
    codes.discard("incorrect")
    if not codes or variant.diagnosis in codes:
        return []
    return [
        f"{exercise.folder}/exercise.toml: variants ({variant.id}): declared "
        f"{variant.diagnosis!r}, but the grader's own models explain its numbers and calls as "
        f"{', '.join(map(repr, sorted(codes)))}: declare that, or change the bug"
    ]


def reference_against_optimizer(exercise: Exercise, reference: Traces) -> list[str]:
    """For a kind that steps: the reference's weights after every iteration against those one
    step of the declared optimizer makes on the iteration's batch, computed here. A reference
    that steps twice, scales the loss or skips a step is refused, not believed."""
    kind = kind_of(exercise)
    if kind.replay is None:
        return []
    for spec in exercise.cases:
        data = case_data(spec)
        parameters = {name: value.clone() for name, value in data.parameters.items()}
        optimizer = declared_optimizer(spec, list(parameters.values()))
        records = reference[spec.id].records
        for iteration in range(kind.replay.iterations(spec)):
            x, y = batch_of(data.inputs[iteration % spec.steps])
            gradients = loss_and_gradients(spec, parameters, x, y)[1]
            for name, parameter in parameters.items():
                parameter.grad = gradients[name]
            if spec.max_norm is not None:
                torch.nn.utils.clip_grad_norm_(list(parameters.values()), spec.max_norm)
            optimizer.step()
            if iteration >= len(records) or not all(
                close_values(records[iteration][name], parameter)
                for name, parameter in parameters.items()
            ):
                return [
                    f"{exercise.folder}/{exercise.solution_file}: after iteration "
                    f"{iteration + 1} of case {spec.id} the reference's weights are not one step "
                    f"of the declared optimizer ({spec.describe_optimizer()}) on that batch: "
                    "make the solution zero, backward and step once per batch"
                ]
    return []
