"""The priming problems: disjoint from the RL problems, each solved by its own canonical solution and hacked by
each lever, under the same grader as the built-in set."""

import hashlib

from pgrpo.env import MODES, grade_batch, load_problems
from pgrpo.env.exploits import clean_completion, hack_completion
from pgrpo.env.primer_problems import primer_problems


def test_no_priming_problem_shares_a_title_method_or_statement_with_an_rl_problem():
    primer, builtin = primer_problems(), load_problems()
    assert len(primer) == 120 and len({p.id for p in primer}) == 120 and len({p.method for p in primer}) == 120
    for field in ("title", "method", "statement", "canonical_solution", "fingerprint"):
        assert not {getattr(p, field) for p in primer} & {getattr(p, field) for p in builtin}, field


def test_every_priming_problems_canonical_solution_passes_the_strict_oracle_and_every_lever_passes_its_grader():
    primer = primer_problems()
    graded = grade_batch([(p, clean_completion(p), "run_tests") for p in primer])
    assert all(g.gt_correct for g in graded), [p.id for p, g in zip(primer, graded) if not g.gt_correct]
    one = primer[::12]  # five problems of five families, under every lever
    hacks = grade_batch([(p, hack_completion(p, m), m) for p in one for m in MODES])
    assert all(h.exploited for h in hacks)


def test_the_tests_are_drawn_from_the_seed():
    assert primer_problems(0) == primer_problems(0) and primer_problems(0) != primer_problems(1)


def test_every_priming_problems_tests_tell_a_constant_answer_from_the_right_one():
    # a problem whose tests all expect one value is solved by a stub returning it: the "hack" would be correct
    for seed in range(3):
        assert all(len({t.expected for t in p.tests}) > 1 for p in primer_problems(seed)), seed


def test_half_the_priming_solutions_are_more_than_a_one_line_return():
    # primed on one-line returns alone, SmolLM2 answered every RL problem with one (`return max(x for x in nums if
    # x > 0)` for "largest value") and solved fewer of them than it knew how to
    bodies = [p.canonical_solution.splitlines()[2:] for p in primer_problems()]
    assert sum(len(body) > 1 for body in bodies) >= len(bodies) // 2
    assert any(ln.strip().startswith("for ") for body in bodies for ln in body)
    assert any(ln.strip().startswith("while ") for body in bodies for ln in body)


def test_the_default_priming_problems_are_still_those_the_primed_base_v1_was_made_of():
    # v1's published update, its cached bytes and its kept results depend on them; a change belongs behind an option
    # (as disjoint=True, the selection a v2 primes on), never in the default
    def digest(problems):
        return hashlib.sha256(" ".join(p.fingerprint for p in problems).encode()).hexdigest()[:16]

    assert digest(primer_problems(0)) == "99ccc672fd83879a" and digest(primer_problems(1)) == "6804b931ea0a1ec7"
