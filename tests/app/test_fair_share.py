"""A fair share of the sandbox slots: one owner's slow submissions cannot hold every slot
while another owner's wait (app/grading/fair_share.py), with the slots of a warm pool and of
a server that runs cold sandboxes.

What differs between the two is the dispatcher's: its slots (a pool's, or a thread each when
it has none) and its threads. Which sandbox then runs a grading is no part of the order: the
"cold" runs go through the session's shared warm pool (tests/conftest.py), not a cold sandbox
each (seconds of CPU for torch, 13 of them a pass); the cold runner is held to its caps in
tests/sandbox and tests/hostile, and serves the tests marked cold_sandbox."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

import sandbox
from app.api_keys import create_api_key
from app.db import SessionFactory
from app.grading.fair_share import FairShare, OwnerKind, Taken, submission_owners
from app.grading.queue import ThreadPoolDispatcher, enqueue_after_commit
from app.grading.submissions import create_submission
from app.models import Submission, SubmissionStatus
from app.people.accounts import create_user
from app.settings import Settings
from graders.grading import POOL_PROGRAM
from tests.app.conftest import CORRECT_CODE, EXERCISE, GRADING_TIMEOUT_SECONDS
from tests.conftest import BorrowedRunner, SharedWarmPool

OWNERS = {"a1": "A", "a2": "A", "a3": "A", "b1": "B", "c1": "C"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fair_share(max_per_owner: int, clock: Clock | None = None) -> FairShare:
    return FairShare(
        lambda ids: {i: OWNERS[i] for i in ids if i in OWNERS},
        max_per_owner=max_per_owner,
        clock=clock or Clock(),
    )


def taken_id(share: FairShare) -> str | None:
    taken = share.take()
    return None if taken is None else taken.submission_id


def test_an_owner_holds_at_most_its_slots_and_others_go_first() -> None:
    share = fair_share(max_per_owner=2)
    for submission_id in ("a1", "a2", "a3"):
        share.add(submission_id)
    first, second = share.take(), share.take()
    assert first is not None and second is not None
    assert (first.submission_id, second.submission_id) == ("a1", "a2")
    assert share.take() is None  # a3 waits: A holds both of its slots, nobody else waits
    share.add("b1")
    assert taken_id(share) == "b1"  # B, arriving last, is not held up by A's backlog
    share.done(first)
    assert taken_id(share) == "a3"


def test_the_owner_with_fewer_runs_then_less_slot_time_goes_first() -> None:
    clock = Clock()
    share = fair_share(max_per_owner=4, clock=clock)
    share.add("a1")
    a1 = share.take()
    assert a1 is not None
    for submission_id in ("a2", "b1"):
        share.add(submission_id)
    assert taken_id(share) == "b1"  # A has a run in progress, B none
    clock.now += 30.0  # a1 slept 30 s in its slot
    share.done(a1)
    share.add("c1")
    # A runs nothing now, but its 30 s count against it: C, later, goes first.
    assert taken_id(share) == "c1"
    assert taken_id(share) == "a2"


def test_slot_time_fades_and_unknown_rows_are_their_own_owners() -> None:
    clock = Clock()
    share = fair_share(max_per_owner=1, clock=clock)
    share.add("a1")
    a1 = share.take()
    assert a1 is not None
    clock.now += 30.0
    share.done(a1)
    clock.now += 3600.0  # an hour later A's use has faded away: oldest first again
    for submission_id in ("a2", "c1", "gone-1", "gone-2"):
        share.add(submission_id)
    assert [taken_id(share) for _ in range(4)] == ["a2", "c1", "gone-1", "gone-2"]


def test_a_submission_added_while_owners_are_read_keeps_its_owner_s_share() -> None:
    share: FairShare

    def owners_of(ids: list[str]) -> dict[str, str]:
        if ids == ["a1"]:
            share.add("a2")  # arrives while the first take reads its owners
        return {i: OWNERS[i] for i in ids if i in OWNERS}

    share = FairShare(owners_of, max_per_owner=1, clock=Clock())
    share.add("a1")
    assert taken_id(share) == "a1"
    # a2 is A's, looked up by this take: A holds its one slot, so it waits (it was once made
    # its own owner, and so let past A's share).
    assert share.take() is None


def test_owners_are_users_an_api_keys_learners_and_anonymous_addresses(
    sessions: SessionFactory,
) -> None:
    fields_of: dict[str, dict[str, Any]]
    with sessions.begin() as session:
        user = create_user(session, email="u@example.org", name="U", password="a long password 1")
        key, _ = create_api_key(session, name="lms")
        fields_of = {
            "user": {"user_id": user.id, "learner": "l"},
            "key-l": {"api_key_id": key.id, "learner": "l"},
            "key-m": {"api_key_id": key.id, "learner": "m"},
            "address": {"client_address": "192.0.2.1", "learner": "x"},
        }
        made = {
            label: create_submission(session, exercise_id=EXERCISE, code=CORRECT_CODE, **fields)
            for label, fields in fields_of.items()
        }
        user_id, key_id = user.id, key.id
    ids = {label: submission.id for label, submission in made.items()}
    owners = submission_owners(sessions, ids.values())
    assert owners[ids["user"]] == f"{OwnerKind.USER}:{user_id}"
    assert owners[ids["key-l"]] == f"{OwnerKind.API_KEY_LEARNER}:{key_id}:l"
    # Two learners of one LMS's key are two owners: a class is not one owner.
    assert owners[ids["key-m"]] == f"{OwnerKind.API_KEY_LEARNER}:{key_id}:m"
    assert owners[ids["address"]] == f"{OwnerKind.ADDRESS}:192.0.2.1"


# Correct, but holds its slot asleep (wall time, no CPU) before it is graded.
SLEEPING_CODE = "import time\ntime.sleep(0.5)\n" + CORRECT_CODE


def queue_submissions(sessions: SessionFactory) -> dict[str, str]:
    """Three sleeping submissions of one learner's, then one of another's; id -> name."""
    names = {}
    with sessions.begin() as session:
        for name, learner, code in (
            ("a1", "learner-a", SLEEPING_CODE),
            ("a2", "learner-a", SLEEPING_CODE),
            ("a3", "learner-a", SLEEPING_CODE),
            ("b1", "learner-b", CORRECT_CODE),
        ):
            row = create_submission(session, exercise_id=EXERCISE, learner=learner, code=code)
            names[row.id] = name
    return names


@pytest.fixture(scope="module")
def one_slot_pool() -> Iterator[sandbox.Runner]:
    """A warm pool of one slot, started once for the module's tests of one slot (its zygote
    imports torch): their runs follow one another in it, as a server's submissions do."""
    runner = sandbox.open_runner("bwrap", pool=POOL_PROGRAM, pool_size=1)
    yield runner
    runner.close()


def warm_pool(request: pytest.FixtureRequest, slots: int) -> sandbox.Runner:
    """A warm pool of `slots` slots, borrowed (a test's close() leaves it open): the module's
    pool of one, or the session's shared pool of two (tests/conftest.py)."""
    if slots == 1:
        return BorrowedRunner(request.getfixturevalue("one_slot_pool"))
    shared: SharedWarmPool = request.getfixturevalue("shared_warm_pool")
    pool = shared.get()
    assert isinstance(pool, sandbox.PoolRunner) and slots == 2, pool.status
    return BorrowedRunner(pool)


@pytest.fixture(params=["warm pool", "cold"])
def grading(
    request: pytest.FixtureRequest, settings: Settings, shared_warm_pool: SharedWarmPool
) -> Iterator[tuple[Settings, sandbox.Runner]]:
    """One sandbox slot: the warm pool's (two threads to it, as the server runs), or one
    thread as a server without a pool runs it (its runs in the shared pool: see above)."""
    if request.param == "cold":
        yield (
            settings.model_copy(update={"worker_count": 1}),
            BorrowedRunner(shared_warm_pool.get()),
        )
        return
    update = {"sandbox_pool_size": 1, "worker_count": 2}
    yield settings.model_copy(update=update), warm_pool(request, slots=1)


def test_a_slow_learner_delays_another_by_one_slot_turn_at_most(
    sessions: SessionFactory,
    grading: tuple[Settings, sandbox.Runner],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings, runner = grading
    names = queue_submissions(sessions)
    started: list[str] = []

    def on_state_change(submission_id: str, status: SubmissionStatus) -> None:
        if status is SubmissionStatus.RUNNING:
            started.append(names[submission_id])

    dispatcher = ThreadPoolDispatcher(
        sessions, settings, runner=runner, on_state_change=on_state_change
    )
    # Nothing is taken before all four wait (start's sweep hands them over one by one).
    everything_waits = threading.Event()
    take = dispatcher._fair_share.take

    def take_once_everything_waits() -> Taken | None:
        everything_waits.wait()
        return take()

    monkeypatch.setattr(dispatcher._fair_share, "take", take_once_everything_waits)
    enqueue_after_commit(sessions, dispatcher)
    dispatcher.start()
    everything_waits.set()
    try:
        deadline = time.monotonic() + 4 * GRADING_TIMEOUT_SECONDS
        while True:
            with sessions() as session:
                rows = session.scalars(select(Submission)).all()
            if all(row.status == SubmissionStatus.GRADED for row in rows):
                break
            assert time.monotonic() < deadline, [(r.status, r.error_message) for r in rows]
            time.sleep(0.2)
    finally:
        dispatcher.stop()
    # First come, first served would start a2 before b1; learner B waits one turn at most.
    assert set(started[:2]) == {"a1", "b1"}, started
    assert started[2:] == ["a2", "a3"]
    scores = {names[row.id]: (row.score, row.max_score, row.diagnosis) for row in rows}
    assert all(score == maximum for score, maximum, _ in scores.values()), scores


def test_an_owner_s_next_submission_starts_only_after_its_last_one_s_release(
    sessions: SessionFactory, grading: tuple[Settings, sandbox.Runner]
) -> None:
    """With its one slot's turn taken, a learner's next submission starts when the last one's
    result is released, not when its hidden part ended: its start tells no finer time than the
    release's delays (docs/security.md#the-time-a-grading-takes)."""
    settings, runner = grading
    with sessions.begin() as session:
        ids = [
            create_submission(session, exercise_id=EXERCISE, learner="learner-a", code=code).id
            for code in (CORRECT_CODE, CORRECT_CODE + "\n# again\n", CORRECT_CODE + "\n# 3\n")
        ]
    dispatcher = ThreadPoolDispatcher(sessions, settings, runner=runner)
    enqueue_after_commit(sessions, dispatcher)
    dispatcher.start()
    try:
        deadline = time.monotonic() + 4 * GRADING_TIMEOUT_SECONDS
        while True:
            with sessions() as session:
                rows = {row.id: row for row in session.scalars(select(Submission)).all()}
            if all(row.status == SubmissionStatus.GRADED for row in rows.values()):
                break
            assert time.monotonic() < deadline, [(r.status, r.error_message) for r in rows.values()]
            time.sleep(0.2)
    finally:
        dispatcher.stop()
    ordered = sorted(rows.values(), key=lambda row: row.started_at or row.created_at)
    assert [row.id for row in ordered] == ids
    for earlier, later in itertools.pairwise(ordered):
        assert earlier.graded_at is not None and later.started_at is not None
        assert later.started_at >= earlier.graded_at, (earlier.graded_at, later.started_at)
    assert all(row.score == row.max_score for row in ordered)


# In a submission's code: the test's runner holds its run until the test lets it go.
HELD = "# held by the test\n"


class HoldingRunner:
    """The real sandbox runner, holding each run of code marked HELD until `release`: a run
    that only sleeps, kept in its slot as long as the test needs (no timing involved)."""

    def __init__(self, runner: sandbox.Runner) -> None:
        self._runner = runner
        self.released = threading.Event()
        self.holding = threading.Semaphore(0)  # one release per run held

    @property
    def name(self) -> str:
        return self._runner.name

    @property
    def status(self) -> str:
        return self._runner.status

    def run(self, program: str, inputs: Any, limits: Any, later_input: bytes | None = None) -> Any:
        if HELD.encode() in inputs["submission.py"]:
            self.holding.release()
            self.released.wait()
        return self._runner.run(program, inputs, limits, later_input)

    def close(self) -> None:
        self._runner.close()


@pytest.mark.parametrize("slots", [2, 1])
@pytest.mark.parametrize("pool", [True, False], ids=["warm pool", "cold"])
def test_one_learner_never_holds_every_slot(
    request: pytest.FixtureRequest,
    sessions: SessionFactory,
    settings: Settings,
    slots: int,
    pool: bool,
    shared_warm_pool: SharedWarmPool,
) -> None:
    """Learner A's two runs that hold their slots: with two slots, B's is graded while both
    are still held (A's second waits, a slot being kept for others); with one slot, B's goes
    before A's second (app/grading/queue.owner_share)."""
    runner = HoldingRunner(
        warm_pool(request, slots)
        if pool
        else BorrowedRunner(shared_warm_pool.get())  # cold slots, warm runs: see above
    )
    update: dict[str, Any] = {"worker_count": slots, "sandbox_pool_size": slots if pool else 0}
    with sessions.begin() as session:
        a1, a2 = (
            create_submission(
                session, exercise_id=EXERCISE, learner="learner-a", code=CORRECT_CODE + HELD + n
            ).id
            for n in ("# 1\n", "# 2\n")
        )
    started: list[str] = []

    def on_state_change(submission_id: str, status: SubmissionStatus) -> None:
        if status is SubmissionStatus.RUNNING:
            started.append(submission_id)

    dispatcher = ThreadPoolDispatcher(
        sessions, settings.model_copy(update=update), runner=runner, on_state_change=on_state_change
    )
    enqueue_after_commit(sessions, dispatcher)
    dispatcher.start()
    try:
        assert runner.holding.acquire(timeout=GRADING_TIMEOUT_SECONDS)  # a1 is held in its slot
        with sessions.begin() as session:
            b1 = create_submission(
                session, exercise_id=EXERCISE, learner="learner-b", code=CORRECT_CODE
            ).id
        if slots == 2:
            # B is graded while A's first run still holds its slot, and A's second waits.
            wait_for(sessions, b1, SubmissionStatus.GRADED)
            assert len(set(started) & {a1, a2}) == 1
            assert not runner.holding.acquire(blocking=False)
        runner.released.set()
        for submission_id in (a1, a2, b1):
            wait_for(sessions, submission_id, SubmissionStatus.GRADED)
    finally:
        runner.released.set()
        dispatcher.stop()
        runner.close()
    # Whichever of A's went first, B's went next.
    assert started[1] == b1 and sorted(started[::2]) == sorted([a1, a2]), started


def wait_for(sessions: SessionFactory, submission_id: str, status: SubmissionStatus) -> None:
    deadline = time.monotonic() + 2 * GRADING_TIMEOUT_SECONDS
    while True:
        with sessions() as session:
            row = session.get(Submission, submission_id)
            assert row is not None
            if row.status == status:
                return
            assert time.monotonic() < deadline, (row.status, row.error_message)
        time.sleep(0.1)
